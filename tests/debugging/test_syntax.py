"""Parsing in the debugging package takes turns (debugging.syntax): a job handles libraries in threads, and CPython
3.11 fails two threads converting trees at once with a spurious SystemError."""
from __future__ import annotations

import ast
from pathlib import Path

import flawforge.debugging

PACKAGE = Path(flawforge.debugging.__file__).parent


def test_no_module_of_the_package_parses_or_compiles_a_tree_but_through_syntax():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "syntax.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} ast.parse")
    assert not found


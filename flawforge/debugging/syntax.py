"""The one way this package turns Python source into trees and trees into code.

CPython 3.11 counts the depth of the tree it is converting between C and Python objects in state every thread shares,
so two threads converting at once can fail with a spurious "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905): a library's run failed so while another library's was parsing. A job's libraries are handled
in threads; here they take turns, which costs nothing, as both conversions hold the GIL throughout.
"""
from __future__ import annotations

import ast
import threading

_TURN = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _TURN:
        return ast.parse(source, filename, mode)


def compile_tree(tree: ast.AST, filename: str):
    with _TURN:
        return compile(tree, filename, "exec", dont_inherit=True)

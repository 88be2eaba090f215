"""Sandboxed traces of every real formalization template equal plain in-process execution, types included.

The in-process reference does not use the sandbox's instrumentation: it runs `solve` under
sys.settrace and reads each assignment's value from the frame once its statement is done.
"""
from __future__ import annotations

import ast
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from flawforge.proto.values import TypedValue

CHUNK = 200


def reference_run(source: str):
    """(steps [(name, line, value)], return value, (exception type, line) or None) from plain execution."""
    function = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "solve")
    assigns = [n for n in ast.walk(function) if isinstance(n, ast.Assign)]

    def statement_at(line: int):
        return next((a for a in assigns if a.lineno <= line <= a.end_lineno), None)

    steps, pending, failure = [], None, None

    def local(frame, event, arg):
        nonlocal pending, failure
        if event == "exception":
            pending = None
            failure = (arg[0].__name__, frame.f_lineno)
        elif event in ("line", "return"):
            current = statement_at(frame.f_lineno) if event == "line" else None
            if pending is not None and current is not pending:
                steps.extend((t.id, pending.lineno, frame.f_locals[t.id]) for t in pending.targets)
            pending = current
        return local

    def start(frame, event, arg):
        return local if frame.f_code.co_name == "solve" else None

    namespace: dict = {"__name__": "template"}
    exec(compile(source, "template.py", "exec"), namespace)
    sys.settrace(start)
    try:
        value = namespace["solve"]()
    except Exception:
        value = None
    finally:
        sys.settrace(None)
    return steps, value, failure


def template_files(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "formalization-templates").glob("tier*/*/*.py"))


@pytest.mark.slow
def test_every_template_traces_exactly_as_in_process(sandbox, shared_data):
    files = template_files(shared_data)
    assert len(files) > 4000
    sources = [f.read_text() for f in files]
    results = []
    for start in range(0, len(sources), CHUNK):
        chunk = sources[start:start + CHUNK]
        results += sandbox.trace_batch(chunk[0], chunk[1:])
    assert len(results) == len(files)

    mismatches = []
    for path, source, result in zip(files, sources, results):
        steps, value, failure = reference_run(source)
        expected = [(name, line, TypedValue.of(v)) for name, line, v in steps]
        got = [(s.name, s.line, s.value) for s in result.trace]
        same_types = all(type(v).__name__ == s.value.type_name if s.value.type == "other"
                         else type(v) is type(s.value.to_python()) for (_, _, v), s in zip(steps, result.trace))
        if failure is None:
            ok = result.outcome == "ok" and result.return_value == TypedValue.of(value)
        else:
            ok = result.outcome == "error" and (result.error.type, result.error.line) == failure
        if not (ok and got == expected and same_types):
            mismatches.append(f"{path}: {result.outcome} {result.detail}")
    assert not mismatches, f"{len(mismatches)} templates differ, e.g. {mismatches[:5]}"


def test_reference_runner_sees_types(shared_data):
    """The reference itself distinguishes int, float and Fraction (so the comparison above can fail)."""
    source = "from fractions import Fraction\ndef solve():\n    a = 1\n    b = a / 2\n    c = Fraction(a, 3)\n" \
             "    answer = b + 1\n    return answer\n"
    steps, value, failure = reference_run(source)
    assert [(n, line, type(v)) for n, line, v in steps] == [("a", 3, int), ("b", 4, float), ("c", 5, Fraction),
                                                            ("answer", 6, float)]
    assert value == 1.5 and failure is None




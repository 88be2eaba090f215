"""A unit run after each attack: it must see a clean interpreter and produce its exact trace."""
from __future__ import annotations

from flawforge.proto.values import TypedValue

SOURCE = '''\
import builtins
import json
import math
import sys
from fractions import Fraction


def solve():
    clean = builtins.print is print and int("7") == 7 and math.sqrt(16.0) == 4.0
    clean = clean and sys.getrecursionlimit() == 1000 and json.loads("[1]") == [1]
    half = Fraction(1, 2)
    total = half + Fraction(1, 3)
    ratio = 7 / 2
    flag = clean and total == Fraction(5, 6)
    answer = total * 6
    return answer
'''

EXPECTED_TRACE = [
    ("clean", 9, TypedValue.of(True)),
    ("clean", 10, TypedValue.of(True)),
    ("half", 11, TypedValue(type="fraction", value=[1, 2])),
    ("total", 12, TypedValue(type="fraction", value=[5, 6])),
    ("ratio", 13, TypedValue(type="float", value=3.5)),
    ("flag", 14, TypedValue.of(True)),
    ("answer", 15, TypedValue(type="fraction", value=[5, 1])),
]


def check(sandbox) -> None:
    result = sandbox.trace_call(SOURCE)
    assert result.outcome == "ok", result.detail
    assert [(s.name, s.line, s.value) for s in result.trace] == EXPECTED_TRACE
    assert result.return_value == TypedValue(type="fraction", value=[5, 1])

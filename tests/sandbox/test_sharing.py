"""Which programs a batch unit admits: plain arithmetic yes, anything that reaches what programs share no."""
from __future__ import annotations

import ast

import pytest

from flawforge.math.validation import find_solve, original_trace_program
from flawforge.sandbox.runtime.sharing import SharedState, reason_to_run_alone

ADMITTED = {
    "template": "from fractions import Fraction\n\n\ndef solve():\n    a = Fraction(3, 4)\n    b = round(a * 8)\n"
                "    answer = max(a, b) // 2\n    return answer\n",
    "math": "import math as m\nfrom math import ceil\n\n\ndef solve():\n    return ceil(m.sqrt(10)) + m.pi\n",
    "narrow handler": "def solve():\n    try:\n        return 1 / 0\n    except (ZeroDivisionError, ValueError) as e:\n"
                      "        return str(e.args)\n",
    "own class": "class Money:\n    def __init__(self, cents):\n        self.cents = cents\n\n"
                 "    def __add__(self, other):\n        return Money(self.cents + other.cents)\n\n\n"
                 "def solve():\n    return (Money(1) + Money(2)).cents\n",
    "comprehensions and lambdas": "def solve():\n    f = lambda x: x * 2\n    return sum(f(i) for i in range(3))\n",
}

RUN_ALONE = {
    "import os\n": "imports os",
    "import fractions\n": "imports fractions",
    "from fractions import _RATIONAL_FORMAT\n": "imports _RATIONAL_FORMAT from fractions",
    "x = getattr(1, 'real')\n": "uses getattr",
    "x = (1).__class__\n": "uses the attribute __class__",
    "x = __builtins__\n": "uses __builtins__",
    "g = (x for x in [1])\nf = g.gi_frame\n": "uses the attribute gi_frame",
    "from fractions import Fraction\nFraction.register(int)\n": "uses the attribute register",
    "try:\n    pass\nexcept Exception:\n    pass\n": "catches broadly enough to hide a MemoryError",
    "try:\n    pass\nexcept:\n    pass\n": "catches broadly enough to hide a MemoryError",
    "ValueError = Exception\n": "rebinds ValueError",
    "def f(ValueError=Exception):\n    pass\n": "rebinds ValueError",
    "class Trap:\n    def __del__(self):\n        pass\n": "uses __del__",
    "class Meta(metaclass=type):\n    pass\n": "gives a class keywords",
    "def gen():\n    yield 1\n": "uses Yield",
    "with x:\n    pass\n": "uses With",
}


@pytest.mark.parametrize("source", ADMITTED.values(), ids=ADMITTED.keys())
def test_admits_plain_programs(source):
    assert reason_to_run_alone(ast.parse(source)) is None


def test_admits_the_validation_scoring_program():
    solve = find_solve(ADMITTED["template"])
    assert reason_to_run_alone(ast.parse(original_trace_program(solve))) is None


@pytest.mark.parametrize("source, reason", RUN_ALONE.items(), ids=RUN_ALONE.values())
def test_programs_that_reach_shared_state_run_alone(source, reason):
    assert reason_to_run_alone(ast.parse(source)) == reason


def test_shared_state_notices_a_replaced_attribute():
    import math
    state = SharedState()
    assert not state.changed()
    original = math.floor
    math.floor = math.ceil
    try:
        assert state.changed()
    finally:
        math.floor = original
    assert not state.changed()

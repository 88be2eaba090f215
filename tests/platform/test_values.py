"""Typed values survive JSON exactly, types included."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

from flawforge.proto.values import TypedValue


@pytest.mark.parametrize("value", [0, -3, 10**30, 7**20000, -(7**20000), 2.5, 0.1 + 0.2, -0.0, Fraction(3, 4),
                                   Fraction(-10, 4), True, False, "12", "", None], ids=lambda v: type(v).__name__)
def test_round_trip_is_exact_and_keeps_the_type(value):
    typed = TypedValue.of(value)
    back = TypedValue.model_validate_json(typed.model_dump_json()).to_python()
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_non_finite_floats_and_other_objects():
    assert TypedValue.of(float("inf")).to_python() == float("inf")
    assert math.isnan(TypedValue.of(float("nan")).to_python())
    other = TypedValue.of([1, 2])
    assert (other.type, other.type_name, other.value) == ("other", "list", "[1, 2]")

"""One rule for exact typed values: a value typed in the sandbox's unit and one typed in the service agree."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from flawforge.proto.values import TypedValue, as_text, identical
from flawforge.sandbox.outcome import typed
from flawforge.sandbox.runtime import wire

VALUES = [0, -1, True, None, 1.5, float("inf"), "text", "\ud800 lone", b"\xff", [1, 2], (1 << 14000) - 1, 1 << 14000,
          -(1 << 20000), Fraction(1, 3), Fraction(10 ** 5000 + 1, 3 ** 8000), Fraction(-(1 << 14001), 7)]


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(VALUES)])
def test_the_unit_and_the_service_type_a_value_alike(value):
    over_the_wire = typed(json.loads(json.dumps(wire.encode(value))))
    assert over_the_wire == TypedValue.of(value)
    dumped = over_the_wire.model_dump_json()
    parsed = TypedValue.model_validate_json(dumped)
    assert parsed.model_dump_json() == dumped and json.loads(dumped)
    if over_the_wire.type != "other":
        assert identical(parsed.to_python(), value)


def test_big_ints_travel_as_hex_past_the_one_threshold():
    assert TypedValue.of((1 << wire.MAX_DECIMAL_INT_BITS) - 1).value == (1 << wire.MAX_DECIMAL_INT_BITS) - 1
    assert TypedValue.of(1 << wire.MAX_DECIMAL_INT_BITS).value == hex(1 << wire.MAX_DECIMAL_INT_BITS)
    assert TypedValue.of(Fraction(1 << wire.MAX_DECIMAL_INT_BITS, 3)).value == [hex(1 << wire.MAX_DECIMAL_INT_BITS), 3]


def test_same_value_same_type():
    assert identical(1, 1) and identical(Fraction(1, 2), Fraction(2, 4)) and identical(0.5, 0.5)
    assert not identical(1, 1.0) and not identical(1, True) and not identical(0.0, -0.0)
    assert not identical(Fraction(2, 1), 2)


def test_text_with_lone_surrogates_is_escaped():
    assert as_text("plain é") == "plain é"
    assert as_text("a\ud800b") == "a\\ud800b"

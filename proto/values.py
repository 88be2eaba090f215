"""Exact, typed values as they cross process and service boundaries.

Traces must keep int, float, Fraction, bool and str apart and exact; a stringified
value loses that. Untrusted programs produce these values, so the wire format is
plain JSON (never pickle).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal

from flawforge.proto.base import Model


class TypedValue(Model):
    type: Literal["int", "float", "fraction", "bool", "str", "none", "other"]
    # int: JSON integer, or a hex string past JSON parsers' digit limits; float: JSON number, or "inf"/"-inf"/"nan";
    # fraction: [numerator, denominator]; other: repr() text, informational only.
    value: Any = None
    type_name: str | None = None  # the Python type's name when type is "other"

    @classmethod
    def of(cls, obj: Any) -> "TypedValue":
        if obj is None:
            return cls(type="none")
        if isinstance(obj, bool):
            return cls(type="bool", value=obj)
        if isinstance(obj, int):
            value = int(obj)
            # Python refuses to parse decimal ints over 4,300 digits; hex has no such limit.
            return cls(type="int", value=hex(value) if value.bit_length() > 12_000 else value)
        if isinstance(obj, float):
            return cls(type="float", value=obj if math.isfinite(obj) else repr(obj))
        if isinstance(obj, Fraction):
            return cls(type="fraction", value=[obj.numerator, obj.denominator])
        if isinstance(obj, str):
            return cls(type="str", value=str(obj))
        return cls(type="other", value=repr(obj)[:200], type_name=type(obj).__name__)

    def to_python(self) -> Any:
        if self.type == "none":
            return None
        if self.type == "bool":
            return bool(self.value)
        if self.type == "int":
            return int(self.value, 16) if isinstance(self.value, str) else int(self.value)
        if self.type == "float":
            return float(self.value)
        if self.type == "fraction":
            return Fraction(int(self.value[0]), int(self.value[1]))
        if self.type == "str":
            return str(self.value)
        return self.value


class TraceStep(Model):
    """One assignment, in execution order."""

    name: str
    value: TypedValue
    line: int

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
from flawforge.sandbox.runtime.wire import REPR_CHARS, decode_int, encode_int


class TypedValue(Model):
    type: Literal["int", "float", "fraction", "bool", "str", "none", "other"]
    # int: JSON integer, or a hex string past JSON parsers' digit limits; float: JSON number, or "inf"/"-inf"/"nan";
    # fraction: [numerator, denominator], each an int as above; other: repr() text, informational only.
    # The rules are the sandbox's wire rules (flawforge.sandbox.runtime.wire), so a value reads the same
    # whichever side typed it.
    value: Any = None
    type_name: str | None = None  # the Python type's name when type is "other"

    @classmethod
    def of(cls, obj: Any) -> "TypedValue":
        if obj is None:
            return cls(type="none")
        if isinstance(obj, bool):
            return cls(type="bool", value=obj)
        if isinstance(obj, int):
            return cls(type="int", value=encode_int(int(obj)))
        if isinstance(obj, float):
            return cls(type="float", value=obj if math.isfinite(obj) else repr(obj))
        if isinstance(obj, Fraction):
            return cls(type="fraction", value=[encode_int(obj.numerator), encode_int(obj.denominator)])
        if isinstance(obj, str):
            if is_text(obj):
                return cls(type="str", value=str(obj))
            # lone surrogates: no JSON encoder or model can carry it as text; its repr escapes them
            return cls(type="other", value=repr(obj)[:REPR_CHARS], type_name="str")
        return cls(type="other", value=repr(obj)[:REPR_CHARS], type_name=type(obj).__name__)

    def to_python(self) -> Any:
        if self.type == "none":
            return None
        if self.type == "bool":
            return bool(self.value)
        if self.type == "int":
            return decode_int(self.value)
        if self.type == "float":
            return float(self.value)
        if self.type == "fraction":
            return Fraction(decode_int(self.value[0]), decode_int(self.value[1]))
        if self.type == "str":
            return str(self.value)
        return self.value


def is_text(text: str) -> bool:
    """Whether a str is Unicode text (UTF-8 can encode it): a program's str may hold lone surrogates."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_text(text: str) -> str:
    """The str with any lone surrogate written as its escape (\\udc80): fit for any JSON encoder and model."""
    return text if is_text(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def identical(left: Any, right: Any) -> bool:
    """The same value of the same type: 1 and 1.0 differ, and so do 0.0 and -0.0."""
    return type(left) is type(right) and left == right and (
        type(left) is not float or math.copysign(1.0, left) == math.copysign(1.0, right))


class TraceStep(Model):
    """One assignment, in execution order."""

    name: str
    value: TypedValue
    line: int

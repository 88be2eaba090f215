"""How values are written in solution text.

Integers and whole floats print without a decimal point (55.0 -> '55'), fractions as 'n/d'
(or their whole value), and other floats exactly when they have at most MAX_EXACT_DECIMALS
decimals (0.125 -> '0.125'); only a float that needs more is rounded to ROUNDED_DECIMALS
decimals (10/3 -> '3.33'). A reader takes a result shown rounded for what rounds to it, but an
operand as written (flawforge.math.proofread): a solution that computes with a rounded value
does not read as true, and is not kept.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

MAX_EXACT_DECIMALS = 4
ROUNDED_DECIMALS = 2


def show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    # Fraction last: it is an abstract base class's subclass, slow to test other values against.
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        if value.is_integer():
            return str(int(value))
        exact = round(value, MAX_EXACT_DECIMALS)
        if abs(exact - value) <= 1e-9 * max(1.0, abs(value)):
            return _trim(f"{exact:.{MAX_EXACT_DECIMALS}f}")
        return _trim(f"{value:.{ROUNDED_DECIMALS}f}", keep=ROUNDED_DECIMALS)
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return str(value)


def show_answer(value: Any) -> str | None:
    """A final answer as a student writes one: a number with decimals, never a fraction (64/5 -> '12.8').
    None for a fraction with no exact decimal of at most MAX_EXACT_DECIMALS places (1/81)."""
    if isinstance(value, Fraction) and value.denominator != 1:
        scaled = value * 10**MAX_EXACT_DECIMALS
        if scaled.denominator != 1:
            return None
        return _trim(f"{'-' if value < 0 else ''}{abs(scaled.numerator) // 10**MAX_EXACT_DECIMALS}."
                     f"{abs(scaled.numerator) % 10**MAX_EXACT_DECIMALS:0{MAX_EXACT_DECIMALS}d}")
    return show(value)


def show_percent(value: Any) -> str | None:
    """A share as a percentage ("50%" for 1/2, "12.5%" for 0.125); None where it takes more than two decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) or not math.isfinite(value):
        return None
    points = Fraction(repr(value)) * 100 if isinstance(value, float) else Fraction(value) * 100
    scaled = points * 100
    if scaled.denominator != 1:
        return None
    return f"{show_answer(points)}%"


def _trim(text: str, keep: int = 0) -> str:
    """Drops trailing zeros after the decimal point, keeping at least `keep` decimals."""
    whole, _, decimals = text.partition(".")
    decimals = decimals.rstrip("0")
    if len(decimals) < keep:
        decimals = decimals.ljust(keep, "0")
    return f"{whole}.{decimals}" if decimals else whole

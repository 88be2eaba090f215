"""GSM8K calculator annotations `<<expr=value>>`: finding them and checking that they are true.

An annotation is true when its expression evaluates to the value shown. Evaluation is exact
(every number is read as a fraction). A number shown with exactly ROUNDED_DECIMALS decimals
may have been rounded for display (1/3 is shown as 0.33), so it stands for the interval of
numbers that round to it; the annotation is true when the expression's interval and the
value's interval meet. Every other number is exact, so a miscalculation by any amount is
caught.
"""
from __future__ import annotations

import ast
import math
import re
from functools import lru_cache
from fractions import Fraction
from typing import Any, Callable, NamedTuple

from flawforge.math.arithmetic import Evaluator, UnsafeExpression, parse_expression

ROUNDED_DECIMALS = 2
_HALF_STEP = Fraction(1, 2 * 10**ROUNDED_DECIMALS)

ANNOTATION = re.compile(r"<<(.*?)>>")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_DECIMALS = re.compile(r"\.(\d+)$")
_PLAIN_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?")
_PYTHON_NUMBER = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")  # a literal Python reads as one int or float


class Interval(NamedTuple):
    """A closed interval of exact numbers; a point when lo == hi. (A tuple: one is made for every number and
    every operation of every annotation checked.)"""

    lo: Fraction
    hi: Fraction

    @classmethod
    def point(cls, value: Fraction | int) -> "Interval":
        return cls(Fraction(value), Fraction(value))

    def _combine(self, other: "Interval", op: Callable[[Fraction, Fraction], Fraction]) -> "Interval":
        if self.lo is self.hi and other.lo is other.hi:  # two exact numbers (most): one corner
            value = op(self.lo, other.lo)
            return Interval(value, value)
        corners = [op(a, b) for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Interval(min(corners), max(corners))

    def __add__(self, other: "Interval") -> "Interval":
        return Interval(self.lo + other.lo, self.hi + other.hi)

    def __sub__(self, other: "Interval") -> "Interval":
        return Interval(self.lo - other.hi, self.hi - other.lo)

    def __mul__(self, other: "Interval") -> "Interval":
        return self._combine(other, lambda a, b: a * b)

    def __truediv__(self, other: "Interval") -> "Interval":
        if other.lo <= 0 <= other.hi:
            raise ZeroDivisionError("division by an interval containing zero")
        return self._combine(other, lambda a, b: a / b)

    def __floordiv__(self, other: "Interval") -> "Interval":
        quotient = self / other
        return Interval(Fraction(math.floor(quotient.lo)), Fraction(math.floor(quotient.hi)))

    def __mod__(self, other: "Interval") -> "Interval":
        if not (self.is_point and other.is_point):
            raise TypeError("% of a rounded number")
        return Interval.point(self.lo % other.lo)

    def __pow__(self, other: "Interval") -> "Interval":
        exponent = other.lo
        if not other.is_point or exponent.denominator != 1:
            raise TypeError("only whole exponents")
        if self.is_point:
            return Interval.point(self.lo ** int(exponent))
        if self.lo < 0 or exponent < 0:
            raise TypeError("power of a rounded number")
        return Interval(self.lo ** int(exponent), self.hi ** int(exponent))

    def __neg__(self) -> "Interval":
        return Interval(-self.hi, -self.lo)

    def __pos__(self) -> "Interval":
        return self

    def __abs__(self) -> "Interval":
        if self.lo >= 0:
            return self
        if self.hi <= 0:
            return -self
        return Interval(Fraction(0), max(-self.lo, self.hi))

    @property
    def is_point(self) -> bool:
        return self.lo == self.hi

    def meets(self, other: "Interval") -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


def _monotone(function: Callable[..., Any]) -> Callable[..., Interval]:
    """Lifts a non-decreasing function of its first argument to intervals (extra args exact)."""
    def lifted(value: Interval, *rest: Interval) -> Interval:
        extra = [int(arg.lo) for arg in rest]
        return Interval(Fraction(function(value.lo, *extra)), Fraction(function(value.hi, *extra)))
    return lifted


def _fraction(numerator: Interval, denominator: Interval | None = None) -> Interval:
    return numerator if denominator is None else numerator / denominator


class _IntervalEvaluator(Evaluator):
    functions = {
        "int": _monotone(int), "float": lambda value: value, "round": _monotone(round), "abs": abs,
        "min": lambda *values: Interval(min(v.lo for v in values), min(v.hi for v in values)),
        "max": lambda *values: Interval(max(v.lo for v in values), max(v.hi for v in values)),
        "Fraction": _fraction, "math.ceil": _monotone(math.ceil), "math.floor": _monotone(math.floor),
    }

    def __init__(self, text: str):
        super().__init__({})
        self.text = text
        # ast's offsets count UTF-8 bytes on a line: in one line of ASCII they index the text itself
        self.plain = text.isascii() and "\n" not in text

    def constant(self, node: ast.Constant) -> Interval:
        super().constant(node)
        if self.plain:
            literal = self.text[node.col_offset:node.end_col_offset]
        else:
            literal = ast.get_source_segment(self.text, node) or repr(node.value)
        return number_interval(literal)

    @staticmethod
    def check_exponent(exponent: Any) -> None:
        Evaluator.check_exponent(exponent.lo)


def number_interval(literal: str) -> Interval:
    """The numbers a shown number may stand for (see the module docstring)."""
    plain = _PLAIN_NUMBER.fullmatch(literal)
    if plain:  # Fraction() of the text, without its general parser
        whole, decimals = plain.groups()
        value = Fraction(int(whole + decimals), 10 ** len(decimals)) if decimals else Fraction(int(whole))
    else:
        value = Fraction(literal)
    match = _DECIMALS.search(literal)
    if match and len(match.group(1)) == ROUNDED_DECIMALS:
        return Interval(value - _HALF_STEP, value + _HALF_STEP)
    return Interval(value, value)


def normalize(text: str) -> str:
    """Annotation text as a Python expression: no '$' or thousands separators, 'x%' -> (x/100)."""
    text = text.replace("$", "").replace("×", "*").replace("÷", "/")
    text = _THOUSANDS.sub("", text)
    return _PERCENT.sub(r"(\1/100)", text)


@lru_cache(maxsize=8192)  # a flawed line's calculations recur across the mutants of a problem
def interval_of(text: str) -> Interval:
    """The interval of values an annotation side may denote; raises UnsafeExpression."""
    normalized = normalize(text)
    if _PYTHON_NUMBER.fullmatch(normalized.strip()):  # the value side, mostly: what parsing it would give
        return number_interval(normalized.strip())
    node = parse_expression(normalized)
    # get_source_segment needs the text exactly as parsed
    value = _IntervalEvaluator(normalized.strip()).evaluate(node)
    if not isinstance(value, Interval):
        raise UnsafeExpression(f"not a number: {text!r}")
    return value


class Annotation(NamedTuple):
    """One `<<expression=shown>>` of a line (a tuple: every rendered line of every mutant is read again)."""

    expression: str
    shown: str
    start: int  # offset of '<<' in the line
    end: int    # offset after '>>'

    def check(self) -> str | None:
        """None when the expression evaluates to the value shown, else why not."""
        return _check(self.expression, self.shown)

    @property
    def is_true(self) -> bool:
        return self.check() is None


@lru_cache(maxsize=8192)  # solutions of one problem repeat most of their annotations
def _check(expression: str, shown: str) -> str | None:
    try:
        computed, value = interval_of(expression), interval_of(shown)
    except (UnsafeExpression, ZeroDivisionError, TypeError, ValueError, OverflowError) as exc:
        return f"<<{expression}={shown}>> cannot be evaluated: {exc}"
    if computed.meets(value):
        return None
    return f"<<{expression}={shown}>>: the expression is {_show(computed)}, not {shown}"


def _show(interval: Interval) -> str:
    if interval.is_point:
        value = interval.lo
        return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
    return f"{float(interval.lo):g}..{float(interval.hi):g}"


def find_annotations(line: str) -> list[Annotation]:
    """Every `<<expr=value>>` in a line, split at its last '='."""
    found = []
    for match in ANNOTATION.finditer(line):
        body = match.group(1)
        expression, equals, shown = body.rpartition("=")
        if equals:
            found.append(Annotation(expression=expression, shown=shown, start=match.start(), end=match.end()))
        else:
            found.append(Annotation(expression=body, shown="", start=match.start(), end=match.end()))
    return found


def false_annotations(text: str) -> list[tuple[int, str]]:
    """(1-based line number, reason) of every annotation in a solution that is not true."""
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        for annotation in find_annotations(line):
            reason = annotation.check()
            if reason:
                problems.append((number, reason))
    return problems


# A calculation written in the prose: "30 - 26 = 4", "$50 x 20 = $1,000", "2 * 23 - 4 = 46 - 4 = 42".
# "1/4" written without spaces is one number (8 / 1/4 is 32).
_NUMBER = r"\$?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+(?![.\d]))?%?"
_OPERATOR = r"[-+*/x×÷]"
_EXPRESSION = rf"{_NUMBER}(?:\s*{_OPERATOR}\s*{_NUMBER})*"
PROSE_CALCULATION = re.compile(rf"(?<![\w.,/$]){_EXPRESSION}(?:\s*=\s*{_EXPRESSION})+(?![\w/]|[.,]\d)")
_CONTINUES_A_CALCULATION = re.compile(rf"(?:^|\s){_OPERATOR}\s*$")
_OPERATOR_SIGN = re.compile(_OPERATOR)
_WRITTEN_FRACTION = re.compile(r"(?<![\d.])(\d+/\d+)(?![.\d])")


def false_equations(line: str) -> list[str]:
    """Calculations written in the prose of a line (an annotation counts as the value it
    shows) in which some side does not equal the last.

    Only whole calculations count: "60 students x 2/3 = 40" is not read as "2/3 = 40". A
    percentage on the last side alone is percentage points ("100 - 50 = 50%")."""
    prose = ANNOTATION.sub(" ", line)
    if "=" not in prose:  # every calculation has one; most lines' prose has none
        return []
    wrong = []
    for match in PROSE_CALCULATION.finditer(prose):
        sides = [side.strip() for side in match.group(0).split("=")]
        if not any(_OPERATOR_SIGN.search(side.replace("$", "")) for side in sides) \
                or _CONTINUES_A_CALCULATION.search(prose[:match.start()]):
            continue
        if not any("%" in side for side in sides[:-1]):
            sides[-1] = sides[-1].replace("%", "")
        sides = [_WRITTEN_FRACTION.sub(r"(\1)", side.replace("x", "*")) for side in sides]
        try:
            result = interval_of(sides[-1])
            if not all(interval_of(side).meets(result) for side in sides[:-1]):
                wrong.append(match.group(0))
        except (UnsafeExpression, ZeroDivisionError, TypeError, ValueError, OverflowError):
            wrong.append(match.group(0))
    return wrong

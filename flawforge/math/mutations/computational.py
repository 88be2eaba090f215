"""Computational errors: one line of the solution is miscalculated.

The line keeps its formula and shows a wrong value; later lines use that value. In the code
the assignment's right-hand side becomes the wrong value (or, for multiplication by the
reciprocal, the same product with the reciprocal factor). Which errors apply depends on the
value's type and on the operation that produced it.
"""
from __future__ import annotations

import ast
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, Iterable, Mapping

from flawforge.math.arithmetic import UnsafeExpression, evaluate, is_int_like, is_number
from flawforge.math.display import show
from flawforge.math.mutations.base import Edit, Mutation, literal
from flawforge.math.program import Site, copy_at, expression_nodes, replace_node
from flawforge.math.reconstruct import TextChange

class Miscalculate(TextChange):
    """The line keeps its formula; only the value it shows is wrong: its annotation of the target is false."""

    __slots__ = ()

    def annotations(self, target: str, expression: ast.expr) -> tuple[Mapping[str, ast.expr], str | None]:
        return {}, target  # the original code: the line's formula stays


MISCALCULATE = Miscalculate()  # it has no fields: every computational edit shares this one

ADDITIVE = ("+", "-")
MULTIPLICATIVE = ("*", "/", "//")
ARITHMETIC = ADDITIVE + MULTIPLICATIVE


class ComputationalMutation(Mutation):
    family = "computational"
    operations: ClassVar[tuple[str, ...]] = ARITHMETIC

    def applies(self, site: Site) -> bool:
        assignment = site.assignment
        return (assignment.step.startswith("L") and not assignment.is_input
                and assignment.operation in self.operations and is_number(site.value) and self.accepts(site.value))

    def accepts(self, value: Any) -> bool:
        """The type rule: which values this error can hit."""
        raise NotImplementedError

    def modify(self, site: Site) -> Iterable[Edit]:
        correct_shown = show(site.value)
        for prior, params, wrong in self.wrong_values(site.value):
            if wrong != site.value:
                yield Edit(params={**params, "correct_shown": correct_shown, "wrong_shown": show(wrong)},
                           expression=literal(wrong), text=MISCALCULATE, prior=prior)

    def wrong_values(self, value: Any) -> Iterable[tuple[float, dict, Any]]:
        """(prior, params, wrong value) for each way to miscalculate `value`."""
        raise NotImplementedError


def _same_type(value: Any, whole: int) -> Any:
    """A whole number with the type of `value` (int, float or Fraction)."""
    if isinstance(value, float):
        return float(whole)
    if isinstance(value, Fraction):
        return Fraction(whole)
    return whole


def _decimal(value: float) -> Decimal:
    return Decimal(repr(value))


class OffByN(ComputationalMutation):
    name = "off_by_n"
    explanation = "Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} (off by {n})."
    operations = ADDITIVE + ("*",)

    def accepts(self, value):
        return is_int_like(value)

    def wrong_values(self, value):
        for n, prior in ((1, 1.0), (-1, 1.0), (2, 0.6), (-2, 0.6)):
            yield prior, {"n": n}, _same_type(value, int(value) + n)


class OffByFactorOf10(ComputationalMutation):
    name = "off_by_factor_of_10"
    explanation = ("Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} "
                   "(a zero {direction}).")
    operations = MULTIPLICATIVE

    def accepts(self, value):
        return is_int_like(value) and value != 0

    def wrong_values(self, value):
        whole = int(value)
        if whole % 10 == 0:
            yield 1.0, {"factor": "1/10", "direction": "dropped"}, _same_type(value, whole // 10)
        yield 0.8, {"factor": "10", "direction": "added"}, _same_type(value, whole * 10)


class DigitTransposition(ComputationalMutation):
    name = "digit_transposition"
    explanation = ("Miscalculation: {target} was written as {wrong_shown} instead of {correct_shown} "
                   "(two adjacent digits swapped).")

    def accepts(self, value):
        digits = str(abs(int(value))) if is_int_like(value) else ""
        return any(a != b for a, b in zip(digits, digits[1:]))

    def wrong_values(self, value):
        whole = int(value)
        digits = str(abs(whole))
        for position in range(len(digits) - 1):
            a, b = digits[position], digits[position + 1]
            if a == b or (position == 0 and b == "0"):
                continue
            swapped = digits[:position] + b + a + digits[position + 2:]
            # the last two digits are where a hurried copy most often goes wrong
            prior = 1.0 if position == len(digits) - 2 else 0.7
            yield prior, {"position": position}, _same_type(value, int(swapped) * (-1 if whole < 0 else 1))


class StemOffByN(ComputationalMutation):
    name = "stem_off_by_n"
    explanation = ("Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} "
                   "(the digits before the final zero off by {n}).")
    operations = ADDITIVE + ("*",)

    def accepts(self, value):
        return is_int_like(value) and abs(int(value)) >= 10 and int(value) % 10 == 0

    def wrong_values(self, value):
        # 120 + 50 = 180: the stem (17 -> 18) slips, the final zero is kept
        for n in (1, -1):
            yield 1.0, {"n": n}, _same_type(value, int(value) + 10 * n)


class DecimalShift(ComputationalMutation):
    name = "decimal_shift"
    explanation = ("Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} "
                   "(the decimal point moved {places} place).")
    operations = MULTIPLICATIVE

    def accepts(self, value):
        return isinstance(value, float) and not value.is_integer()

    def wrong_values(self, value):
        for places, prior in ((1, 1.0), (-1, 1.0)):
            yield prior, {"places": places}, float(_decimal(value).scaleb(places))


class FloatOffByN(ComputationalMutation):
    name = "float_off_by_n"
    explanation = "Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} (off by {n})."

    def accepts(self, value):
        return isinstance(value, float) and not value.is_integer()

    def wrong_values(self, value):
        for n in (1, -1):
            yield 1.0, {"n": n}, float(_decimal(value) + n)


class FractionReciprocal(ComputationalMutation):
    name = "fraction_reciprocal"
    explanation = ("Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} "
                   "(numerator and denominator swapped).")

    def accepts(self, value):
        return isinstance(value, Fraction) and value.denominator != 1 and value.numerator not in (0, 1, -1)

    def wrong_values(self, value):
        yield 1.0, {}, 1 / value


class FractionPartOffByOne(ComputationalMutation):
    name = "fraction_part_off_by_one"
    explanation = ("Miscalculation: {target} was computed as {wrong_shown} instead of {correct_shown} "
                   "(the {part} off by one).")

    def accepts(self, value):
        return isinstance(value, Fraction) and value.denominator != 1

    def wrong_values(self, value):
        numerator, denominator = value.numerator, value.denominator
        for part, n in (("numerator", 1), ("numerator", -1), ("denominator", 1), ("denominator", -1)):
            new_numerator = numerator + n if part == "numerator" else numerator
            new_denominator = denominator + n if part == "denominator" else denominator
            if new_numerator != 0 and new_denominator > 1:
                yield 1.0, {"part": part, "n": n}, Fraction(new_numerator, new_denominator)


class MultiplicationByReciprocal(ComputationalMutation):
    name = "multiplication_by_reciprocal"
    explanation = ("Miscalculation: {target} was computed by multiplying by {reciprocal} instead of {factor}, "
                   "giving {wrong_shown} instead of {correct_shown}.")
    operations = ("*",)

    def accepts(self, value):
        return is_number(value)

    def applies(self, site: Site) -> bool:
        return super().applies(site) and any(True for _ in self._fraction_factors(site))

    @staticmethod
    def _fraction_factors(site: Site) -> Iterable[tuple[int, Fraction]]:
        """(position in ast.walk order, value) of each non-whole fraction multiplied in the line."""
        nodes = expression_nodes(site.assignment.value)
        for node in nodes:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                for operand in (node.left, node.right):
                    try:
                        factor = evaluate(operand, site.scope)
                    except UnsafeExpression:
                        continue
                    if isinstance(factor, Fraction) and factor.denominator != 1:
                        yield nodes.index(operand), factor

    def modify(self, site: Site) -> Iterable[Edit]:
        for position, factor in self._fraction_factors(site):
            expression, operand = copy_at(site.assignment.value, position)
            reciprocal = 1 / factor
            expression = replace_node(expression, operand, literal(reciprocal))
            try:
                wrong = evaluate(expression, site.scope)
            except UnsafeExpression:
                continue
            yield Edit(params={"factor": show(factor), "reciprocal": show(reciprocal),
                               "correct_shown": show(site.value), "wrong_shown": show(wrong)},
                       expression=expression, text=MISCALCULATE, prior=1.0)

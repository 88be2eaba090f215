"""Realism rules: mistakes a mutation can make that no student makes.

A mutation says where an error can happen; a rule says which of its results a reviewer would
reject as no real mistake. Each rule is a small class with a name, an explanation, the error
types it judges, and one `violated` method over the mutant: its site (the assignment, the
correct value), its edit and the flawed execution's values. Defining a subclass with a `name`
registers it; `unrealistic` names the first rule a mutant breaks.
"""
from __future__ import annotations

import ast
from abc import ABC, abstractmethod
from functools import lru_cache
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, NamedTuple

from flawforge.math import PROBLEM_CACHE_SIZE
from flawforge.math.arithmetic import is_number
from flawforge.math.program import Site, expression_nodes

RULES: list["RealismRule"] = []


class Flawed(NamedTuple):
    """What a rule sees of a mutant: where it applies, the new right-hand side and the flawed execution (a tuple:
    one is made for every plausible mutant)."""

    site: Site
    error_type: str
    expression: ast.expr          # the new right-hand side, or the old one read with `renamed`
    values: Mapping[str, Any]     # the flawed execution's final values
    answer: Any                   # its final answer
    correct_answer: Any
    renamed: Mapping[str, str] = MappingProxyType({})  # a substitution: the name each name reads

    @property
    def new_value(self) -> Any:
        return self.values.get(self.site.target)


class RealismRule(ABC):
    name: ClassVar[str] = ""
    explanation: ClassVar[str]
    error_types: ClassVar[frozenset[str] | None] = None  # None: every type

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            RULES.append(cls())

    def judges(self, error_type: str) -> bool:
        return self.error_types is None or error_type in self.error_types

    @abstractmethod
    def violated(self, flawed: Flawed) -> bool:
        """Whether this mutant makes a mistake no student makes."""


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


class NoSelfDivision(RealismRule):
    name = "self_division"
    explanation = "Nobody divides a quantity by itself to get 1 ('Nancy earns $28/28 = $1 per hour')."
    error_types = frozenset({"operator_swap", "incorrect_operand", "input_misrepresentation"})

    def violated(self, flawed: Flawed) -> bool:
        scope, renamed = flawed.site.scope, flawed.renamed
        for left, right in _name_divisions(flawed.expression):
            left_name, right_name = renamed.get(left, left), renamed.get(right, right)
            if left_name == right_name:
                return True
            a, b = scope.get(left_name), scope.get(right_name)
            if is_number(a) and is_number(b) and b != 0 and _close(float(a), float(b)):
                return True
        return False


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # by identity: one site's expression, judged for each of its substitutions
def _name_divisions(expression: ast.expr) -> tuple[tuple[str, str], ...]:
    """(dividend, divisor) of each division of one variable by another in the expression."""
    return tuple((node.left.id, node.right.id) for node in expression_nodes(expression)
                 if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))
                 and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Name))


class NoZeroAddedToOneDigit(RealismRule):
    name = "zero_added_to_one_digit"
    explanation = "A one-digit result does not grow a zero ('24/6 = 40 slices'): the slip is writing 40 for 4."
    error_types = frozenset({"off_by_factor_of_10"})

    def violated(self, flawed: Flawed) -> bool:
        value, new = flawed.site.value, flawed.new_value
        return is_number(value) and is_number(new) and abs(value) < 10 and abs(new) > abs(value)


class NoDecimalShiftOfAWholeNumber(RealismRule):
    name = "decimal_shift_of_whole_number"
    explanation = ("A value that is whole but for float error (2.9999999999 friends) is written whole; "
                   "shifting or offsetting its decimals gives '2.7 friends'.")
    error_types = frozenset({"decimal_shift", "float_off_by_n"})

    def violated(self, flawed: Flawed) -> bool:
        value = flawed.site.value
        return isinstance(value, float) and _close(value, round(value))


class NoRunawayAnswer(RealismRule):
    name = "runaway_answer"
    explanation = ("A flawed answer over a thousand times the correct one ('$120000 * $7200 = $879480000') "
                   "is no answer a student would write down.")
    RATIO = 1000

    def violated(self, flawed: Flawed) -> bool:
        answer, correct = flawed.answer, flawed.correct_answer
        if not (is_number(answer) and is_number(correct)) or correct == 0:
            return False
        return abs(answer) > self.RATIO * abs(correct)


def unrealistic(flawed: Flawed) -> str | None:
    """The name of the first rule the mutant breaks, or None."""
    for rule in _judging(flawed.error_type, len(RULES)):
        if rule.violated(flawed):
            return rule.name
    return None


@lru_cache(maxsize=None)  # every plausible mutant is judged; by the number of rules, so a rule defined later counts
def _judging(error_type: str, rules: int) -> tuple[RealismRule, ...]:
    return tuple(rule for rule in RULES[:rules] if rule.judges(error_type))

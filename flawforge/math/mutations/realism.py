"""Realism rules: mistakes a mutation can make that no student makes.

A mutation says where an error can happen; a rule says which of its results a reviewer would
reject as no real mistake. Each rule is a small class with a name, an explanation, the error
types it judges, and one `refused` method over the mutant (its site: the assignment and the
correct value; its edit; the flawed execution's values) that says in words what it refuses,
or None. Defining a subclass with a `name` registers it; `unrealistic` gives the first rule a
mutant breaks with what it refused, which generation records in rejects.jsonl.

Three kinds of rule judge the errors of issue 34's audit:

- Direction (computational slips). A slip keeps the line's formula and shows a wrong value; the
  value must stay strictly on the side of its operands that the operation puts it on: a sum of
  positive terms is more than each term, a difference of positive quantities less than what it
  was taken from, a positive number times more than one more than that number, and a part (a
  quotient by more than one, a product with a factor below one) less than its whole. A tenfold
  slip of a one-digit fact ('5 x 2 = 100') is refused too.
- Magnitude (conceptual errors). A wrong step of reasoning may land anywhere the story's own
  numbers go: the flawed answer stays within a factor of ten of the correct one (either way),
  unless it lies within the story's range, from the smallest to the largest magnitude among
  the numbers the question states and the values the correct solution computes (reporting a
  total instead of a share is a plausible answer; thirty thousand dollars for an hour's
  babysitting paid $12 is not). The erroneous step's own value is left to the ranker: a step
  check would refuse as many errors the human review accepted as it rejected.
- Units (operator swaps). Subtracting where a division belongs, or adding where a product
  belongs, is a mistake a person makes only between quantities of one unit (60 minutes / 15
  minutes read as 60 - 15); between a price and a count (or a total and a rate) the swap
  computes nothing. A multiplicative comparison read as an additive one ('three times that
  many' as three more, Jerome = 3 + 17.5 pounds; Lloyd = 90 - 3 cards for a third of Mark's)
  is the confusion itself, so a swap with a comparison factor is kept. Nor does a person write the
  sign against their own words: a line that says it adds ("add the kids from each school: 120 +
  90 - 50"), subtracts, multiplies or divides keeps that operation's sign.
"""
from __future__ import annotations

import ast
import math
import re
from abc import ABC, abstractmethod
from functools import lru_cache
from types import MappingProxyType
from typing import Any, ClassVar, Iterable, Mapping, NamedTuple

from flawforge.math import PROBLEM_CACHE_SIZE
from flawforge.math.arithmetic import Evaluator, UnsafeExpression, call_name, compiled, is_number
from flawforge.math.display import show
from flawforge.math.mutations.units import comparison_factor, same_unit
from flawforge.math.program import Site, expression_nodes
from flawforge.proto.math import COMPUTATIONAL_TYPES, CONCEPTUAL_TYPES

RULES: list["RealismRule"] = []


class Story(NamedTuple):
    """The range of magnitudes a problem's own numbers span (non-zero ones)."""

    smallest: float
    largest: float

    @classmethod
    def of(cls, numbers: Iterable[Any]) -> "Story":
        magnitudes = [abs(float(n)) for n in numbers if is_number(n) and n != 0 and math.isfinite(float(n))]
        return cls(min(magnitudes), max(magnitudes)) if magnitudes else cls(0.0, math.inf)

    def holds(self, value: Any) -> bool:
        magnitude = abs(float(value))
        return self.smallest * (1 - 1e-9) <= magnitude <= self.largest * (1 + 1e-9)


ANY_STORY = Story(0.0, math.inf)


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
    params: Mapping[str, Any] = MappingProxyType({})   # the edit's parameters
    story: Story = ANY_STORY      # the magnitudes of the problem's own numbers

    @property
    def new_value(self) -> Any:
        return self.values.get(self.site.target)


class Refusal(NamedTuple):
    rule: str
    what: str  # what the rule refused, in words


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
    def refused(self, flawed: Flawed) -> str | None:
        """What this mutant does that no student does, in words; None when it is a mistake people make."""


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


class NoSelfDivision(RealismRule):
    name = "self_division"
    explanation = ("Nobody divides a quantity by itself to get 1 ('Nancy earns $28/28 = $1 per hour'). Two "
                   "quantities of the story that happen to be equal are not one: a swap that turns 2 paintings x 2 "
                   "into 2 paintings / 2 divides by the factor, a slip people make; a substitution that puts an "
                   "equal number in a division reads as the quantity divided by itself.")
    error_types = frozenset({"operator_swap", "incorrect_operand", "input_misrepresentation"})

    def refused(self, flawed: Flawed) -> str | None:
        scope, renamed = flawed.site.scope, flawed.renamed
        for left, right in _name_divisions(flawed.expression):
            left_name, right_name = renamed.get(left, left), renamed.get(right, right)
            a, b = scope.get(left_name), scope.get(right_name)
            substituted = left in renamed or right in renamed
            if left_name == right_name or (substituted and is_number(a) and is_number(b) and b != 0
                                           and _close(float(a), float(b))):
                return f"{left_name} / {right_name} divides {show(a)} by itself"
        return None


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

    def refused(self, flawed: Flawed) -> str | None:
        value, new = flawed.site.value, flawed.new_value
        if is_number(value) and is_number(new) and abs(value) < 10 and abs(new) > abs(value):
            return f"{flawed.site.target} {show(value)} written {show(new)}"
        return None


class NoDecimalShiftOfAWholeNumber(RealismRule):
    name = "decimal_shift_of_whole_number"
    explanation = ("A value that is whole but for float error (2.9999999999 friends) is written whole; "
                   "shifting or offsetting its decimals gives '2.7 friends'.")
    error_types = frozenset({"decimal_shift", "float_off_by_n"})

    def refused(self, flawed: Flawed) -> str | None:
        value = flawed.site.value
        if isinstance(value, float) and _close(value, round(value)):
            return f"{flawed.site.target} {value!r} is whole but for float error"
        return None


class NoRunawayAnswer(RealismRule):
    name = "runaway_answer"
    explanation = ("A flawed answer over a thousand times the correct one ('$120000 * $7200 = $879480000') "
                   "is no answer a student would write down.")
    RATIO = 1000

    def refused(self, flawed: Flawed) -> str | None:
        answer, correct = flawed.answer, flawed.correct_answer
        if is_number(answer) and is_number(correct) and correct != 0 and abs(answer) > self.RATIO * abs(correct):
            return f"answer {show(answer)} is over {self.RATIO} times {show(correct)}"
        return None


# --- direction of computational slips ----------------------------------------------------------------------------
# A rounded value keeps the direction of what it rounds: int(30 / 2) is still at most 30.
_ROUNDING = frozenset({"int", "float", "round", "math.floor", "math.ceil"})


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # by identity: one site's expression, judged for each of its slips
def _operation(expression: ast.expr) -> ast.BinOp | None:
    """The arithmetic operation that computes the expression's value, seen through rounding calls."""
    while isinstance(expression, ast.Call) and call_name(expression.func) in _ROUNDING and expression.args:
        expression = expression.args[0]
    return expression if isinstance(expression, ast.BinOp) else None


class Operands(NamedTuple):
    symbol: str
    left: float
    right: float
    new: float  # the value the slip shows


class DirectionRule(RealismRule):
    """A slip keeps the line's formula (`30 / 2 = 150`): judged against the operand values that formula shows."""

    error_types = frozenset(COMPUTATIONAL_TYPES)
    symbols: ClassVar[frozenset[str]]

    def refused(self, flawed: Flawed) -> str | None:
        operands = _operands(flawed)
        if operands is None or operands.symbol not in self.symbols:
            return None
        return self.breaks(operands)

    @abstractmethod
    def breaks(self, o: Operands) -> str | None:
        """What is impossible about `o.new` as the result of `o.left <symbol> o.right`, or None."""


_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "/"}


def _operands(flawed: Flawed) -> Operands | None:
    node = _operation(flawed.site.assignment.value)
    symbol = _SYMBOLS.get(type(node.op)) if node is not None else None
    new = flawed.new_value
    if symbol is None or not is_number(new):
        return None
    try:
        left = compiled(Evaluator, node.left)(flawed.site.scope)
        right = compiled(Evaluator, node.right)(flawed.site.scope)
    except UnsafeExpression:
        return None
    if not (is_number(left) and is_number(right)):
        return None
    return Operands(symbol, float(left), float(right), float(new))


def _below(value: float, bound: float) -> bool:
    return value < bound and not _close(value, bound)


def _not_above(value: float, bound: float) -> bool:
    """`value` at most `bound` (equal within float error included): where an operation must go strictly beyond."""
    return not _below(bound, value)


class SumBelowATerm(DirectionRule):
    name = "sum_below_a_term"
    explanation = "A sum of positive terms is more than each of them ('40 + 25 = 39', '40 + 25 = 40')."
    symbols = frozenset({"+"})

    def breaks(self, o: Operands) -> str | None:
        larger = max(o.left, o.right)
        if o.left > 0 and o.right > 0 and _not_above(o.new, larger):
            return f"{show(o.left)} + {show(o.right)} shown as {show(o.new)}, not above the term {show(larger)}"
        return None


class DifferenceAboveTheMinuend(DirectionRule):
    name = "difference_above_the_minuend"
    explanation = "Taking a positive amount away leaves less than there was ('76 - 38 = 83', '2 - 1/2 = 2')."
    symbols = frozenset({"-"})

    def breaks(self, o: Operands) -> str | None:
        if o.left > 0 and o.right > 0 and _not_above(o.left, o.new):
            return f"{show(o.left)} - {show(o.right)} shown as {show(o.new)}, not below {show(o.left)}"
        return None


class ProductBelowAFactor(DirectionRule):
    name = "product_below_a_factor"
    explanation = ("Multiplying a positive number by more than one (or dividing it by a positive number below one) "
                   "gives more than the number started from ('30 x 20 = 6', '$0.15 x 2 = $0.03').")
    symbols = frozenset({"*", "/"})

    def breaks(self, o: Operands) -> str | None:
        if o.symbol == "*" and o.left > 0 and o.right > 0:
            # the larger number first: where both factors are above one, the message names the one the slip fell below
            for start, factor in sorted(((o.left, o.right), (o.right, o.left)), reverse=True):
                if factor > 1 and _not_above(o.new, start):
                    return f"{show(o.left)} x {show(o.right)} shown as {show(o.new)}, not above the factor {show(start)}"
        if o.symbol == "/" and o.left > 0 and 0 < o.right < 1 and _not_above(o.new, o.left):
            return f"{show(o.left)} / {show(o.right)} shown as {show(o.new)}, not above {show(o.left)}"
        return None


class PartAboveTheWhole(DirectionRule):
    name = "part_above_the_whole"
    explanation = ("A part is less than its whole: dividing by more than one, or taking a fraction below one of a "
                   "positive amount, gives less than the amount ('30 students / 2 = 150 students').")
    symbols = frozenset({"*", "/"})

    def breaks(self, o: Operands) -> str | None:
        if o.symbol == "/" and o.left > 0 and o.right > 1 and _not_above(o.left, o.new):
            return f"{show(o.left)} / {show(o.right)} shown as {show(o.new)}, not below the whole {show(o.left)}"
        if o.symbol == "*":
            for whole, share in ((o.left, o.right), (o.right, o.left)):
                if whole > 0 and 0 < share < 1 and _not_above(whole, o.new):
                    return (f"{show(share)} of {show(whole)} shown as {show(o.new)}, not below the whole "
                            f"{show(whole)}")
        return None


class TenfoldSmallFact(RealismRule):
    name = "tenfold_small_fact"
    explanation = ("A sum, difference, product or quotient of one-digit whole numbers is a fact people know by "
                   "heart: '5 x 2 = 100 hours' or '8 - 3 = 50' is no slip anyone makes (a tenfold slip of '50 x 2' "
                   "is).")
    error_types = frozenset({"off_by_factor_of_10", "decimal_shift"})

    def refused(self, flawed: Flawed) -> str | None:
        o = _operands(flawed)
        if o is not None and all(value.is_integer() and 0 <= value <= 9 for value in (o.left, o.right)):
            symbol = "x" if o.symbol == "*" else o.symbol
            return f"{show(o.left)} {symbol} {show(o.right)} shown as {show(o.new)}: a one-digit fact"
        return None


# --- magnitude of conceptual errors -------------------------------------------------------------------------------
class MagnitudeOutsideTheStory(RealismRule):
    name = "magnitude_outside_the_story"
    explanation = ("A wrong step of reasoning gives an answer of the story's size: within a factor of ten of the "
                   "correct answer, or within the range of the numbers the question states and the correct "
                   "solution computes.")
    error_types = frozenset(CONCEPTUAL_TYPES)
    RATIO = 10

    def refused(self, flawed: Flawed) -> str | None:
        new, correct = flawed.answer, flawed.correct_answer
        if not (is_number(new) and is_number(correct)) or correct == 0 or new == 0:
            return None
        ratio = abs(float(new)) / abs(float(correct))
        if (ratio >= self.RATIO or ratio <= 1 / self.RATIO) and not flawed.story.holds(new):
            return (f"answer {show(new)} against {show(correct)}, outside the story's numbers "
                    f"{show(flawed.story.smallest)} to {show(flawed.story.largest)}")
        return None


# --- units of operator swaps --------------------------------------------------------------------------------------
class UnitBreakingSwap(RealismRule):
    name = "unit_breaking_swap"
    explanation = ("'-' for '/' or '+' for '*' only between quantities of one unit, or with a comparison factor: "
                   "60 minutes / 15 minutes read as 60 - 15, or 'three times as many' read as three more, are "
                   "confusions people have; $240 / 8 tickets read as $240 - 8 is not.")
    error_types = frozenset({"operator_swap"})
    BREAKING = frozenset({("/", "-"), ("*", "+")})

    def refused(self, flawed: Flawed) -> str | None:
        params = flawed.params
        if (params.get("old"), params.get("new")) not in self.BREAKING:
            return None
        left, right = params["left"], params["right"]
        program = flawed.site.program
        if same_unit(program, left, right) or comparison_factor(program, left) or comparison_factor(program, right):
            return None
        return f"{left} {params['new']} {right} for {left} {params['old']} {right}: not one unit"


class SwapAgainstItsWords(RealismRule):
    name = "swap_against_its_words"
    explanation = ("A swapped operation keeps the words of the line it is on: where the line says it adds, "
                   "subtracts, multiplies or divides ('add the kids from each school', 'the sum is', 'deduct the "
                   "discount', 'divide by'), the other sign contradicts the sentence around it, which no student "
                   "writes. (3 of the 70 operator swaps the human review accepted have such words, 454 of 4,027 "
                   "of the default job's did.)")
    error_types = frozenset({"operator_swap"})
    # Words that name an operation outright; 'total', 'left', 'each' and 'per' go with several and are left out, and
    # so is a comparison ('three times as many', 'twice'): reading it as three more is the confusion itself
    # (UnitBreakingSwap keeps it).
    NAMING = {"+": re.compile(r"\b(?:add|adds|adding|added|sum|combined|together|altogether|in all|plus)\b", re.I),
              "-": re.compile(r"\b(?:subtract\w*|minus|deduct\w*|difference|discount\w*)\b", re.I),
              "*": re.compile(r"\b(?:times(?!\s+(?:as|more|less|fewer|bigger|larger|smaller|longer|older|"
                              r"faster|higher|that|the))|multipl\w*|product)\b", re.I),
              "/": re.compile(r"\b(?:divid\w*|split\w*)\b", re.I)}

    def refused(self, flawed: Flawed) -> str | None:
        naming = self.NAMING.get(flawed.params.get("old"))
        if naming is None:
            return None
        found = naming.search(_line_words(flawed.site.program, flawed.site.program.step_of(flawed.site.target)))
        if found is None:
            return None
        return f"'{flawed.params['new']}' for '{flawed.params['old']}' on a line that says {found.group()!r}"


# An operator written as a word between two operands ("{price} times {count}", "{x} gallons divided by {y}",
# "(...) divided by {c}") is the sign itself, which the swap rewrites: it is not among the words around it.
_OPERATOR_WORD = re.compile(r"(?<=[})])(?:\s+[A-Za-z]+){0,3}?\s*(?:times|plus|minus|multiplied by|divided by)\s*"
                            r"(?=\$?[{(])", re.I)
_ANNOTATION_OR_FIELD = re.compile(r"<<.*?>>|\{[^{}]*\}")


def _line_words(program, step: str) -> str:
    """The words a reader sees on a solution line around its calculation: its template without annotations, fields
    and operators written as words."""
    template = next((s.get("solution_line_template") for s in program.logical_steps
                     if s.get("line_number") == step), None)
    return _words_of(template) if isinstance(template, str) else ""


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # every swap of a line reads the same words
def _words_of(template: str) -> str:
    return _ANNOTATION_OR_FIELD.sub(" ", _OPERATOR_WORD.sub(" ", template))


def unrealistic(flawed: Flawed) -> Refusal | None:
    """The first rule the mutant breaks, with what it refused; None when it breaks none."""
    for rule in _judging(flawed.error_type, len(RULES)):
        what = rule.refused(flawed)
        if what is not None:
            return Refusal(rule.name, what)
    return None


@lru_cache(maxsize=None)  # every plausible mutant is judged; by the number of rules, so a rule defined later counts
def _judging(error_type: str, rules: int) -> tuple[RealismRule, ...]:
    return tuple(rule for rule in RULES[:rules] if rule.judges(error_type))

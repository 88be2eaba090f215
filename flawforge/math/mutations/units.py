"""The unit a template's variable counts in, as far as its name, its comment and the solution text tell.

Templates name their variables for what they hold (`price_per_ticket`, `num_tickets`,
`minutes_per_hour`, `doubling_factor`) and comment their inputs with the question's words
(`# $12 each`), and the solution's line templates print money as `${name}` and shares as
`{name}%`. A unit here is a label read from those: a rate ('per ticket', or 'rate' where
the name does not say per what), a pure number ('ratio': factors, divisors, fractions),
a percentage ('%'), money ('$'), a time unit, or else the noun a count counts (`num_apples`,
`gallons_for_first_coat`). Two variables share a unit when their labels are equal and say
what they measure ('rate' and 'ratio' do not: a speed multiplier and a price multiplier are
not one quantity); this is what the unit-aware operator swap rule asks, and it errs on the
side of 'not one unit'.
"""
from __future__ import annotations

import ast
import re

from flawforge.math.program import Program

_RATE = frozenset({"rate", "speed", "hourly", "daily", "weekly", "monthly", "yearly", "annual", "each", "every"})
_PERCENT = frozenset({"percent", "percentage"})
_RATIO = frozenset({"fraction", "ratio", "multiplier", "factor", "times", "twice", "double", "doubling", "triple",
                    "tripling", "half", "divisor", "proportion", "decimal", "numerator", "denominator"})
_MONEY = frozenset({"cost", "price", "dollar", "money", "earning", "earned", "pay", "paid", "salary", "spent",
                    "spend", "budget", "profit", "revenue", "fee", "income", "saving", "wage", "bill", "charge",
                    "tip", "tax", "rent", "cent", "allowance", "change", "worth"})
_COUNTING = frozenset({"num", "number", "count"})  # `num_people_splitting_cost` counts people
_PREPOSITIONS = frozenset({"for", "of", "in", "on", "from", "to", "at", "with", "after", "before", "by"})
_TIME = frozenset({"second", "minute", "hour", "day", "week", "month", "year"})
_LENGTH = frozenset({"length", "width", "height", "depth", "side"})  # a sandbox's length and width are both feet
# the factor of a multiplicative comparison ('three times as many', 'twice that'), as a template names it
_COMPARISON = frozenset({"multiplier", "twice", "thrice", "double", "triple"})
# words a name qualifies its noun with: 'total_apples_left' counts apples
_QUALIFIERS = frozenset({"total", "num", "number", "of", "count", "initial", "final", "new", "remaining", "left",
                         "sold", "bought", "needed", "used", "the", "a", "in", "on", "for", "after", "before",
                         "current", "original", "amount", "value", "sum", "difference", "result", "answer",
                         "combined", "all", "more", "less", "extra", "additional", "first", "second", "third",
                         "last", "other", "given", "start", "end", "now", "later", "then"})
_COMMENT_RATE = re.compile(r"\b(per|each|every|an? (?:hour|day|week|month|year|minute))\b", re.IGNORECASE)


def _singular(word: str) -> str:
    if len(word) > 3 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _comment(program: Program, name: str) -> str:
    """The comment on the line that first assigns `name` (`# $12 each`)."""
    assignment = next((a for a in program.assignments if a.target == name), None)
    if assignment is None:
        return ""
    line = program.source.splitlines()[assignment.line - 1]
    return line.partition("#")[2]


def _shown_as(program: Program, name: str) -> str:
    """'$' or '%' where the solution's line templates print the variable with that sign."""
    placeholder = re.escape("{" + name + "}")
    for step in program.logical_steps:
        text = step.get("solution_line_template") or ""
        if re.search(r"\$\s*" + placeholder, text):
            return "$"
        if re.search(placeholder + r"\s*%", text):
            return "%"
    return ""


def unit_of(program: Program, name: str) -> str:
    """The variable's unit label: 'per <noun>', 'rate', 'ratio', '%', '$', a time unit or a noun ('' if none). The
    name decides first; the comment and the solution text only where the name says nothing of the kind."""
    words = [_singular(word) for word in name.lower().split("_") if word]
    if "per" in words:
        return "per " + " ".join(words[words.index("per") + 1:])
    if _PERCENT.intersection(words):
        return "%"
    if _RATIO.intersection(words):
        return "ratio"
    if _RATE.intersection(words):
        return "rate"
    if words and words[0] in _COUNTING:
        return _head_noun(words[1:])
    if _MONEY.intersection(words):
        return "$"
    comment, shown = _comment(program, name), _shown_as(program, name)
    if _COMMENT_RATE.search(comment):
        return "rate"
    if shown == "%" or "%" in comment:
        return "%"
    if shown == "$" or "$" in comment:
        return "$"
    return _head_noun(words)


def _head_noun(words: list[str]) -> str:
    """What a name counts: its last noun before a preposition ('gallons_for_first_coat': gallon), a time unit first."""
    head = words[:next((i for i, word in enumerate(words) if word in _PREPOSITIONS), len(words))]
    times = [word for word in head if word in _TIME]
    if times:
        return times[-1]
    nouns = [word for word in head if word not in _QUALIFIERS and not word.isdigit()]
    if nouns and nouns[-1] in _LENGTH:
        return "length"
    return nouns[-1] if nouns else ""


def comparison_factor(program: Program, name: str) -> bool:
    """Whether the variable is the factor of a multiplicative comparison (`jerome_multiplier = 3`: 'three times
    that many'): a name that says so and no percentage, money or fraction (`percent_multiplier`,
    `cost_multiplier`, `half_multiplier` scale a quantity, they compare none), and a whole number of at least 2
    written as the question's input."""
    words = {_singular(word) for word in name.lower().split("_") if word}
    if not _COMPARISON.intersection(words) or words & (_PERCENT | _MONEY | {"half", "fraction", "overtime"}):
        return False
    assignment = next((a for a in program.assignments if a.target == name), None)
    if assignment is None or not assignment.is_input:
        return False
    try:
        value = ast.literal_eval(assignment.value)
    except ValueError:
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 2 and value == int(value)


def same_unit(program: Program, left: str, right: str) -> bool:
    """Whether two variables are quantities of one unit (both known and equal, and a label that says what)."""
    unit = unit_of(program, left)
    return unit not in ("", "rate", "ratio") and unit == unit_of(program, right)

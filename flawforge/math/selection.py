"""Which mutants become candidates: the plausibility filter, then the caps.

The filter compares a flawed execution with the correct one: a whole number stays whole, no
value changes sign, no non-zero value becomes zero, and the final answer changes.

The caps keep, per error family, at most `per_type` candidates of one error type, `per_line` on
one line and `total` in all per problem. Within them the selection covers as much of the
problem's plausible error space as it can: each kept mutant stands for its share of its error
type's plausibility (its prior over the sum of the priors of that type's mutants), and the
largest shares are taken first, so a type with two plausible variants gets one of them before
a type with thirty. Each type's cap may be lowered further by the problem's quota of it (the
type mix, flawforge.math.type_mix). Ties are broken by a hash of the caller's seed, never by
global random state.
"""
from __future__ import annotations

import hashlib
import json
import math
from fractions import Fraction
from collections import Counter, defaultdict
from typing import Any, Callable, Generic, Mapping, NamedTuple, Sequence, TypeVar

from flawforge.math.arithmetic import is_int_like, is_number, sign
from flawforge.math.display import show
from flawforge.proto.math import Caps, FamilyCaps
from flawforge.proto.values import identical


class Plausibility:
    """The plausibility filter for one correct execution. What each correct value allows is worked out
    once here; every mutant's flawed values are then checked against it."""

    def __init__(self, correct: Mapping[str, Any], correct_answer: Any):
        self.correct_answer, self.shown_answer = correct_answer, show(correct_answer)
        self.rules = {name: (value, ValueRule.of(value)) for name, value in correct.items() if is_number(value)}

    def violation(self, flawed: Mapping[str, Any], flawed_answer: Any) -> str | None:
        """None when the flawed execution is plausible, else the first rule it breaks."""
        if not is_number(flawed_answer) or (isinstance(flawed_answer, float) and not math.isfinite(flawed_answer)):
            return "answer_not_a_number"
        if flawed_answer == self.correct_answer or show(flawed_answer) == self.shown_answer:
            return "answer_unchanged"
        for name, (value, rule) in self.rules.items():
            new = flawed.get(name, value)
            if new is value or identical(new, value):
                continue  # unchanged: nothing to check
            reason = rule.violation(new)
            if reason:
                return reason
        return None


class ValueRule(NamedTuple):
    """What a correct value allows of its flawed counterpart.

    Whole-number values are ints and whole floats. A Fraction is rational by the template's
    own choice (3/2 cartons, 25/9 liters), so a Fraction that stops being whole is allowed.
    """

    stays_whole: bool
    stays_non_zero: bool
    sign: int

    @classmethod
    def of(cls, correct: Any) -> "ValueRule":
        return cls(stays_whole=is_int_like(correct) and not isinstance(correct, Fraction),
                   stays_non_zero=correct != 0, sign=sign(correct))

    def violation(self, flawed: Any) -> str | None:
        if not is_number(flawed):
            return "not_a_number"
        if self.stays_whole and not is_int_like(flawed):
            return "whole_became_fractional"
        if self.stays_non_zero and flawed == 0:
            return "became_zero"
        if self.sign != 0 and sign(flawed) != self.sign:
            return "sign_flip"
        return None


DEFAULT_CAPS = Caps()
SEED_CAPS = Caps(conceptual=FamilyCaps(per_type=2, per_line=2, total=5))  # the seed notebook's conceptual caps
_UNCAPPED = FamilyCaps(per_type=None, per_line=None, total=None)
NO_CAPS = Caps(computational=_UNCAPPED, conceptual=_UNCAPPED)

T = TypeVar("T")
U = TypeVar("U")


class Choice(NamedTuple, Generic[T]):
    """A candidate the caps may keep (a tuple: one is made for every group of plausible mutants)."""

    family: str
    error_type: str
    line: str
    prior: float
    key: str  # stable identity (e.g. the mutated code): orders choices before the seeded tie-break
    item: T
    score: float | None = None  # how plausible a reviewer finds it (flawforge.math.ranking); None: unranked


def select(choices: Sequence[Choice[T]], caps: Caps, seed: int,
           accept: Callable[[T], U | None] = lambda item: item, quotas: Mapping[str, int] | None = None) -> list[U]:
    """The choices kept under the caps, in the order they were selected: ranked choices by their score, the
    others by their share of their type's plausibility.

    `accept` turns a choice's item into what is kept, or None to pass it over (checked only
    for choices the caps would take, so expensive checks run on few items). `quotas` lowers the
    per-type cap of the types it names (flawforge.math.type_mix.TypeMix.draw). Ties are broken by
    a hash of the seed and each choice's key, so any subset of the choices is ordered as it is
    among all of them (`flawforge recall` replays the selection from an uncapped run)."""
    ordered = sorted(choices, key=lambda c: (c.family, c.error_type, c.line, c.key))
    tiebreak = {id(choice): stable_hash(str(seed), choice.key) for choice in ordered}
    total_prior: dict[tuple[str, str], float] = defaultdict(float)
    for choice in ordered:
        total_prior[(choice.family, choice.error_type)] += choice.prior
    count: Counter = Counter((c.family, c.error_type) for c in ordered)
    share = {}
    for c in ordered:
        kind = (c.family, c.error_type)
        per_type_cap = caps.of(c.family).per_type
        weight = count[kind] if per_type_cap is None else min(per_type_cap, count[kind])
        share[id(c)] = weight * c.prior / total_prior[kind] if total_prior[kind] else 0.0
    per_type: Counter = Counter()
    per_line: Counter = Counter()
    per_family: Counter = Counter()
    kept = []
    quotas = quotas or {}
    for choice in sorted(ordered, key=lambda c: (c.score is None, -(share[id(c)] if c.score is None else c.score),
                                                 tiebreak[id(c)])):
        limits = caps.of(choice.family)
        type_limit = limits.per_type
        if type_limit is not None:
            type_limit = min(type_limit, quotas.get(choice.error_type, type_limit))
        if ((type_limit is not None and per_type[(choice.family, choice.error_type)] >= type_limit)
                or (limits.per_line is not None and per_line[(choice.family, choice.line)] >= limits.per_line)
                or (limits.total is not None and per_family[choice.family] >= limits.total)):
            continue
        accepted = accept(choice.item)
        if accepted is None:
            continue
        per_type[(choice.family, choice.error_type)] += 1
        per_line[(choice.family, choice.line)] += 1
        per_family[choice.family] += 1
        kept.append(accepted)
    return kept


_SORTED_JSON = json.JSONEncoder(sort_keys=True)  # json.dumps(..., sort_keys=True) builds an encoder on every call


def choice_key(position: int, error_type: str, params: Mapping[str, Any]) -> str:
    """A choice's stable identity: the position of the assignment its mutation changes, and how."""
    return _SORTED_JSON.encode([position, error_type, params])


def stable_hash(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()

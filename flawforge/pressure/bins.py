"""Selection of the final prompts (spec, stage 1): P0 bins, gating with a lowering threshold, bin
balancing, the repetition cap and the fill by S, single-pass, every shortfall logged.

Per category, in the order A-E:
1. Eligible: candidates the validator accepted; creative and OOD keep the best of each target's
   candidates (highest S, then the shorter question).
2. Gate at tau = 0.20, 0.15, 0.10, 0.05 in turn: the prompts with P0 >= tau go into the bins
   [0,.2), [.2,.4), [.4,.6), [.6,.8), [.8,1], each keeping its ceil(N/5) highest S; the first tau whose
   bins hold N prompts gives the N highest S of them. If none does, the bins at the lowest tau are kept
   and the rest is filled with the next-highest S of the eligible ("fill_by_s").
3. Repetition cap: walking the selection then the other eligible prompts by S, a prompt is kept when
   its target is in at most 2 categories so far. Short of N after that, the other validated candidates
   (the validator parsed them but did not accept them) fill by S under the same cap
   ("filled_from_unaccepted"). Nothing is regenerated; each step that falls short is logged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from flawforge.proto.pressure import BIN_EDGES, P0_BINS

TAUS = (0.20, 0.15, 0.10, 0.05)
MAX_CATEGORIES_PER_TARGET = 2


def bin_index(p0: float) -> int:
    """0..4 for [0,.2), [.2,.4), [.4,.6), [.6,.8), [.8,1] (the last bin closed); P0 is clamped to [0, 1]."""
    p = min(1.0, max(0.0, p0))
    return next((i for i, upper in enumerate(BIN_EDGES[1:]) if p < upper), len(P0_BINS) - 1)


@dataclass(frozen=True)
class Scored:
    """A validated candidate as selection sees it."""

    key: str            # the candidate's id
    category: str
    target: str         # normalised: the repetition cap compares these
    p0: float
    s: float
    accepted: bool
    question_length: int = 0

    @property
    def rank(self) -> tuple:
        return -self.s, self.question_length, self.key


@dataclass
class Selection:
    category: str
    wanted: int
    chosen: list[Scored] = field(default_factory=list)
    tau: float | None = None  # the threshold whose bins held N prompts; None when none did
    bin_shortfalls: dict[str, int] = field(default_factory=dict)
    shortfalls: list[dict] = field(default_factory=list)

    def log(self, step: str, have: int, **detail) -> None:
        self.shortfalls.append({"category": self.category, "step": step, "wanted": self.wanted, "have": have,
                                **detail})


class TargetTracker:
    """The categories each target has been used in; a target may be in at most two."""

    def __init__(self, limit: int = MAX_CATEGORIES_PER_TARGET):
        self.limit = limit
        self.categories: dict[str, set[str]] = {}

    def register(self, target: str, category: str) -> bool:
        used = self.categories.setdefault(target, set())
        if category not in used and len(used) >= self.limit:
            return False
        used.add(category)
        return True


def best_per_target(items: list[Scored]) -> list[Scored]:
    best: dict[str, Scored] = {}
    for item in sorted(items, key=lambda i: i.rank):
        best.setdefault(item.target, item)
    return list(best.values())


def balance(eligible: list[Scored], tau: float, per_bin: int) -> tuple[list[Scored], dict[str, int]]:
    """The gated prompts' bins, each cut to its `per_bin` highest S; and each bin's shortfall."""
    bins: list[list[Scored]] = [[] for _ in P0_BINS]
    for item in eligible:
        if item.p0 >= tau:
            bins[bin_index(item.p0)].append(item)
    kept, short = [], {}
    for label, members in zip(P0_BINS, bins):
        members.sort(key=lambda i: i.rank)
        kept += members[:per_bin]
        if len(members) < per_bin:
            short[label] = per_bin - len(members)
    return kept, short


def select_category(category: str, validated: list[Scored], wanted: int, tracker: TargetTracker,
                    best_of_target: bool) -> Selection:
    selection = Selection(category, wanted)
    accepted = [item for item in validated if item.accepted]
    eligible = sorted(best_per_target(accepted) if best_of_target else accepted, key=lambda i: i.rank)
    per_bin = math.ceil(wanted / len(P0_BINS))
    chosen: list[Scored] = []
    for tau in TAUS:
        balanced, short = balance(eligible, tau, per_bin)
        chosen, selection.bin_shortfalls = sorted(balanced, key=lambda i: i.rank), short
        if len(balanced) >= wanted:
            selection.tau, chosen = tau, chosen[:wanted]
            break
    else:
        selection.log("gating", len(chosen), tau=TAUS[-1], bin_shortfalls=dict(selection.bin_shortfalls),
                      eligible=len(eligible))
        taken = {item.key for item in chosen}
        fill = [item for item in eligible if item.key not in taken][:wanted - len(chosen)]
        if fill:
            selection.log("fill_by_s", len(chosen) + len(fill), filled=len(fill))
        chosen = chosen + fill
    taken = {item.key for item in chosen}
    prioritized = chosen + [item for item in eligible if item.key not in taken]
    kept: list[Scored] = []
    capped = 0
    for item in prioritized:
        if len(kept) >= wanted:
            break
        if tracker.register(item.target, category):
            kept.append(item)
        else:
            capped += 1
    if len(kept) < wanted:
        if capped:
            selection.log("repetition_cap", len(kept), refused=capped)
        taken = {item.key for item in kept}
        rest = sorted((item for item in validated if item.key not in taken and not item.accepted),
                      key=lambda i: i.rank)
        before = len(kept)
        for item in rest:
            if len(kept) >= wanted:
                break
            if tracker.register(item.target, category):
                kept.append(item)
        if len(kept) > before:
            selection.log("filled_from_unaccepted", len(kept), filled=len(kept) - before)
        if len(kept) < wanted:
            selection.log("category_short", len(kept), validated=len(validated))
    selection.chosen = sorted(kept, key=lambda i: i.rank)
    return selection


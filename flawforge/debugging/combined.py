"""Combined bugs (SWE-smith's combine): 2-4 valid single bugs of one file, put together where their changes do not
overlap, proven like any candidate.

The singles come from one library's instances, after the final gate. Groups are drawn in a seeded order, each
single at most once, and merged line by line: every part changes its own lines of the clean file, with at least
one unchanged line between any two parts, so each part reads exactly as it did alone. A combination runs the
tests that can notice any of its parts (the union of the parts' FAIL_TO_PASS and PASS_TO_PASS) in a unit of its
own; it is valid when the verdict is (judge: FAIL_TO_PASS and PASS_TO_PASS both non-empty) and its FAIL_TO_PASS
covers every part's own failures (no part hides another). The final gate then re-runs it like every instance.
"""
from __future__ import annotations

import math
import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from difflib import SequenceMatcher

from flawforge.debugging.candidates import Candidate, digest_of
from flawforge.debugging.patches import apply_patch
from flawforge.proto.debugging import BugReject, Instance

MODIFIER = "combined"
MIN_PARTS, MAX_PARTS = 2, 4
# Combinations tried, per valid single bug of the library.
SHARE = 0.25


@dataclass(frozen=True)
class LineEdit:
    """Clean lines [start, end) (0-based) replaced by `lines`."""

    start: int
    end: int
    lines: tuple[str, ...]


def line_edits(clean: str, buggy: str) -> list[LineEdit]:
    """The changes from `clean` to `buggy`, as replaced runs of whole lines."""
    old, new = clean.splitlines(keepends=True), buggy.splitlines(keepends=True)
    # Only the lines between the unchanged first and last ones are compared (a change is a few lines of a module
    # of thousands: SequenceMatcher over the whole was most of the host's time on arrow's combined bugs).
    same = len(os.path.commonprefix([old, new]))
    tail = len(os.path.commonprefix([old[same:][::-1], new[same:][::-1]]))
    old_part, new_part = old[same:len(old) - tail], new[same:len(new) - tail]
    return [LineEdit(same + i1, same + i2, tuple(new_part[j1:j2]))
            for tag, i1, i2, j1, j2 in SequenceMatcher(None, old_part, new_part, autojunk=False).get_opcodes()
            if tag != "equal"]


def apart(first: list[LineEdit], second: list[LineEdit]) -> bool:
    """No edit of one touches an edit of the other: at least one unchanged clean line lies between any two."""
    return all(b.start > a.end or a.start > b.end for a in first for b in second)


def merged(clean: str, parts: list[list[LineEdit]]) -> str:
    """`clean` with every part's edits (apart from each other) applied."""
    lines = clean.splitlines(keepends=True)
    for edit in sorted((e for part in parts for e in part), key=lambda e: e.start, reverse=True):
        lines[edit.start:edit.end] = edit.lines
    return "".join(lines)


@dataclass(frozen=True)
class Combination:
    parts: tuple[Instance, ...]
    candidate: Candidate

    @property
    def selected(self) -> list[str]:
        """The tests that can notice any part."""
        return sorted({t for part in self.parts for t in part.FAIL_TO_PASS + part.PASS_TO_PASS})

    @property
    def parts_failing(self) -> set[str]:
        return {t for part in self.parts for t in part.FAIL_TO_PASS}


def combinations(instances: list[Instance], modules: dict[str, str], seed: int, count: int) -> list[Combination]:
    """Up to `count` combinations of 2-4 of `instances` (valid single bugs), each of one file, their edits apart,
    each single in one combination at most; drawn in an order that depends on the seed and the instances alone."""
    singles = sorted((i for i in instances if not i.parts), key=lambda i: i.instance_id)
    rng = random.Random(f"{seed}:combined:{','.join(i.instance_id for i in singles)}")
    by_file: dict[str, list[Instance]] = {}
    for instance in singles:
        by_file.setdefault(instance.path, []).append(instance)
    edits = {i.instance_id: line_edits(modules[i.path], apply_patch(modules[i.path], i.patch)) for i in singles}
    pools = [pool for _, pool in sorted(by_file.items()) if len(pool) >= MIN_PARTS]
    for pool in pools:
        rng.shuffle(pool)
    found: list[Combination] = []
    while len(found) < count and any(len(pool) >= MIN_PARTS for pool in pools):
        pool = max(pools, key=len)  # the file with the most singles left
        size = rng.randint(MIN_PARTS, min(MAX_PARTS, len(pool)))
        group = [pool.pop()]
        for other in list(pool):
            if len(group) == size:
                break
            if all(apart(edits[other.instance_id], edits[member.instance_id]) for member in group):
                group.append(other)
                pool.remove(other)
        if len(group) < MIN_PARTS:
            continue
        clean = modules[group[0].path]
        buggy = merged(clean, [edits[part.instance_id] for part in group])
        qualnames = list(dict.fromkeys(part.qualname for part in group))
        candidate = Candidate(MODIFIER, group[0].path, ", ".join(qualnames),
                              "; ".join(part.description for part in group), buggy, digest_of(group[0].path, buggy))
        found.append(Combination(tuple(group), candidate))
    return found


def combined_count(valid_singles: int) -> int:
    return math.ceil(valid_singles * SHARE) if valid_singles >= MIN_PARTS else 0


@dataclass
class Combined:
    instances: list[Instance]
    rejects: list[BugReject]
    tried: int          # combinations run
    gate_checked: int   # valid ones the final gate re-ran


def combine_bugs(space, instances: list[Instance], modules: dict[str, str], seed: int, passing: list[str],
                 baseline, collected, limits, concurrency: int) -> Combined:
    """The library's combined bugs from its valid singles, each run in a unit of its own, judged like any candidate
    and through the final gate."""
    from flawforge.debugging.generate import final_gate, instance_of, proven_run
    from flawforge.debugging.verdict import judge

    chosen = combinations(instances, modules, seed, combined_count(len(instances)))
    if not chosen:
        return Combined([], [], 0, 0)
    selected = {c.candidate: collected.ordered(c.selected) for c in chosen}
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        runs = list(pool.map(lambda c: space.run(collected.arguments(selected[c.candidate]),
                                                 {c.candidate.path: c.candidate.buggy_source}, limits=limits), chosen))
    valid, rejects = [], []
    layout = space.layout
    for combination, run in zip(chosen, runs):
        candidate = combination.candidate
        verdict = judge(selected[candidate], run, passing, baseline.collection_errors, baseline.standing_refusal)
        hidden = sorted(combination.parts_failing - set(verdict.fail_to_pass)) if verdict.valid else []
        if not verdict.valid or hidden:
            reason, detail = (verdict.reason, verdict.detail) if not verdict.valid else (
                "part_hidden", f"{len(hidden)} test(s) a part fails alone pass with the others, e.g. {hidden[0]}")
            rejects.append(BugReject(source=layout.name, version=layout.version, modifier=MODIFIER,
                                     path=candidate.path, qualname=candidate.qualname, hash8=candidate.hash8,
                                     reason=reason, detail=detail))
            continue
        instance = instance_of(space, candidate, modules[candidate.path], verdict, collected).model_copy(
            update={"parts": [part.instance_id for part in combination.parts]})
        valid.append((instance, candidate.buggy_source, proven_run(run, instance, collected)))
    kept, dropped = final_gate(space, valid, limits, concurrency)
    return Combined(kept, rejects + dropped, len(chosen), len(valid))

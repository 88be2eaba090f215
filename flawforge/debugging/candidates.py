"""Candidate bugs of a project: every modifier at every site, deduplicated, then a seeded choice.

A candidate is one module of the project with one bug in it. Two modifiers that make the same
change make one candidate: the first in registry order keeps it (the named mistakes, then the
procedural modifiers, then the broader inversion table and numeric perturbation). The choice is a function of
the seed, the project and the candidates alone: round robin over the modifiers, each
modifier's candidates in a seeded order, so every modifier is tried when there is room.
"""
from __future__ import annotations

import ast
import hashlib
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.modifiers.base import first_line
from flawforge.debugging.patches import unified_diff
from flawforge.debugging.syntax import parse


@dataclass(frozen=True)
class Candidate:
    modifier: str
    path: str            # the module's path in the project
    qualname: str        # the function or class the bug is in
    description: str
    buggy_source: str
    digest: str          # sha256 of the change's content (path and buggy module)

    @property
    def hash8(self) -> str:
        return self.digest[:8]

    def patch(self, clean: str) -> str:
        """The bug as a unified diff from the clean module."""
        return unified_diff(self.path, clean, self.buggy_source)


def digest_of(path: str, buggy_source: str) -> str:
    return hashlib.sha256(f"{path}\x00{buggy_source}".encode("utf-8")).hexdigest()


def candidates_of(modules: dict[str, str], modifiers: Iterable[str]) -> list[Candidate]:
    """Every change each named modifier makes in the modules ({path: source}), in a fixed order, deduplicated by
    content. Whether a change still parses and changes the code is asked of the few chosen (changes_code)."""
    wanted = set(modifiers)
    chosen = [modifier for name, modifier in REGISTRY.items() if name in wanted]
    seen: set[str] = set()
    found: list[Candidate] = []
    for path in sorted(modules):
        source = modules[path]
        try:
            sites = sites_of(path, source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for site in sites:
            for modifier in chosen:
                for bug in modifier.bugs(site):
                    buggy = apply_edits(source, bug.edits)
                    digest = digest_of(path, buggy)
                    if digest not in seen and buggy != source:
                        seen.add(digest)
                        found.append(Candidate(modifier.name, path, bug.qualname or site.qualname, bug.description,
                                               buggy, digest))
    return found


def changes_code(candidate: Candidate, clean: str) -> bool:
    """The buggy module parses and differs from the clean one beyond formatting. The text around the change is
    the same in both, so only the top-level statements the changed lines meet are parsed and compared (touched)."""
    clean_tree = parsed(clean)
    if clean_tree is None:
        return parsed(candidate.buggy_source) is not None
    change = touched(clean, candidate.buggy_source)
    if change.buggy is None:
        return False
    if change.whole:
        return ast.dump(parsed(candidate.buggy_source)) != ast.dump(clean_tree)
    return len(change.clean) != len(change.buggy) or any(
        ast.dump(before) != ast.dump(after) for before, after in zip(change.clean, change.buggy))


@dataclass(frozen=True)
class Touched:
    """The whole lines a change touched (1-based; the first is the same on both sides) and, on each side, the
    top-level statements that meet the stretch of lines around them (a block whose body the change emptied starts
    before it; a decorated definition starts at its first decorator)."""

    first: int
    clean_last: int
    buggy_last: int
    clean: list[ast.stmt]
    buggy: list[ast.stmt] | None  # None: the buggy module does not parse
    whole: bool  # the buggy side's statements are the whole module's (the stretch alone did not parse)


@lru_cache(maxsize=8)  # worth_trying asks it twice of each candidate: changes_code, then the realism filters
def touched(clean: str, buggy: str) -> Touched:
    """Of the buggy module only the stretch of lines that holds every clean top-level statement the changed lines
    meet is parsed (the clean module's tree serves all its changes). The lines before and after it are the clean
    module's and meet it where top-level statements end, so a stretch that parses is what the whole module holds
    there. One that does not parse alone may still parse within the module (a line indented into the block above,
    a continuation or a string the change opens and a later line closes): then the whole buggy module is parsed.
    Callers must not change what it returns."""
    prefix, suffix = unchanged_ends(clean, buggy)
    first = clean.count("\n", 0, prefix) + 1
    clean_last = clean.count("\n", 0, max(prefix, len(clean) - suffix)) + 1
    buggy_last = buggy.count("\n", 0, max(prefix, len(buggy) - suffix)) + 1
    tree = parsed(clean)
    low, high, statements = first, clean_last, []
    while tree is not None:  # statements sharing a line (`a = 1; b = (`) widen the stretch: to a fixed point
        statements = [s for s in tree.body if first_line(s) <= high and low <= s.end_lineno]
        wider = (min([low, *map(first_line, statements)]), max([high, *(s.end_lineno for s in statements)]))
        if wider == (low, high):
            break
        low, high = wider
    buggy_lines = source_lines(buggy)
    end = high + len(buggy_lines) - len(source_lines(clean))
    try:
        return Touched(first, clean_last, buggy_last, statements,
                       parse("\n" * (low - 1) + "".join(buggy_lines[low - 1:end])).body, False)
    except (SyntaxError, ValueError, RecursionError):
        whole = parsed(buggy)
    meeting = None if whole is None else [s for s in whole.body if first_line(s) <= end and low <= s.end_lineno]
    return Touched(first, clean_last, buggy_last, statements, meeting, True)


def source_lines(text: str) -> list[str]:
    """The text's lines as the parser numbers them: ended by a newline only (splitlines also ends one at a form
    feed, a vertical tab or a Unicode line separator, which then shifts every later line)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


@lru_cache(maxsize=64)
def parsed(source: str) -> ast.Module | None:
    """The module's tree, parsed once for every question asked of it (callers must not change it)."""
    try:
        return parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


def unchanged_ends(clean: str, buggy: str) -> tuple[int, int]:
    """The lengths of the longest common prefix and of the longest common suffix that does not overlap it."""
    most = min(len(clean), len(buggy))
    prefix = _longest(lambda n: clean[:n] == buggy[:n], most)
    suffix = _longest(lambda n: clean[len(clean) - n:] == buggy[len(buggy) - n:], most - prefix)
    return prefix, suffix


def _longest(holds: Callable[[int], bool], most: int) -> int:
    """The largest n <= most for which `holds(n)`, where it holds for every n up to some bound."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    return low


def choose(candidates: list[Candidate], count: int, seed: int, project: str,
           eligible: Callable[[Candidate], bool] = lambda candidate: True) -> list[Candidate]:
    """Up to `count` eligible candidates: round robin over modifiers (by name), each in a seeded order; eligibility
    is asked only of the candidates reached."""
    by_modifier: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_modifier.setdefault(candidate.modifier, []).append(candidate)
    queues = []
    for name in sorted(by_modifier):
        pool = sorted(by_modifier[name], key=lambda c: c.digest)
        random.Random(f"{seed}:{project}:{name}").shuffle(pool)
        queues.append(pool)
    # Each project's round starts at its own modifier, so a small count still tries every modifier somewhere.
    start = random.Random(f"{seed}:{project}").randrange(len(queues)) if queues else 0
    queues = queues[start:] + queues[:start]
    picked: list[Candidate] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            while queue and len(picked) < count:
                candidate = queue.pop(0)
                if eligible(candidate):
                    picked.append(candidate)
                    break
    return picked

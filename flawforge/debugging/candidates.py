"""Candidate bugs of a project: every modifier at every site, deduplicated, then a seeded choice.

A candidate is one module of the project with one bug in it. Two modifiers that make the same
change make one candidate (the first in modifier order keeps it). The choice is a function of
the seed, the project and the candidates alone: round robin over the modifiers, each
modifier's candidates in a seeded order, so every modifier is tried when there is room.
"""
from __future__ import annotations

import ast
import hashlib
import random
from dataclasses import dataclass
from typing import Iterable

from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.patches import unified_diff


@dataclass(frozen=True)
class Candidate:
    modifier: str
    path: str            # the module's path in the project
    qualname: str        # the function or class the bug is in
    description: str
    buggy_source: str
    patch: str           # unified diff, clean -> buggy
    digest: str          # sha256 of the change's content (path and buggy module)

    @property
    def hash8(self) -> str:
        return self.digest[:8]


def digest_of(path: str, buggy_source: str) -> str:
    return hashlib.sha256(f"{path}\x00{buggy_source}".encode("utf-8")).hexdigest()


def candidates_of(modules: dict[str, str], modifiers: Iterable[str]) -> list[Candidate]:
    """Every bug each named modifier makes in the modules ({path: source}), in a fixed order, deduplicated by
    content. A change that no longer parses or leaves the code as it was (up to formatting) is dropped."""
    chosen = [REGISTRY[name] for name in sorted(set(modifiers))]
    seen: set[str] = set()
    found: list[Candidate] = []
    for path in sorted(modules):
        source = modules[path]
        try:
            clean_tree = ast.dump(ast.parse(source))
            sites = sites_of(path, source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for site in sites:
            for modifier in chosen:
                for bug in modifier.bugs(site):
                    buggy = apply_edits(source, bug.edits)
                    digest = digest_of(path, buggy)
                    if digest in seen:
                        continue
                    seen.add(digest)
                    try:
                        if ast.dump(ast.parse(buggy)) == clean_tree:
                            continue
                    except (SyntaxError, ValueError, RecursionError):
                        continue
                    found.append(Candidate(modifier.name, path, bug.qualname or site.qualname, bug.description, buggy,
                                           unified_diff(path, source, buggy), digest))
    return found


def choose(candidates: list[Candidate], count: int, seed: int, project: str,
           eligible=lambda candidate: True) -> list[Candidate]:
    """Up to `count` eligible candidates: round robin over modifiers (by name), each in a seeded order."""
    by_modifier: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        if eligible(candidate):
            by_modifier.setdefault(candidate.modifier, []).append(candidate)
    queues = []
    for name in sorted(by_modifier):
        pool = sorted(by_modifier[name], key=lambda c: c.digest)
        random.Random(f"{seed}:{project}:{name}").shuffle(pool)
        queues.append(pool)
    picked: list[Candidate] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            if queue and len(picked) < count:
                picked.append(queue.pop(0))
    return picked

"""Candidate bugs of a project: every modifier at every site, deduplicated, then a seeded choice.

A candidate is one module of the project with one bug in it. Two modifiers that make the same
change make one candidate: the first in registry order keeps it (the procedural modifiers, then
the broader inversion table and numeric perturbation). The choice is a function of
the seed, the project and the candidates alone: round robin over the modifiers, each
modifier's candidates in a seeded order, so every modifier is tried when there is room.
"""
from __future__ import annotations

import ast
import hashlib
import random
from dataclasses import dataclass
from typing import Callable, Iterable

from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.patches import unified_diff


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


def changes_code(candidate: Candidate, clean_tree: str) -> bool:
    """The buggy module parses and differs from the clean one (`clean_tree`: its ast.dump) beyond formatting."""
    try:
        return ast.dump(ast.parse(candidate.buggy_source)) != clean_tree
    except (SyntaxError, ValueError, RecursionError):
        return False


def body_only_change(clean: str, buggy: str, qualname: str) -> bool:
    """The buggy module differs from the clean one only in the body of the function `qualname`, defined once at
    module or class level: replacing the live function's code then is exactly importing the buggy module (what a
    suite batch does instead)."""
    try:
        trees = [ast.parse(clean), ast.parse(buggy)]
    except (SyntaxError, ValueError, RecursionError):
        return False
    for tree in trees:
        found = list(_definitions(tree.body, qualname.split(".")))
        if len(found) != 1 or not isinstance(found[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        found[0].body = []
    return ast.dump(trees[0]) == ast.dump(trees[1])


def _definitions(body: list[ast.stmt], names: list[str]):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == names[0]:
            if len(names) == 1:
                yield node
            elif isinstance(node, ast.ClassDef):
                yield from _definitions(node.body, names[1:])


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

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

from flawforge.debugging.modifiers import REGISTRY, apply_edits, definitions, offset_of, sites_of
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


def changes_code(candidate: Candidate, clean: str) -> bool:
    """The buggy module parses and differs from the clean one beyond formatting. The text around the change is
    the same in both, so only the top-level statements the changed text touches are compared."""
    clean_tree, buggy_tree = parsed(clean), parsed(candidate.buggy_source)
    if clean_tree is None or buggy_tree is None:
        return buggy_tree is not None
    prefix, suffix = unchanged_ends(clean, candidate.buggy_source)
    clean_part = _touched(clean, clean_tree.body, prefix, len(clean) - suffix)
    buggy_part = _touched(candidate.buggy_source, buggy_tree.body, prefix, len(candidate.buggy_source) - suffix)
    if (clean_part.start, len(clean_tree.body) - clean_part.stop) != (buggy_part.start,
                                                                       len(buggy_tree.body) - buggy_part.stop):
        return True
    if len(clean_part) != len(buggy_part):
        return True
    return any(ast.dump(clean_tree.body[i]) != ast.dump(buggy_tree.body[j]) for i, j in zip(clean_part, buggy_part))


def _touched(source: str, body: list[ast.stmt], start: int, end: int) -> range:
    """The statements of `body` whose text (lines included) meets the characters [start, end]."""
    spans = [(offset_of(source, node.lineno, 0), offset_of(source, node.end_lineno, node.end_col_offset))
             for node in body]
    touched = [i for i, (first, last) in enumerate(spans) if first <= end and start <= last]
    if not touched:  # the change is between statements: an empty range where it is
        before = sum(1 for first, _ in spans if first <= start)
        return range(before, before)
    return range(touched[0], touched[-1] + 1)


@lru_cache(maxsize=64)
def parsed(source: str) -> ast.Module | None:
    """The module's tree, parsed once for every question asked of it (callers must not change it)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


def body_only_change(clean: str, buggy: str, qualname: str) -> bool:
    """The buggy module differs from the clean one only in the body of the function `qualname`, defined once at
    module or class level: replacing the live function's code then is exactly importing the buggy module (what a
    suite batch does instead). The text outside the body is the same, and the buggy module's function has its
    body exactly where the changed text is (nothing dedented out of it), so the rest parses the same."""
    clean_def, buggy_def = (_only_definition(parsed(source), qualname) for source in (clean, buggy))
    if not all(isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in (clean_def, buggy_def)):
        return False
    start = offset_of(clean, clean_def.body[0].lineno, 0)  # the first statement's line, with its indentation
    end = offset_of(clean, clean_def.body[-1].end_lineno, clean_def.body[-1].end_col_offset)
    prefix, suffix = unchanged_ends(clean, buggy)
    buggy_start, buggy_end = _span(buggy, buggy_def.body[0], buggy_def.body[-1])
    return (start <= prefix and not clean[end:len(clean) - suffix].strip()
            and start <= buggy_start and not buggy[start:buggy_start].strip()
            and buggy_end <= end + len(buggy) - len(clean) and not buggy[buggy_end:len(buggy) - suffix].strip())


# Names class creation itself reads (an __eq__ without __hash__ sets __hash__ to None, a base's
# __init_subclass__ runs, descriptors learn their names): removing one later is not the same as never having it.
READ_AT_CLASS_CREATION = frozenset({"__eq__", "__hash__", "__init_subclass__", "__set_name__", "__class_getitem__",
                                    "__slots__", "__classcell__", "__mro_entries__"})


def member_removal(clean: str, buggy: str, qualname: str) -> bool:
    """The buggy module is the clean one without the method `qualname` (its lines, and blank space around them),
    defined once in an undecorated class and bound nowhere else in it: deleting the
    attribute from the live class is then exactly importing the buggy module (what a suite batch does instead;
    the unit checks the class's metaclass)."""
    owner_names, name = qualname.split(".")[:-1], qualname.rsplit(".", 1)[-1]
    tree = parsed(clean)
    if not owner_names or name in READ_AT_CLASS_CREATION or tree is None or parsed(buggy) is None:
        return False
    owner = _only_definition(tree, ".".join(owner_names))
    if not isinstance(owner, ast.ClassDef) or owner.decorator_list:
        return False
    binding = [node for node in owner.body if name in _bound_names(node)]
    if len(binding) != 1 or not isinstance(binding[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    member = binding[0]
    start = offset_of(clean, min(node.lineno for node in [member, *member.decorator_list]), 0)
    end = offset_of(clean, member.end_lineno, member.end_col_offset)
    prefix, suffix = unchanged_ends(clean, buggy)
    removed_to, kept_to = len(clean) - suffix, len(buggy) - suffix
    return (prefix <= start and end <= removed_to and not clean[prefix:start].strip()
            and not clean[end:removed_to].strip() and not buggy[prefix:kept_to].strip())


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    return {target.id for target in ast.walk(node) if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)}


def _only_definition(tree: ast.Module | None, qualname: str):
    found = [node for name, node in definitions(tree) if name == qualname] if tree is not None else []
    return found[0] if len(found) == 1 else None


def _span(source: str, first: ast.AST, last: ast.AST) -> tuple[int, int]:
    """Character offsets of the text from `first`'s start to `last`'s end."""
    return (offset_of(source, first.lineno, first.col_offset),
            offset_of(source, last.end_lineno, last.end_col_offset))


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

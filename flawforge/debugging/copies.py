"""The answer written elsewhere in the project: a candidate whose clean code another file copies is not tried.

A task folder holds the whole project. Where another of its files holds the function a bug changes as the clean
module writes it (pathspec's sdist keeps an older copy of its pattern module under `benchmarks/`), an agent can
read the fix off that file instead of debugging: the instance would give its answer away. A file copies the
function when it holds most of the function's lines (COPIED_SHARE of those with MIN_CHARS or more, at least
MIN_LINES of them), the lines the bug changes among them as the clean module has them. Pure: the project's files
in, a path (or None) per candidate out; each file's lines are read once.
"""
from __future__ import annotations

import functools
from collections import Counter

from flawforge.debugging.candidates import Candidate, touched
from flawforge.debugging.modifiers.base import definitions, first_line
from flawforge.debugging.syntax import parse

MIN_CHARS = 6  # a shorter line ('else:', 'pass', 'return') says nothing about where it was copied from
MIN_LINES = 4
COPIED_SHARE = 0.5
LARGEST_FILE = 4 << 20


def _substantive(lines) -> set[str]:
    return {line.strip() for line in lines if len(line.strip()) >= MIN_CHARS}


@functools.lru_cache(maxsize=16)
def _spans(source: str) -> dict[str, tuple[int, int]]:
    """The lines (first, last) of every function, method and class of a module by qualname, as the modifiers name
    them (modifiers.base.definitions); none where it does not parse."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    return {name: (first_line(node), node.end_lineno)
            for name, node in definitions(tree)}


class ProjectCopies:
    """The project's files by the lines they hold, to ask of each candidate where else its clean code is written."""

    def __init__(self, files: dict[str, bytes]):
        self.holders: dict[str, set[str]] = {}
        for path, data in files.items():
            if len(data) <= LARGEST_FILE:
                for line in _substantive(data.decode("utf-8", "replace").splitlines()):
                    self.holders.setdefault(line, set()).add(path)

    def holding(self, candidate: Candidate, clean: str) -> str | None:
        """Another file that copies the function (or class) the candidate changes, with the changed lines as the
        clean module writes them; None where no file does."""
        span = _spans(clean).get(candidate.qualname)
        if span is None:
            return None
        lines = clean.splitlines()
        function = _substantive(lines[span[0] - 1:span[1]])
        if len(function) < MIN_LINES:
            return None
        change = touched(clean, candidate.buggy_source)
        changed = _substantive(lines[change.first - 1:change.clean_last])
        counts = Counter(path for line in function for path in self.holders.get(line, ()) if path != candidate.path)
        for path, count in counts.most_common():
            if count < COPIED_SHARE * len(function):
                break
            if all(path in self.holders.get(line, ()) for line in changed):
                return path
        return None

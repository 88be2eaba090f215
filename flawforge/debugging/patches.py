"""Unified diffs between a module's clean and buggy text, and instance ids."""
from __future__ import annotations

import difflib
import re


def unified_diff(path: str, before: str, after: str) -> str:
    """A diff `patch -p1` and `git apply` take, from `before` to `after` of the file at `path`."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=3)
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def instance_id(source: str, version: str, modifier: str, hash8: str) -> str:
    """`<source>.<version>.<modifier>__<hash8>`, the source made safe for a file name."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", source).strip("-") or "source"
    return f"{safe}.{version}.{modifier}__{hash8}"


def task_id(instance_id: str) -> str:
    """The task folder's name for an instance: its id without the modifier, `<source>.<version>__<hash8>` (the
    folder an agent works in does not name the kind of bug)."""
    head, _, tail = instance_id.rpartition(".")
    return f"{head}__{tail.rpartition('__')[2]}"


def changed_lines(patch: str) -> list[int]:
    """Lines of the clean file that the patch removes or changes (1-based), from its hunks."""
    found: list[int] = []
    line = 0
    for text in patch.splitlines():
        header = re.match(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", text)
        if header:
            line = int(header.group(1))
        elif text.startswith("-") and not text.startswith("---"):
            found.append(line)
            line += 1
        elif text.startswith(" "):
            line += 1
    return found


def fix_site(patch: str) -> list[int]:
    """Lines of the file before the patch that tell where it goes: those it removes or changes; for a hunk that
    only adds lines, the two lines the insertion goes between (one at the file's start or end)."""
    found: list[int] = []
    line = 0
    removed_here = False
    for text in patch.splitlines():
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", text)
        if header:
            # An empty old side ("-N,0") names the line after which the new lines go.
            line = int(header.group(1)) + (1 if header.group(2) == "0" else 0)
            removed_here = False
        elif text.startswith("-") and not text.startswith("---"):
            found.append(line)
            line += 1
            removed_here = True
        elif text.startswith("+") and not text.startswith("+++"):
            if not removed_here:
                found += [n for n in (line - 1, line) if n >= 1 and n not in found]
            removed_here = True  # one insertion, however many lines it adds
        elif text.startswith(" "):
            line += 1
            removed_here = False
    return sorted(set(found))


def split_hunks(patch: str) -> list[str]:
    """A one-file diff as one diff per hunk, each with the file's header."""
    lines = patch.splitlines(keepends=True)
    starts = [n for n, line in enumerate(lines) if line.startswith("@@")]
    header = "".join(lines[:starts[0]]) if starts else ""
    return [header + "".join(lines[start:end]) for start, end in zip(starts, [*starts[1:], len(lines)])]


def apply_patch(text: str, patch: str) -> str:
    """`text` with a unified diff of one file applied (diffs as unified_diff writes them; context must match)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    position = 0
    patch_lines = patch.splitlines(keepends=True)
    index = 0
    while index < len(patch_lines):
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", patch_lines[index])
        index += 1
        if not header:
            continue
        start = int(header.group(1)) - (0 if header.group(2) == "0" else 1)
        out += lines[position:start]
        position = start
        while index < len(patch_lines) and not patch_lines[index].startswith("@@"):
            line = patch_lines[index]
            index += 1
            no_newline = index < len(patch_lines) and patch_lines[index].startswith("\\")
            body = line[1:].rstrip("\n") if no_newline else line[1:]
            if no_newline:
                index += 1
            if line.startswith(" ") or line.startswith("-"):
                if position >= len(lines) or lines[position] != body:
                    raise ValueError(f"the patch does not apply at line {position + 1}")
                position += 1
                if line.startswith(" "):
                    out.append(body)
            elif line.startswith("+"):
                out.append(body)
    return "".join(out + lines[position:])

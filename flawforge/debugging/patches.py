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

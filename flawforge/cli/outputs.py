"""The output folder of a command: checked before any work, and removed again if the command fails.

A command that fails or is interrupted leaves nothing behind that looks like a result: a folder it
created is removed whole; in a folder that was there before, only the files it wrote go.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from flawforge.errors import FlawforgeError


MAX_SHOWN_CHARS = 200


def shown(path: Path) -> str:
    """A path as a one-line error shows it: whole, or its start and its length when it is very long."""
    text = str(path)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:MAX_SHOWN_CHARS]}... ({len(text):,} characters)"


@contextmanager
def output_folder(out: Path, option: str = "--out") -> Iterator[Path]:
    created = False
    try:
        if out.exists() and not out.is_dir():
            raise FlawforgeError(f"{option} {shown(out)} is a file; name a folder")
        existed = out.exists()
        before = set(out.iterdir()) if existed else set()
        out.mkdir(parents=True, exist_ok=True)
        created = not existed
        # A folder that lists but takes no new entries (/proc/self/fd) is refused now, not halfway through the work.
        os.rmdir(tempfile.mkdtemp(prefix=".writable-", dir=out))
    except OSError as exc:  # a name too long, a file system that refuses: one line, not a traceback
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise FlawforgeError(f"{option} {shown(out)}: cannot create it or write in it ({exc.strerror or exc})") \
            from None
    try:
        yield out
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for path in set(out.iterdir()) - before:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        raise

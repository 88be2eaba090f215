"""The output folder of a command: checked before any work, and removed again if the command fails.

A command that fails or is interrupted leaves nothing behind that looks like a result: a folder it
created is removed whole; in a folder that was there before, only the files it wrote go.
"""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from flawforge.errors import FlawforgeError


@contextmanager
def output_folder(out: Path, option: str = "--out") -> Iterator[Path]:
    if out.exists() and not out.is_dir():
        raise FlawforgeError(f"{option} {out} is a file; name a folder")
    existed = out.exists()
    before = set(out.iterdir()) if existed else set()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FlawforgeError(f"{option} {out}: cannot create it ({exc.strerror or exc})") from None
    try:
        yield out
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for path in set(out.iterdir()) - before:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        raise

"""Files that appear whole or not at all: written under a temporary name beside the target, then renamed."""
from __future__ import annotations

import itertools
import os
import threading
from typing import Iterable

_TEMP_NUMBERS = itertools.count()


def temp_beside(path: str) -> str:
    """A temporary name in `path`'s folder, named by process, thread and a counter: unique without
    mkstemp's random probing."""
    return os.path.join(os.path.dirname(path), f".tmp-{os.getpid()}-{threading.get_ident()}-{next(_TEMP_NUMBERS)}")


def write_beside(path: str, chunks: Iterable[bytes], mode: int) -> str:
    """A new file holding the chunks in `path`'s folder (created when missing); returns its path. Nothing is
    left behind if the chunks fail."""
    tmp = temp_beside(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, mode)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            for chunk in chunks:
                file.write(chunk)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def replace(tmp: str, path: str) -> None:
    """Moves a finished temporary file into place: readers never see a half-written file."""
    try:
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass

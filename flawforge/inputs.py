"""Files a job reads: named only under the data roots, regular files (or folders), bounded in size.

A job's parameters come from whoever may call the jobs API. A path parameter is checked before
anything is opened: resolved (symlinks too) and found under one of the data roots
(FLAWFORGE_DATA_ROOTS), then of the right kind; a FIFO, device or socket is refused without
being opened, so it can never block the job runner, and a path outside the roots gets the same
answer whether it exists or not. Reads stop at a size limit, whatever the file grew to.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, ValidationInfo

from flawforge.errors import InvalidInput

MAX_INPUT_BYTES = 256 << 20  # an input file (GSM8K is 4 MB)
MAX_PATH_CHARS = 4096
# The validation context key of the roots and of whether files must exist where the parameters are validated.
ROOTS_CONTEXT = "data_roots"
MUST_EXIST_CONTEXT = "inputs_must_exist"

Kind = Literal["file", "folder"]


class InputRefused(InvalidInput):
    code = "input_refused"


def data_roots(setting: str, *extra: str | os.PathLike) -> tuple[Path, ...]:
    """The comma-separated roots of the setting and any extra ones, resolved (relative ones against the
    working directory)."""
    named = [part.strip() for part in setting.split(",") if part.strip()] + [os.fspath(e) for e in extra]
    return tuple(dict.fromkeys(Path(os.path.realpath(root)) for root in named))


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def check_input(value: str, kind: Kind, roots: tuple[Path, ...], *, must_exist: bool = True) -> str:
    """`value` if it names a `kind` under one of the roots; else InputRefused saying why. Opens nothing."""
    if not value or "\x00" in value or len(value) > MAX_PATH_CHARS or not os.path.isabs(value):
        raise InputRefused("must be an absolute path as the worker sees it")
    real = Path(os.path.realpath(value))
    if not any(real == root or root in real.parents for root in roots):
        shown = ", ".join(map(str, roots)) or "none configured"
        raise InputRefused(f"{value} is outside the data roots ({shown}; FLAWFORGE_DATA_ROOTS names them)")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if must_exist:
            raise InputRefused(f"{value} does not exist") from None
        return value
    except OSError as exc:
        raise InputRefused(f"{value} cannot be examined: {exc.strerror}") from None
    wanted = stat.S_ISREG if kind == "file" else stat.S_ISDIR
    if not wanted(mode):
        raise InputRefused(f"{value} is {_kind_of(mode)}, not a {'regular file' if kind == 'file' else 'folder'}")
    if kind == "file" and os.stat(real).st_size > MAX_INPUT_BYTES:
        raise InputRefused(f"{value} is over {MAX_INPUT_BYTES:,} bytes")
    return value


def _confined(kind: Kind):
    def validate(value: str | None, info: ValidationInfo) -> str | None:
        # Parameters built in code carry no context and are trusted; the jobs API and the job runner always
        # validate with the roots.
        context = info.context or {}
        if value is None or ROOTS_CONTEXT not in context:
            return value
        try:
            return check_input(value, kind, context[ROOTS_CONTEXT], must_exist=context.get(MUST_EXIST_CONTEXT, True))
        except InputRefused as exc:
            raise ValueError(str(exc)) from None  # pydantic names the parameter
    return validate


# A job parameter naming a file / a folder under the data roots.
InputFile = Annotated[str, AfterValidator(_confined("file"))]
InputFolder = Annotated[str, AfterValidator(_confined("folder"))]


def resolves_within(path: str, folder: str) -> bool:
    """Whether `path`, links followed, is inside `folder` (a resolved path, as os.path.realpath gives it).

    A path written under the folder is checked part by part below it, one lstat a part (a template read
    from the shared corpus is three parts below its folder and eight below the root); a link, or a part
    that cannot be examined, sends it to os.path.realpath like any other path."""
    prefix = os.path.join(folder, "")
    if path.startswith(prefix):
        current, parts = folder, path[len(prefix):].split(os.sep)
        try:
            for part in parts:
                if part in ("", ".", ".."):
                    break
                current = os.path.join(current, part)
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    break
            else:
                return True
        except OSError:
            pass
    return os.path.realpath(path).startswith(prefix)


def read_input(path: str | os.PathLike, limit: int = MAX_INPUT_BYTES, *, within: str | None = None) -> bytes:
    """The bytes of a regular file, at most `limit`: opened without blocking (a FIFO put in its place after the
    check neither blocks nor is read), refused if it is no regular file, is over the limit, or (given `within`, a
    checked folder as os.path.realpath gives it) resolves to somewhere outside that folder."""
    if within is not None and not resolves_within(os.fspath(path), within):
        raise InputRefused(f"{path} leads out of {within}")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputRefused(f"{path} is {_kind_of(mode)}, not a regular file")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InputRefused(f"{path} is over {limit:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


class UnsafeName(InvalidInput):
    code = "unsafe_name"


def plain_name(name: str, what: str = "name", *, single: bool = False) -> str:
    """`name` if it is a plain relative path ('a/b.py': no absolute path, no '.', '..' or empty part, no backslash,
    no NUL; with `single`, one part only), else UnsafeName. Names that come from files and records (archive
    members, an instance's id and path) pass here before they become paths."""
    from flawforge.sandbox.runtime.archive import name_problem

    if (not isinstance(name, str) or not name or len(name) > MAX_PATH_CHARS or name_problem(name)
            or (single and "/" in name)):
        raise UnsafeName(f"{what} {name!r} is not a plain {'file name' if single else 'relative name'}")
    return name


def path_within(folder: str | os.PathLike, name: str, what: str = "name", *, single: bool = False) -> Path:
    """`folder`/`name` for a plain relative `name` that, links followed, stays inside `folder`; else UnsafeName."""
    base = os.path.realpath(folder)
    target = os.path.join(base, plain_name(name, what, single=single))
    if not resolves_within(target, base):
        raise UnsafeName(f"{what} {name!r} leads out of its folder")
    return Path(target)

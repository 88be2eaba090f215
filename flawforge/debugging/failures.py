"""A failing test's pytest message (`--tb=native`, as the suite unit reports it) made readable and free of host paths.

pytest's native traceback starts with some thirty frames of pytest and pluggy before the test's own; cut from the
front, the output showed only those. What a reader needs comes first here: the exception (or assertion) lines, then
the test's and the library's frames. Paths are written as the reader's checkout would have them: files of the
unit's work dir relative to the library root, installed packages as `<site-packages>/pkg/...`, the standard library
as `<stdlib>/...`, anything else absolute by its file name only. Pure text in, text out.
"""
from __future__ import annotations

import re

FAILURE_BYTES = 3 * 1024
# Frames kept of a deep traceback: the outermost ones (the test) and the innermost (where it raised).
OUTER_FRAMES, INNER_FRAMES = 4, 8
FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<name>.*)$')
CHAIN = ("During handling of the above exception, another exception occurred:",
         "The above exception was the direct cause of the following exception:")
RUNNER_PARTS = ("/_pytest/", "/pluggy/", "/site-packages/pytest/", "/flawforge/sandbox/runtime/")
# unittest's own frames (its runner, its assertion helpers, its mocks): none is the test's or the library's
UNITTEST = re.compile(r"(?:/lib/python\d+\.\d+|<stdlib>)/unittest/")
# The sandbox's modules, compiled under names of their own rather than file paths
SANDBOX_MODULE = "<flawforge."
# Control characters a test may print (NUL and the like), which make a text file read as binary; written escaped
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
CARETS = re.compile(r"^\s*[\^~]+\s*$")
WORK_DIR = re.compile(r"/tmp/\d+/")
SITE_PACKAGES = re.compile(r"(?:/[^\s\"'/:]+)*/lib/python\d+\.\d+/(?:site|dist)-packages/")
STDLIB = re.compile(r"(?:/[^\s\"'/:]+)*/lib/python\d+\.\d+/")
# Folders of a machine's own files; a path under one is shown by its file name (a URL's path is left alone).
HOST_PATH = re.compile(r"(?<![\w.:/<>-])/(?:root|home|tmp|work|usr|opt|var|srv|mnt|Users|private|nix|scratch)"
                       r"(?:/[^\s\"'/:<>]+)*/(?=[^\s\"'/:<>]+)")


def without_host_paths(text: str) -> str:
    """`text` with every absolute path of the machine rewritten (see the module's note)."""
    text = WORK_DIR.sub("", text)
    text = SITE_PACKAGES.sub("<site-packages>/", text)
    text = STDLIB.sub("<stdlib>/", text)
    return HOST_PATH.sub("", text)


def cut(text: str, limit: int) -> str:
    """`text` in at most about `limit` bytes, saying so when it was cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore").rsplit("\n", 1)[0]
    return f"{kept}\n... ({len(data) - len(kept.encode())} more bytes of output cut)"


def _is_runner(path: str) -> bool:
    return (any(part in path for part in RUNNER_PARTS) or path.endswith(("/pytest/__init__.py", "/py.py"))
            or path.startswith(SANDBOX_MODULE) or UNITTEST.search(path) is not None)


def _escaped(text: str) -> str:
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _sections(lines: list[str]) -> list[tuple[list[list[str]], list[str]]]:
    """The traceback's chained parts, each as (its frames, each a list of lines; the exception's lines). What comes
    before the first frame (the header, or the end of a line the unit cut the message's front at) is left out."""
    sections: list[tuple[list[list[str]], list[str]]] = []
    frames: list[list[str]] = []
    exception: list[str] = []
    for line in lines:
        if line.strip() in CHAIN:
            sections.append((frames, exception))
            frames, exception = [], []
        elif FRAME.match(line) and not exception:
            frames.append([line])
        elif CARETS.match(line) or not line.strip() or line.startswith("Traceback (most recent call last):"):
            continue
        elif frames and not exception and (line.startswith("    ") or line.startswith("  [Previous line")):
            frames[-1].append(line)
        elif frames or sections:
            exception.append(line)
    return [section for section in [*sections, (frames, exception)] if section != ([], [])]


def _shown_frames(frames: list[list[str]]) -> list[str]:
    kept = [frame for frame in frames if not _is_runner(FRAME.match(frame[0]).group("path"))]
    if len(kept) > OUTER_FRAMES + INNER_FRAMES:
        left_out = len(kept) - OUTER_FRAMES - INNER_FRAMES
        kept = kept[:OUTER_FRAMES] + [[f"  ... {left_out} frames left out ..."]] + kept[-INNER_FRAMES:]
    return [line for frame in kept for line in frame]


def readable_failure(message: str, limit: int = FAILURE_BYTES) -> str:
    """A test's failure message: the exception or assertion lines first, then the test's and the library's frames
    (pytest's, pluggy's, unittest's and the sandbox's own dropped), chained exceptions after, host paths rewritten,
    control characters escaped, at most about `limit` bytes. A message that is no traceback (a skip reason, an xfail) keeps its text, paths rewritten."""
    message = _escaped(message)
    sections = _sections(message.splitlines())
    if not any(frames for frames, _ in sections):
        return cut(without_host_paths(message.strip()), limit)
    parts = []
    for number, (frames, exception) in enumerate(reversed(sections)):
        header = "Traceback, most recent call last (pytest's own frames left out):" if number == 0 else (
            "Raised while handling:")
        parts.append("\n".join([*exception, header, *_shown_frames(frames)] if number == 0
                               else [header, *exception, *_shown_frames(frames)]))
    return cut(without_host_paths("\n\n".join(parts)), limit)

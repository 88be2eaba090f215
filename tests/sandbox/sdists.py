"""The hostile sdists of attacks/sdists/: one file each, building its archive with the helpers here.

A file's header comment says what the archive tries; `# refused: WORDS` names words the reader's refusal must hold.
Every one comes with a project's top folder `lib-1.0/`, as a real sdist, so that only the hostile member is wrong.
"""
from __future__ import annotations

import gzip
import io
import runpy
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tests.sandbox.test_attacks import header

FOLDER = Path(__file__).parent / "attacks" / "sdists"
TOP = "lib-1.0"


@dataclass(frozen=True)
class SdistAttack:
    name: str       # the file's stem
    data: bytes     # the .tar.gz
    refused: str    # words the refusal names

    @property
    def archive_name(self) -> str:
        return f"{self.name.replace('_', '')}-1.0.tar.gz"


def member(name: str, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes]], form: int = tarfile.PAX_FORMAT) -> bytes:
    """A gzip-compressed tar of `members`, a plain package and a test first."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=form) as tar:
        for info, data in [member(f"{TOP}/pkg/__init__.py"), member(f"{TOP}/tests/test_pkg.py", b"import pkg\n"),
                           *members]:
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def gzipped(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


@lru_cache(maxsize=1)
def corpus() -> tuple[SdistAttack, ...]:
    return tuple(SdistAttack(path.stem, runpy.run_path(str(path))["sdist"](), header(path)["refused"])
                 for path in sorted(FOLDER.glob("*.py")))

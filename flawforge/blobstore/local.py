"""Blob store on a local folder: the embedded default."""
from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Iterator

from flawforge.blobstore.base import BlobStore, check_key
from flawforge.errors import BlobNotFound, BlobStoreUnavailable
from flawforge.proto.base import BlobRef


class LocalBlobStore(BlobStore):
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, check_key(key))

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> BlobRef:
        path = self._path(key)
        tmp = _write_beside(path, data)  # then renamed: readers never see a half-written blob
        try:
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return self.ref_for(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = _write_beside(path, data)
        try:
            os.link(tmp, path)  # atomic create-if-absent with full content
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as file:
                return file.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFound(key) from None

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def list(self, prefix: str = "") -> Iterator[str]:
        # Walk only the deepest folder the prefix names, not the whole store.
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / folder if folder else self.root
        keys = []
        for dirpath, _dirnames, filenames in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in filenames:
                if name.startswith(".tmp-"):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def ping(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise BlobStoreUnavailable(f"blob folder {self.root} is not writable")


_TEMP_NUMBERS = itertools.count()


def _write_beside(path: str, data: bytes) -> str:
    """A new file holding `data` in `path`'s folder (created when missing); returns its path.
    Named by process, thread and a counter: unique without mkstemp's random probing."""
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".tmp-{os.getpid()}-{threading.get_ident()}-{next(_TEMP_NUMBERS)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp

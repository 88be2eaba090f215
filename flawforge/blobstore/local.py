"""Blob store on a local folder: the embedded default."""
from __future__ import annotations

import itertools
import os
import shutil
import threading
from pathlib import Path
from typing import Iterable, Iterator

from flawforge.blobstore.base import BlobStore, ChunkDigest, check_key
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
        _replace(_write_beside(path, (data,)), path)
        return self.ref_for(key, data)

    def put_chunks(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/octet-stream") -> BlobRef:
        path, digest = self._path(key), ChunkDigest()
        _replace(_write_beside(path, digest.through(chunks)), path)
        return digest.ref(key)

    def download(self, key: str, path: str | os.PathLike) -> None:
        source, path = self._path(key), os.fspath(path)
        if not os.path.isfile(source):
            raise BlobNotFound(key)
        tmp = _temp_beside(path)
        try:
            shutil.copyfile(source, tmp)  # copied by the kernel, not through Python
        except FileNotFoundError:
            if not os.path.isfile(source):  # deleted meanwhile
                raise BlobNotFound(key) from None
            raise
        _replace(tmp, path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = _write_beside(path, (data,))
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


def _temp_beside(path: str) -> str:
    """A temporary name in `path`'s folder, named by process, thread and a counter: unique without
    mkstemp's random probing."""
    return os.path.join(os.path.dirname(path), f".tmp-{os.getpid()}-{threading.get_ident()}-{next(_TEMP_NUMBERS)}")


def _write_beside(path: str, chunks: Iterable[bytes]) -> str:
    """A new file holding the chunks in `path`'s folder (created when missing); returns its path."""
    tmp = _temp_beside(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            for chunk in chunks:
                file.write(chunk)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _replace(tmp: str, path: str) -> None:
    """Moves a finished temporary file into place: readers never see a half-written file."""
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

"""Blob store on a local folder: the embedded default."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from flawforge.blobstore.base import BlobStore, ChunkDigest, check_key, storage_failures
from flawforge.blobstore.files import discard, replace, temp_beside, write_beside
from flawforge.errors import BlobNotFound, BlobStoreUnavailable
from flawforge.proto.base import BlobRef


BLOB_MODE = 0o600  # the store's files are the service's own
# Failures of the folder itself (read-only, full, not ours, broken disk), as against a missing blob or a bad key.
STORAGE_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO}
_storage_failures = storage_failures(OSError, applies=lambda exc: exc.errno in STORAGE_ERRNOS)


class LocalBlobStore(BlobStore):
    def __init__(self, root: str | os.PathLike, min_free_bytes: int = 0):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.min_free_bytes = min_free_bytes
        self.where = f"blob folder {self.root}"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, check_key(key))

    @_storage_failures
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> BlobRef:
        path = self._path(key)
        replace(write_beside(path, (data,), BLOB_MODE), path)
        return self.ref_for(key, data)

    @_storage_failures
    def put_chunks(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/octet-stream") -> BlobRef:
        path, digest = self._path(key), ChunkDigest()
        replace(write_beside(path, digest.through(chunks), BLOB_MODE), path)
        return digest.ref(key)

    def download(self, key: str, path: str | os.PathLike) -> None:
        source, path = self._path(key), os.fspath(path)
        if not os.path.isfile(source):
            raise BlobNotFound(key)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = temp_beside(path)
        try:
            shutil.copyfile(source, tmp)  # copied by the kernel, not through Python
        except BaseException:
            discard(tmp)
            if not os.path.isfile(source):  # deleted meanwhile
                raise BlobNotFound(key) from None
            raise
        replace(tmp, path)

    @_storage_failures
    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = write_beside(path, (data,), BLOB_MODE)
        try:
            os.link(tmp, path)  # atomic create-if-absent with full content
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    @_storage_failures
    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as file:
                return file.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFound(key) from None

    @_storage_failures
    def get_range(self, key: str, offset: int, size: int) -> bytes:
        try:
            with open(self._path(key), "rb") as file:
                file.seek(offset)
                return file.read(size)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFound(key) from None

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    @_storage_failures
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

    @_storage_failures
    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    @_storage_failures
    def ping(self) -> None:
        """A real write: a folder made read-only, or a full disk, fails here (a permission check would not see
        either as root); less than `min_free_bytes` left counts as full."""
        os.unlink(write_beside(os.path.join(self.root, ".ping"), (b"ping",), BLOB_MODE))
        stats = os.statvfs(self.root)
        free = stats.f_bavail * stats.f_frsize
        if free < self.min_free_bytes:
            raise BlobStoreUnavailable(f"{self.where}: only {free:,} bytes free, under the "
                                       f"{self.min_free_bytes:,} FLAWFORGE_BLOB_MIN_FREE_MB asks for")

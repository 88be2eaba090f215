"""The blob-store contract every backend satisfies."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from flawforge.errors import BlobStoreUnavailable, ChecksumMismatch
from flawforge.proto.base import BlobRef


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_key(prefix: str, data: bytes, suffix: str = "") -> str:
    """Content-addressed key: the same bytes always land at the same key, so rewriting is harmless."""
    digest = sha256_hex(data)
    return f"{prefix.rstrip('/')}/{digest[:2]}/{digest}{suffix}"


def check_key(key: str) -> str:
    if not key or key.startswith("/") or ".." in key.split("/") or "\\" in key or "\x00" in key:
        raise ValueError(f"invalid blob key {key!r}")
    return key


T = TypeVar("T")


def storage_failures(*kinds: type[BaseException], applies: Callable[[BaseException], bool] = lambda exc: True):
    """Decorates a store method: its backend's own failures (of `kinds`, where `applies`) become
    BlobStoreUnavailable naming the store and the reason, which the API answers with a 503."""
    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def guarded(self: "BlobStore", *args, **kwargs) -> T:
            try:
                return method(self, *args, **kwargs)
            except kinds as exc:
                if not applies(exc):
                    raise
                raise BlobStoreUnavailable(f"{self.where}: {exc}") from exc
        return guarded
    return decorate


class ChunkDigest:
    """The checksum and size of the chunks passed `through` it: a blob written piecewise gets its ref
    without being read again."""

    def __init__(self):
        self._sha256 = hashlib.sha256()
        self.size = 0

    def through(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self._sha256.update(chunk)
            self.size += len(chunk)
            yield chunk

    def ref(self, key: str) -> BlobRef:
        return BlobRef(key=key, sha256=self._sha256.hexdigest(), size=self.size)


class BlobStore(ABC):
    """Keys are '/'-separated relative paths. Writes are atomic: a reader sees all of a blob or none."""

    where = "blob store"  # named in errors: the folder, the bucket

    @abstractmethod
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> BlobRef: ...

    @abstractmethod
    def put_chunks(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/octet-stream") -> BlobRef:
        """Writes the blob from chunks as they come (from a producer still at work, say), never holding it whole
        in memory. Atomic like put: if the chunks fail, nothing is written and their exception propagates."""

    @abstractmethod
    def download(self, key: str, path: str | os.PathLike) -> None:
        """Copies the blob into the file at `path` (its folder created when missing) without reading it into
        memory; the file appears complete or not at all. Raises BlobNotFound."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Writes only if no blob exists at key; returns whether this call wrote it."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """Raises BlobNotFound."""

    @abstractmethod
    def get_range(self, key: str, offset: int, size: int) -> bytes:
        """`size` bytes of the blob from `offset` (fewer past its end). Raises BlobNotFound."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under prefix, in lexicographic order."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def ping(self) -> None:
        """Raises BlobStoreUnavailable when the backend cannot be used."""

    # Helpers built on the primitives above, shared by every backend.
    def put_content(self, prefix: str, data: bytes, suffix: str = "") -> BlobRef:
        return self.put(content_key(prefix, data, suffix), data)

    def put_slices(self, key: str, parts: Sequence[bytes]) -> list[BlobRef]:
        """Writes the parts as one blob and returns a ref to each part's slice of it: one file, or one request,
        for many small blobs."""
        parts, refs, offset = list(parts), [], 0
        for part in parts:
            refs.append(BlobRef(key=key, sha256=sha256_hex(part), size=len(part), offset=offset))
            offset += len(part)
        self.put_chunks(key, parts)
        return refs

    def get_verified(self, ref: BlobRef) -> bytes:
        """The blob, or the slice of it, that `ref` names; raises ChecksumMismatch if it changed."""
        data = self.get(ref.key) if ref.offset is None else self.get_range(ref.key, ref.offset, ref.size)
        if sha256_hex(data) != ref.sha256:
            where = "" if ref.offset is None else f" (bytes {ref.offset} to {ref.offset + ref.size})"
            raise ChecksumMismatch(f"blob {ref.key!r}{where} does not match its checksum")
        return data

    def put_json(self, key: str, obj: Any) -> BlobRef:
        return self.put(key, json.dumps(obj, sort_keys=True, default=str).encode(), "application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get(key))

    @staticmethod
    def ref_for(key: str, data: bytes) -> BlobRef:
        return BlobRef(key=key, sha256=sha256_hex(data), size=len(data))

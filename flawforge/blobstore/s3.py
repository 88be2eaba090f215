"""Blob store on S3 or MinIO through the `minio` client."""
from __future__ import annotations

import io
import os
from contextlib import contextmanager
from typing import Iterable, Iterator

from minio import Minio
from minio.error import S3Error
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import HTTPError

from flawforge.blobstore.base import BlobStore, ChunkDigest, check_key, storage_failures
from flawforge.blobstore.files import replace, write_beside
from flawforge.errors import BlobNotFound, BlobStoreUnavailable
from flawforge.proto.base import BlobRef


# Parts of an upload of unknown length (S3 wants at least 5 MiB for every part but the last).
UPLOAD_PART_SIZE = 16 * 1024 * 1024
DOWNLOAD_CHUNK_SIZE = 1024 * 1024
DOWNLOADED_FILE_MODE = 0o666  # a user's file: the umask decides
_storage_failures = storage_failures(S3Error, HTTPError)


class _ChunkReader:
    """A readable stream over an iterable of byte chunks, for the client's uploads. A read returns all it asks
    for (less only at the end): the client appends what each read returns to its part."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._buffer = bytearray()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        size = len(self._buffer) if size < 0 else size
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


class S3BlobStore(BlobStore):
    def __init__(self, *, endpoint: str, access_key: str, secret_key: str, bucket: str,
                 secure: bool = False, region: str | None = None, create_bucket: bool = True):
        self.bucket = bucket
        self.where = f"S3 bucket {bucket!r}"
        self.client = Minio(endpoint=endpoint, access_key=access_key, secret_key=secret_key,
                            secure=secure, region=region)
        if create_bucket:
            try:
                if not self.client.bucket_exists(bucket_name=bucket):
                    self.client.make_bucket(bucket_name=bucket)
            except S3Error as exc:
                # Another service created it between our check and our create: that is fine.
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise BlobStoreUnavailable(f"S3 endpoint {endpoint} unusable: {exc}") from exc
            except (HTTPError, OSError) as exc:
                raise BlobStoreUnavailable(f"S3 endpoint {endpoint} unusable: {exc}") from exc

    @_storage_failures
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> BlobRef:
        self.client.put_object(bucket_name=self.bucket, object_name=check_key(key), data=io.BytesIO(data),
                               length=len(data), content_type=content_type)
        return self.ref_for(key, data)

    @_storage_failures
    def put_chunks(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/octet-stream") -> BlobRef:
        # Length unknown: the client uploads in parts as the chunks come, and aborts the upload if they fail. One
        # part at a time: the producer sets the pace, and a failed part is reported at once (parallel uploads
        # report it at the end and leave their threads behind when the producer fails).
        digest = ChunkDigest()
        self.client.put_object(bucket_name=self.bucket, object_name=check_key(key),
                               data=_ChunkReader(digest.through(chunks)), length=-1, part_size=UPLOAD_PART_SIZE,
                               content_type=content_type, num_parallel_uploads=1)
        return digest.ref(key)

    def download(self, key: str, path: str | os.PathLike) -> None:
        path = os.fspath(path)
        with self._object(key) as response:
            replace(write_beside(path, response.stream(DOWNLOAD_CHUNK_SIZE), DOWNLOADED_FILE_MODE), path)

    @_storage_failures
    def put_if_absent(self, key: str, data: bytes) -> bool:
        # S3 conditional write: the server refuses the PUT if the key exists (no read-then-write
        # race). The public put_object turns unknown headers into user metadata, so the
        # conditional header goes through the client's single-part upload call.
        try:
            self.client._put_object(bucket_name=self.bucket, object_name=check_key(key), data=data,
                                    headers={"If-None-Match": "*", "Content-Type": "application/octet-stream"})
            return True
        except S3Error as exc:
            if exc.code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise

    @_storage_failures
    def get(self, key: str) -> bytes:
        with self._object(key) as response:
            return response.read()

    @_storage_failures
    def get_range(self, key: str, offset: int, size: int) -> bytes:
        if size == 0:  # the client reads a length of 0 as "to the end"
            if not self.exists(key):
                raise BlobNotFound(key)
            return b""
        try:
            with self._object(key, offset=offset, length=size) as response:
                return response.read()
        except S3Error as exc:
            if exc.code == "InvalidRange":  # past the end
                return b""
            raise

    @contextmanager
    def _object(self, key: str, **byte_range: int) -> Iterator[BaseHTTPResponse]:
        """The object's response, released afterwards; BlobNotFound when there is no object at `key`."""
        try:
            response = self.client.get_object(bucket_name=self.bucket, object_name=check_key(key), **byte_range)
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject"):
                raise BlobNotFound(key) from None
            raise
        try:
            yield response
        finally:
            response.close()
            response.release_conn()

    @_storage_failures
    def exists(self, key: str) -> bool:
        try:
            self.client.stat_object(bucket_name=self.bucket, object_name=check_key(key))
            return True
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                return False
            raise

    @_storage_failures
    def list(self, prefix: str = "") -> Iterator[str]:
        objects = self.client.list_objects(bucket_name=self.bucket, prefix=prefix, recursive=True)
        return iter(sorted(obj.object_name for obj in objects))

    @_storage_failures
    def delete(self, key: str) -> None:
        self.client.remove_object(bucket_name=self.bucket, object_name=check_key(key))

    def ping(self) -> None:
        """A real write: a bucket that answers but refuses writes (full, read-only policy) fails here."""
        try:
            self.client.put_object(bucket_name=self.bucket, object_name=".ping", data=io.BytesIO(b"ping"), length=4)
        except (S3Error, HTTPError, OSError) as exc:
            raise BlobStoreUnavailable(f"{self.where} cannot take a write: {exc}") from exc

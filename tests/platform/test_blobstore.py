"""The blob-store contract on both backends: local folder, and S3 over HTTP against moto's server."""
from __future__ import annotations

import os
import shutil
import threading
import uuid

import pytest

from flawforge.blobstore import LocalBlobStore, content_key
from flawforge.blobstore.s3 import S3BlobStore
from flawforge.errors import BlobNotFound, BlobStoreUnavailable, ChecksumMismatch


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    endpoint = request.getfixturevalue("s3_server")
    return S3BlobStore(endpoint=endpoint, access_key="testing", secret_key="testing",
                       bucket=f"b-{uuid.uuid4().hex[:12]}", region="us-east-1")


def test_put_get_round_trip_with_checksum(store):
    ref = store.put("a/b/c.bin", b"\x00\x01payload")
    assert store.get("a/b/c.bin") == b"\x00\x01payload"
    assert ref.size == 9 and len(ref.sha256) == 64
    assert store.get_verified(ref) == b"\x00\x01payload"
    store.put("a/b/c.bin", b"changed")
    with pytest.raises(ChecksumMismatch, match="a/b/c.bin"):
        store.get_verified(ref)


def test_missing_key_raises_blob_not_found(store):
    with pytest.raises(BlobNotFound, match="no blob at key 'nope/x'"):
        store.get("nope/x")
    assert not store.exists("nope/x")


def test_content_addressed_keys_deduplicate(store):
    first = store.put_content("artifacts", b"same bytes", ".json")
    second = store.put_content("artifacts", b"same bytes", ".json")
    assert first == second
    assert first.key == content_key("artifacts", b"same bytes", ".json")
    assert list(store.list("artifacts/")) == [first.key]


def test_list_is_sorted_and_prefix_scoped(store):
    for key in ["jobs/2/x", "jobs/1/y", "jobs/1/a", "other/z"]:
        store.put(key, b"1")
    assert list(store.list("jobs/")) == ["jobs/1/a", "jobs/1/y", "jobs/2/x"]
    store.delete("jobs/1/a")
    assert list(store.list("jobs/1/")) == ["jobs/1/y"]


def test_put_if_absent_writes_once_even_when_racing(store):
    results = []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        results.append((i, store.put_if_absent("claims/item-1", f"claimant {i}".encode())))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results if won]
    assert len(winners) == 1
    assert store.get("claims/item-1") == f"claimant {winners[0]}".encode()


def test_put_chunks_writes_the_blob_and_its_checksum_as_the_chunks_come(store):
    # More than one upload part: 40 chunks of 1 MiB, each of its own byte, the last one short.
    chunks = [bytes([i]) * (1 << 20) for i in range(39)] + [b"end"]
    produced = []

    def producer():
        for chunk in chunks:
            produced.append(len(chunk))
            yield chunk

    ref = store.put_chunks("big/catalog.jsonl", producer())
    data = b"".join(chunks)
    assert len(produced) == len(chunks)
    assert ref == store.ref_for("big/catalog.jsonl", data)
    assert store.get_verified(ref) == data
    assert store.put_chunks("big/empty", iter(())) == store.ref_for("big/empty", b"")
    assert store.get("big/empty") == b""


def test_put_chunks_that_fail_write_nothing_and_keep_the_old_blob(store):
    store.put("jobs/1/catalog", b"before")

    def failing():
        yield b"x" * (6 << 20)  # past the first upload part
        yield b"y" * (11 << 20)
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError, match="producer failed"):
        store.put_chunks("jobs/1/catalog", failing())
    with pytest.raises(RuntimeError, match="producer failed"):
        store.put_chunks("jobs/1/new", failing())
    assert store.get("jobs/1/catalog") == b"before"
    assert not store.exists("jobs/1/new")
    assert list(store.list("jobs/")) == ["jobs/1/catalog"]
    if isinstance(store, LocalBlobStore):  # no temporary file left beside the blobs
        assert os.listdir(store.root / "jobs" / "1") == ["catalog"]
    else:  # the upload of the parts already sent was aborted
        assert not store.client._list_multipart_uploads(bucket_name=store.bucket).uploads


def test_slices_of_one_blob_are_read_and_verified_on_their_own(store):
    parts = [b"first line\n", b"", b"second, longer line\n" * 3, b"last"]
    refs = store.put_slices("jobs/1/inputs/0.jsonl", parts)
    assert store.get("jobs/1/inputs/0.jsonl") == b"".join(parts)
    assert [store.get_verified(ref) for ref in refs] == parts
    assert [(ref.offset, ref.size) for ref in refs] == [(0, 11), (11, 0), (11, 60), (71, 4)]
    assert store.get_range("jobs/1/inputs/0.jsonl", 71, 100) == b"last"  # fewer past the end
    assert store.get_range("jobs/1/inputs/0.jsonl", 75, 10) == b""  # from the very end
    assert store.get_range("jobs/1/inputs/0.jsonl", 500, 10) == b""
    # a whole blob's ref reads as before slices existed
    assert refs[0].model_dump()["offset"] == 0 and "offset" not in store.put("whole", b"x").model_dump_json()
    store.put("jobs/1/inputs/0.jsonl", b"FIRST line\n" + b"".join(parts[1:]))  # one slice changed
    with pytest.raises(ChecksumMismatch, match=r"bytes 0 to 11"):
        store.get_verified(refs[0])
    assert store.get_verified(refs[2]) == parts[2]
    with pytest.raises(BlobNotFound):
        store.get_range("jobs/1/inputs/missing", 0, 4)
    with pytest.raises(BlobNotFound):
        store.get_range("jobs/1/inputs/missing", 0, 0)


def test_download_copies_the_blob_to_a_file(store, tmp_path):
    data = bytes(range(256)) * 40_000
    store.put("artifacts/a.bin", data)
    target = tmp_path / "out" / "a.bin"
    target.parent.mkdir()
    target.write_bytes(b"stale")
    store.download("artifacts/a.bin", target)
    assert target.read_bytes() == data
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.bin"]
    with pytest.raises(BlobNotFound, match="artifacts/missing"):
        store.download("artifacts/missing", tmp_path / "out" / "missing")
    assert not (tmp_path / "out" / "missing").exists()
    store.download("artifacts/a.bin", tmp_path / "new" / "folder" / "a.bin")
    assert (tmp_path / "new" / "folder" / "a.bin").read_bytes() == data


def test_a_download_that_fails_leaves_nothing_behind(store, tmp_path):
    store.put("artifacts/a.bin", b"payload" * 1000)
    (tmp_path / "out" / "a.bin").mkdir(parents=True)  # the file cannot take its place
    with pytest.raises(OSError):
        store.download("artifacts/a.bin", tmp_path / "out" / "a.bin")
    assert os.listdir(tmp_path / "out") == ["a.bin"] and not os.listdir(tmp_path / "out" / "a.bin")


def test_a_local_copy_cut_short_leaves_no_partial_file(tmp_path, monkeypatch):
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("artifacts/a.bin", b"payload" * 1000)

    def disk_full(source, target):
        with open(target, "wb") as file:
            file.write(b"pay")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.download("artifacts/a.bin", tmp_path / "out" / "a.bin")
    assert os.listdir(tmp_path / "out") == []


def test_json_helpers(store):
    store.put_json("j/doc.json", {"b": 1, "a": [1, 2]})
    assert store.get_json("j/doc.json") == {"a": [1, 2], "b": 1}


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a\\b"])
def test_unsafe_keys_are_refused(tmp_path, key):
    with pytest.raises(ValueError, match="invalid blob key"):
        LocalBlobStore(tmp_path).put(key, b"x")


def test_unreachable_s3_endpoint_is_a_clear_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BlobStoreUnavailable, match=f"127.0.0.1:{port}"):
        S3BlobStore(endpoint=f"127.0.0.1:{port}", access_key="x", secret_key="y", bucket="bucket")


def test_a_bucket_created_by_another_service_between_check_and_create_is_fine(s3_server, monkeypatch):
    from minio import Minio

    bucket = f"b-{uuid.uuid4().hex[:12]}"
    Minio(endpoint=s3_server, access_key="testing", secret_key="testing", secure=False,
          region="eu-west-1").make_bucket(bucket_name=bucket)
    # The race window: our existence check ran before the other service's create.
    monkeypatch.setattr(Minio, "bucket_exists", lambda self, bucket_name: False)
    store = S3BlobStore(endpoint=s3_server, access_key="testing", secret_key="testing", bucket=bucket,
                        region="eu-west-1")
    store.put("k", b"v")
    assert store.get("k") == b"v"

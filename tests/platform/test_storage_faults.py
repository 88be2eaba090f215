"""A blob store that cannot take a write (read-only, full) makes /readyz fail and the API answer 503 with the
reason. The store is a real tmpfs, made read-only or filled, in a mount namespace of its own (as root, a
folder's permissions would not stop a write)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

SCRIPT = r'''
import json, os, subprocess, sys
from fastapi.testclient import TestClient
from flawforge.blobstore import LocalBlobStore
from flawforge.errors import BlobStoreUnavailable
from flawforge.assembly import platform_for, service_app
from flawforge.settings import Settings

root, tokens, token = sys.argv[1:4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "flawforge-test", root], check=True)
settings = Settings(bus="memory", blob_backend="local", blob_dir=root, api_tokens=tokens, blob_min_free_mb=0,
                    run_worker=False)
client = TestClient(service_app("metrics", platform_for(settings)),
                    headers={"Authorization": f"Bearer {token}"})
out = {}

def attempt(name):
    post = client.post("/jobs", json={"pipeline": "smoke", "params": {}})
    ready = client.get("/readyz")
    out[name] = {"post": [post.status_code, post.json()], "ready": [ready.status_code, ready.json()["checks"]]}

attempt("writable")
subprocess.run(["mount", "-o", "remount,ro", root], check=True)
attempt("read-only")
subprocess.run(["mount", "-o", "remount,rw", root], check=True)
try:
    with open(os.path.join(root, "filler"), "wb") as filler:
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()
except OSError:
    pass
attempt("full")
os.unlink(os.path.join(root, "filler"))
try:
    LocalBlobStore(root, min_free_bytes=64 << 20).ping()
except BlobStoreUnavailable as exc:
    out["margin"] = str(exc)
print(json.dumps(out))
'''


@pytest.fixture
def faults(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a tmpfs in a namespace of its own")
    root = tmp_path / "blobs"
    root.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", SCRIPT,
                           str(root), "tests:tok-faults-1", "tok-faults-1"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"this host allows no mount namespace: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_store_that_cannot_take_a_write_is_unready_and_a_503_with_the_reason(faults):
    writable = faults["writable"]
    assert writable["post"][0] == 201 and writable["ready"][0] == 200

    read_only = faults["read-only"]
    assert read_only["post"][0] == 503
    assert read_only["post"][1]["code"] == "storage_unavailable"
    assert "Read-only file system" in read_only["post"][1]["detail"] and "blob folder" in read_only["post"][1]["detail"]
    assert read_only["ready"][0] == 503 and "Read-only file system" in read_only["ready"][1]["blob_store"]

    full = faults["full"]
    assert full["post"][0] == 503 and "No space left on device" in full["post"][1]["detail"]
    assert full["ready"][0] == 503 and "No space left on device" in full["ready"][1]["blob_store"]

    assert "only" in faults["margin"] and "bytes free, under the 67,108,864" in faults["margin"]

"""Job parameters name files only under the data roots; anything else, and any FIFO, device, socket or folder
where a file belongs, is a 422 naming the parameter, found without opening anything. The job runner checks
again before it reads, and reads are bounded."""
from __future__ import annotations

import logging
import os
import socket
import threading

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.inputs import InputRefused, read_input
from flawforge.assembly import platform_for, service_app
from flawforge.settings import Settings


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    (root / "templates").mkdir(parents=True)
    (root / "train.jsonl").write_text('{"question": "1+1?", "answer": "2\\n#### 2"}\n')
    os.mkfifo(root / "fifo.jsonl")
    (root / "zero.jsonl").symlink_to("/dev/zero")
    (root / "passwd.jsonl").symlink_to("/etc/passwd")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "socket.jsonl"))
    yield root
    listener.close()


@pytest.fixture
def platform(tmp_path, data):
    # The template-loader runs math-errors: it checks that the files exist and are what they should be.
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), api_tokens=API_TOKENS,
                        data_roots=str(data), service="template-loader", run_worker=False)
    platform = platform_for(settings)
    yield platform
    platform.close()


@pytest.fixture
def client(platform):
    with TestClient(service_app("template-loader", platform), headers=AUTHORIZATION) as client:
        yield client


def submit_within(client, params: dict, seconds: float = 20):
    """POST /jobs on a thread: a check that opened a FIFO would block it, and this fails instead of hanging."""
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(response=client.post(
        "/jobs", json={"pipeline": "math-errors", "params": params})), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the job API blocked on the parameters"
    return answer["response"]


@pytest.mark.parametrize("name, gsm8k, message", [
    ("outside the roots", "/etc/passwd", "is outside the data roots"),
    ("missing outside the roots (the same answer)", "/etc/no-such-file", "is outside the data roots"),
    ("a symlink out of the roots", "{data}/passwd.jsonl", "is outside the data roots"),
    ("a device behind a symlink", "{data}/zero.jsonl", "is outside the data roots"),
    ("a dot-dot escape", "{data}/../../../etc/passwd", "is outside the data roots"),
    ("a FIFO", "{data}/fifo.jsonl", "is a FIFO, not a regular file"),
    ("a socket", "{data}/socket.jsonl", "is a socket, not a regular file"),
    ("a folder", "{data}/templates", "is a folder, not a regular file"),
    ("missing", "{data}/nothing.jsonl", "does not exist"),
    ("relative", "train.jsonl", "must be an absolute path"),
])
def test_a_path_that_is_not_a_file_under_the_roots_is_a_422_naming_the_parameter(client, data, name, gsm8k, message):
    response = submit_within(client, {"gsm8k": gsm8k.format(data=data), "templates": str(data / "templates")})
    assert response.status_code == 422, response.text
    [finding] = response.json()["detail"]
    assert finding["loc"] == ["body", "params", "gsm8k"] and message in finding["msg"], finding
    assert client.get("/jobs").json() == []  # nothing recorded


def test_a_file_where_a_folder_belongs_is_refused_and_a_good_job_is_taken(client, data):
    response = submit_within(client, {"gsm8k": str(data / "train.jsonl"), "templates": str(data / "train.jsonl")})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "params", "templates"]
    assert "is a regular file, not a folder" in response.json()["detail"][0]["msg"]
    taken = submit_within(client, {"gsm8k": str(data / "train.jsonl"), "templates": str(data / "templates")})
    assert taken.status_code == 201, taken.text


def test_a_service_that_does_not_run_the_pipeline_checks_only_the_roots(tmp_path, data):
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "b"), api_tokens=API_TOKENS,
                        data_roots=str(data), service="metrics", run_worker=False)
    with TestClient(service_app("metrics", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        # The template-loader will see the file; the metrics service need not.
        assert submit_within(client, {"gsm8k": str(data / "later.jsonl"),
                                      "templates": str(data / "templates")}).status_code == 201
        assert submit_within(client, {"gsm8k": "/etc/passwd", "templates": str(data / "templates")}).status_code == 422


def test_the_runner_checks_again_before_it_reads(platform, client, data, caplog):
    """A file swapped for a FIFO after the job was taken fails the job at once; nothing blocks. The failure is
    logged as one line with the reason; its traceback only at debug level."""
    from flawforge.jobs.pipeline import pipelines
    from flawforge.jobs.runner import run_job
    from flawforge.jobs.store import JobStore

    (data / "swapped.jsonl").write_text((data / "train.jsonl").read_text())
    job_id = submit_within(client, {"gsm8k": str(data / "swapped.jsonl"),
                                    "templates": str(data / "templates")}).json()["job_id"]
    (data / "swapped.jsonl").unlink()
    os.mkfifo(data / "swapped.jsonl")
    caplog.set_level(logging.DEBUG, logger="flawforge.jobs.runner")
    runner = threading.Thread(target=run_job, args=(platform, pipelines()["math-errors"], job_id), daemon=True)
    runner.start()
    runner.join(20)
    assert not runner.is_alive(), "the job runner blocked on a FIFO"
    status = JobStore(platform.store).get(job_id)
    assert status.state.value == "failed"
    assert status.error.startswith("invalid gsm8k: Value error, ") and "is a FIFO" in status.error
    logged = [r for r in caplog.records if r.name == "flawforge.jobs.runner"]
    [failure] = [r for r in logged if r.levelno >= logging.WARNING]
    assert failure.getMessage() == f"job {job_id} (math-errors) failed: {status.error}" and failure.exc_info is None
    assert [r.exc_info is not None for r in logged if r.levelno == logging.DEBUG] == [True]


def test_pipeline_parameters_have_bounds(client, data):
    huge = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 100_000, "payload_bytes": 1 << 20}})
    assert huge.status_code == 422 and "a smoke job sends at most 1,073,741,824" in huge.json()["detail"][0]["msg"]
    base = {"gsm8k": str(data / "train.jsonl"), "templates": str(data / "templates")}
    for field, value in [("indices", "0-99999999999"), ("seed", 1 << 70), ("model_preference", ["m"] * 100),
                         ("caps", {"conceptual": {"per_type": 10**12, "per_line": 2, "total": 5}})]:
        response = client.post("/jobs", json={"pipeline": "math-errors", "params": {**base, field: value}})
        assert response.status_code == 422, (field, response.text)
        assert response.json()["detail"][0]["loc"][:3] == ["body", "params", field]


def test_reads_are_bounded_and_never_block(data):
    assert read_input(data / "train.jsonl").startswith(b'{"question"')
    with pytest.raises(InputRefused, match="is over 10 bytes"):
        read_input(data / "train.jsonl", limit=10)
    with pytest.raises(InputRefused, match="is a FIFO, not a regular file"):
        read_input(data / "fifo.jsonl")  # opened without blocking, never read
    with pytest.raises(InputRefused, match="is a character device"):
        read_input("/dev/zero")


def test_a_read_within_a_folder_follows_links_only_to_inside_it(data, tmp_path):
    folder = data / "templates"
    (folder / "tier1" / "7").mkdir(parents=True)
    (folder / "tier1" / "7" / "model.py").write_text("def solve():\n    return 1\n")
    (folder / "tier2").symlink_to(folder / "tier1")                     # a link that stays inside
    (folder / "tier3").symlink_to(tmp_path)                             # a folder link out of it
    (folder / "tier1" / "7" / "leak.py").symlink_to(data / "train.jsonl")  # a file link out of it
    real = os.path.realpath(folder)
    assert read_input(f"{real}/tier1/7/model.py", within=real).startswith(b"def solve")
    assert read_input(f"{real}/tier2/7/model.py", within=real).startswith(b"def solve")
    for escaping in (f"{real}/tier1/7/leak.py", f"{real}/tier3/data/train.jsonl", f"{real}/tier1/../../train.jsonl",
                     str(data / "train.jsonl")):
        with pytest.raises(InputRefused, match="leads out of"):
            read_input(escaping, within=real)
    with pytest.raises(FileNotFoundError):
        read_input(f"{real}/tier1/7/absent.py", within=real)

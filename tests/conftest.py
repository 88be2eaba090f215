"""Shared fixtures: real RabbitMQ, moto's S3 server, the shared data folder."""
from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
AMQP_URL = os.environ.get("FLAWFORGE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _broker_reachable() -> bool:
    import pika

    params = pika.URLParameters(AMQP_URL)
    try:
        with socket.create_connection((params.host, params.port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """The real broker. In CI (CI=true) its absence fails the run instead of skipping."""
    if not _broker_reachable():
        message = f"RabbitMQ is not reachable at {AMQP_URL}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (required in CI)", pytrace=False)
        pytest.skip(message)
    return AMQP_URL


@pytest.fixture(scope="session", autouse=True)
def data_roots(tmp_path_factory) -> str:
    """Job parameters name files under the data roots: here the shared data folder and the tests' temporary
    folders (the CLI's subprocesses inherit the setting)."""
    roots = f"{SHARED_DATA},{tmp_path_factory.getbasetemp()}"
    os.environ["FLAWFORGE_DATA_ROOTS"] = roots
    return roots


@pytest.fixture
def queue_name() -> str:
    return f"test.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "gsm8k" / "train.jsonl").exists():
        pytest.fail(f"shared data folder not found at {SHARED_DATA} (set FLAWFORGE_SHARED_DATA)", pytrace=False)
    return SHARED_DATA


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server over real HTTP on a free local port.

    Requests are served one at a time: S3 and MinIO apply a conditional write
    (If-None-Match) atomically, and moto only does when requests do not overlap.
    """
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ, start_response):
        with lock:
            return list(app(environ, start_response))

    server = make_server("127.0.0.1", 0, one_at_a_time, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)

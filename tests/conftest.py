"""Shared fixtures: real RabbitMQ and Redis, moto's S3 server, the shared data folder, the inference-server."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
AMQP_URL = os.environ.get("FLAWFORGE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("FLAWFORGE_REDIS_URL", "redis://127.0.0.1:6379/0")

# A run started in the background by a shell without job control (`(make test &)`) ignores SIGINT, and so would
# every process the tests start, which then shrugs off the Ctrl-C some tests send it. Python's own handler is not
# inherited across exec: the processes start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _require(host: str, port: int, message: str) -> None:
    """A server the tests need answers on host:port; in CI (CI=true) its absence fails the run instead of
    skipping."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError:
        pass
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (required in CI)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """The real broker."""
    import pika

    params = pika.URLParameters(AMQP_URL)
    _require(params.host, params.port, f"RabbitMQ is not reachable at {AMQP_URL}")
    return AMQP_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis the llm-gateway's limits and budgets are shared through."""
    from urllib.parse import urlsplit

    url = urlsplit(REDIS_URL)
    _require(url.hostname, url.port or 6379, f"Redis is not reachable at {REDIS_URL}")
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url) -> str:
    """A key prefix of this test's own: its limits and budgets start at zero, whatever ran before."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session", autouse=True)
def data_roots(tmp_path_factory) -> str:
    """Job parameters name files under the data roots: here the shared data folder and the tests' temporary
    folders (the CLI's subprocesses inherit the setting)."""
    roots = f"{SHARED_DATA},{tmp_path_factory.getbasetemp()}"
    os.environ["FLAWFORGE_DATA_ROOTS"] = roots
    return roots


@pytest.fixture(scope="session", autouse=True)
def quiet_progress() -> None:
    """The CLI's subprocesses print a progress line every FLAWFORGE_PROGRESS_LOG_S seconds without a terminal; on a
    loaded machine a short job can pass the 30 s default, and tests that read a command's one line of error would
    read that line too. The progress test sets its own interval."""
    os.environ["FLAWFORGE_PROGRESS_LOG_S"] = "3600"


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


# The bearer token the inference-server's clients send (the gateway's provider sends it as its API key).
INFERENCE_KEY = "sk-test-SECRETSECRETSECRET1234"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inference_settings(blob_dir: Path, **overrides):
    """The inference-server's settings in the tests: SmolLM2-135M-Instruct on the CPU, one model per process."""
    from flawforge.settings import Settings

    return Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir), service="inference-server",
                    api_tokens=f"client:{INFERENCE_KEY}", inference_device="cpu",
                    # One thread by default: on two shared cores torch's spinning threads slow each other.
                    inference_threads=int(os.environ.get("FLAWFORGE_INFERENCE_THREADS", "1")),
                    inference_cache_dir=os.environ.get("FLAWFORGE_INFERENCE_CACHE_DIR", str(REPO / "var" / "models")),
                    # A schema compiles in a child process; on two loaded cores its start alone can pass the
                    # 10 s default, and these tests are about what decoding yields, not about that bound.
                    inference_grammar_compile_timeout_s=60.0,
                    **overrides)


def _serve_inference(settings):
    """Runs the inference-server app of `settings` over HTTP on a free local port until the generator closes; yields
    its base URL (ending in /v1), model id and API key once it lists its model."""
    import uvicorn

    from flawforge.assembly import platform_for, service_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(service_app("inference-server", platform_for(settings)), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="inference-server", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            response = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {INFERENCE_KEY}"}, timeout=5)
            if response.status_code == 200 and response.json().get("data"):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            pytest.fail(f"the inference-server did not start on port {port}", pytrace=False)
        time.sleep(0.2)
    model = response.json()["data"][0]["id"]
    yield {"base_url": base_url, "model": model, "api_key": INFERENCE_KEY}
    server.should_exit = True
    thread.join(60)


@pytest.fixture(scope="session")
def inference_server(tmp_path_factory) -> dict:
    """Base URL (ending in /v1), model id and API key of the real inference-server (SmolLM2-135M-Instruct on
    CPU), over HTTP on a free local port, shared by the session."""
    yield from _serve_inference(_inference_settings(tmp_path_factory.mktemp("inference"),
                                                    inference_backend="transformers"))


@pytest.fixture(scope="session")
def vllm_proxy_server(inference_server, tmp_path_factory) -> dict:
    """An inference-server whose generation is another server's, as it is vLLM's on a GPU: `inference_server`
    stands for vLLM's OpenAI server. Its research copy is the same model, loaded once in this process."""
    yield from _serve_inference(_inference_settings(tmp_path_factory.mktemp("proxy"), inference_backend="vllm",
                                                    inference_vllm_url=inference_server["base_url"],
                                                    token=INFERENCE_KEY))

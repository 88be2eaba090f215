"""The trace-executor service: HTTP API, readiness, and its bus worker on the real broker."""
from __future__ import annotations

import json
import threading
import time
from fractions import Fraction
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient

from flawforge.proto.sandbox import BatchResult, ExecRequest, ExecutionResult, SandboxRequested, TestRunResult
from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.assembly import platform_for, service_app
from flawforge.runtime.service import Consumer, Workers
from flawforge.services.trace_executor.worker import make_handler
from flawforge.settings import Settings

ATTACKS = Path(__file__).parent / "attacks"
TEMPLATE = "from fractions import Fraction\n\ndef solve():\n    half = Fraction(1, 2)\n    answer = half * 3\n    return answer\n"


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), sandbox_workers=2,
                    api_tokens=API_TOKENS)


@pytest.fixture
def client(settings):
    with TestClient(service_app("trace-executor", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        yield client


def test_ready_with_every_required_layer(client):
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert ready.json()["checks"]["sandbox_isolation"] == "ok"
    layers = client.get("/sandbox/layers").json()
    assert set(layers["required"]) <= set(layers["active"])


def test_readyz_fails_when_a_required_layer_is_missing(tmp_path):
    settings = Settings(bus="memory", blob_dir=str(tmp_path / "b"), sandbox_workers=1, sandbox_audit=False,
                        sandbox_required_layers="process,audit", api_tokens=API_TOKENS)
    with TestClient(service_app("trace-executor", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["sandbox_isolation"] == \
            "failed: required isolation layer(s) missing: audit: disabled by configuration"
        refused = client.post("/sandbox/exec", json={"source": "x = 1"})
        assert refused.status_code == 503 and "audit" in refused.json()["detail"]


def test_exec_batch_and_tests_over_http(client):
    result = ExecutionResult.model_validate(client.post("/sandbox/exec", json={"source": TEMPLATE, "call": "solve"}).json())
    assert result.outcome == "ok" and result.final_values() == {"half": Fraction(1, 2), "answer": Fraction(3, 2)}

    batch = BatchResult.model_validate(client.post("/sandbox/batch", json={
        "original": TEMPLATE, "variants": [TEMPLATE.replace("* 3", "* 5"), "def solve(:"]}).json())
    assert [r.outcome for r in batch.results] == ["ok", "ok", "syntax_error"]
    assert batch.results[1].return_value.to_python() == Fraction(5, 2)

    run = TestRunResult.model_validate(client.post("/sandbox/tests", json={
        "module_source": "def double(x):\n    return 2 * x\n", "module_name": "mathy",
        "test_source": "from mathy import double\n\ndef test_ok():\n    assert double(2) == 4\n\n"
                       "def test_bad():\n    assert double(2) == 5\n"}).json())
    assert {t.name: t.outcome for t in run.tests} == {"test_mathy.test_ok": "passed", "test_mathy.test_bad": "failed"}


def test_bad_requests_name_the_field(client):
    missing = client.post("/sandbox/exec", json={"call": "solve"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "source"]
    bad_limit = client.post("/sandbox/exec", json={"source": "x = 1", "limits": {"timeout_s": 0}})
    assert bad_limit.status_code == 422 and bad_limit.json()["detail"][0]["loc"] == ["body", "limits", "timeout_s"]
    bad_name = client.post("/sandbox/tests", json={"module_source": "", "test_source": "", "module_name": "a-b"})
    assert bad_name.status_code == 422 and bad_name.json()["detail"][0]["loc"] == ["body", "module_name"]


def test_results_of_any_value_parse_back(client):
    """Lone surrogates, a 5,000-digit fraction, huge ints and bytes: a 200 whose JSON parses, exactly."""
    source = ("from fractions import Fraction\n"
              "def solve():\n"
              "    text = 'lone \\ud800'\n"
              "    raw = b'\\xff' * 300\n"
              "    big = 3 ** 20000\n"
              "    print('out \\udfff')\n"
              "    return Fraction(10 ** 5000 + 1, 7 ** 4000)\n")
    response = client.post("/sandbox/exec", json={"source": source, "call": "solve"})
    assert response.status_code == 200, response.text
    plain = json.loads(response.text)
    result = ExecutionResult.model_validate_json(response.text)
    assert result.outcome == "ok" and plain["stdout"] == "out \\udfff\n"
    assert result.return_value.to_python() == Fraction(10 ** 5000 + 1, 7 ** 4000)
    values = {step.name: step.value for step in result.trace}
    assert values["big"].to_python() == 3 ** 20000 and isinstance(plain["trace"][2]["value"]["value"], str)
    assert (values["text"].type, values["text"].type_name, values["text"].value) == ("other", "str", "'lone \\ud800'")
    assert values["raw"].type_name == "bytes" and len(values["raw"].value) <= 200


@pytest.mark.parametrize("path, body, loc, setting", [
    ("/sandbox/exec", {"source": "x = 1", "limits": {"timeout_s": 31}}, ["body", "limits", "timeout_s"],
     "MAX_TIMEOUT_S"),
    ("/sandbox/exec", {"source": "x = 1", "limits": {"memory_mb": 1025}}, ["body", "limits", "memory_mb"],
     "MAX_MEMORY_MB"),
    ("/sandbox/tests", {"module_source": "", "test_source": "", "module_name": "m", "limits": {"workdir_mb": 65}},
     ["body", "limits", "workdir_mb"], "MAX_WORKDIR_MB"),
    ("/sandbox/exec", {"source": "x = 1\n" * 200_000}, ["body", "source"], "MAX_SOURCE_BYTES"),
    ("/sandbox/batch", {"original": "x = 1", "variants": ["x = 2", "# \u00e9\n" * 300_000]},
     ["body", "variants", 1], "MAX_SOURCE_BYTES"),
    ("/sandbox/batch", {"original": "x = 1", "variants": ["x = 2"] * 10_001}, ["body", "variants"],
     "MAX_BATCH_VARIANTS"),
    ("/sandbox/exec", {"source": "x = 1", "limits": {"result_bytes": (64 << 20) + 1}},
     ["body", "limits", "result_bytes"], "MAX_RESULT_BYTES"),
    ("/sandbox/batch", {"original": "x = 1", "variants": ["x = 2"] * 720}, ["body", "variants"], "MAX_REQUEST_S"),
])
def test_requests_above_the_servers_maximums_are_refused_naming_the_limit(client, path, body, loc, setting):
    """The defaults: 30 s, 1 GiB, 64 MiB of work dir, 1 MiB of source, 10,000 variants, 64 MiB of report, and
    3,600 s a request (programs x timeout: 721 x 5 s is above it)."""
    refused = client.post(path, json=body)
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert error["loc"] == loc and f"FLAWFORGE_SANDBOX_{setting}" in error["msg"] and error["input"] is None
    at_most = client.post("/sandbox/exec", json={"source": "x = 1", "limits": {"timeout_s": 30, "memory_mb": 1024,
                                                                               "workdir_mb": 64}})
    assert at_most.status_code == 200 and at_most.json()["outcome"] == "ok"


def test_sandbox_requests_do_not_starve_health_checks(client):
    """Units waiting for a slot hold no thread of the app's shared pool: /healthz answers while more
    requests than that pool has threads are running (here the pool is shrunk to 2, the sandbox has 2 slots)."""
    client.portal.call(lambda: setattr(anyio.to_thread.current_default_thread_limiter(), "total_tokens", 2))
    finished: list[float] = []

    def slow() -> None:
        response = client.post("/sandbox/exec", json={"source": "import time\ntime.sleep(2)\n"})
        assert response.json()["outcome"] == "ok"
        finished.append(time.monotonic())

    threads = [threading.Thread(target=slow) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
    answered = time.monotonic()
    for thread in threads:
        thread.join()
    assert len(finished) == 3 and answered < min(finished)


@pytest.mark.parametrize("attack", ["fork_bomb", "memory_bomb", "infinite_loop", "socket_rabbitmq", "kill_parent",
                                    "segfault", "output_flood"])
def test_attacks_over_http_leave_the_service_healthy(client, attack):
    source = (ATTACKS / f"{attack}.py").read_text()
    limits = {"timeout_s": 0.5, "memory_mb": 64, "output_bytes": 4096}
    body = client.post("/sandbox/exec", json={"source": source, "call": "solve", "limits": limits}).json()
    assert body["outcome"] in ("forbidden", "memory_limit", "timeout", "crashed", "output_limit"), body
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_worker_runs_units_from_the_real_broker(amqp_url, queue_name, tmp_path):
    settings = Settings(bus="rabbitmq", amqp_url=amqp_url, blob_dir=str(tmp_path / "blobs"), sandbox_workers=2,
                    api_tokens=API_TOKENS)
    platform = platform_for(settings)
    workers = Workers(platform, [Consumer(queue=queue_name, make_handler=make_handler)]).start()
    try:
        request = platform.store.put_content("sandbox/requests",
                                             ExecRequest(source=TEMPLATE, call="solve").model_dump_json().encode())
        platform.bus.publish(queue_name, SandboxRequested(unit="exec", request=request, result_key="results/one.json"))
        poison = platform.store.put_content("sandbox/requests", json.dumps({"source": 3}).encode())
        platform.bus.publish(queue_name, SandboxRequested(unit="exec", request=poison, result_key="results/two.json"))
        greedy = platform.store.put_content("sandbox/requests", ExecRequest(
            source=TEMPLATE, limits={"timeout_s": 60}).model_dump_json().encode())
        platform.bus.publish(queue_name, SandboxRequested(unit="exec", request=greedy, result_key="results/three.json"))
        deadline = time.monotonic() + 30
        while not platform.store.exists("results/one.json") and time.monotonic() < deadline:
            time.sleep(0.05)
        result = ExecutionResult.model_validate_json(platform.store.get("results/one.json"))
        assert result.outcome == "ok" and result.return_value.to_python() == Fraction(3, 2)
        dead = []  # each read takes what has been dead-lettered so far: the two may arrive apart
        while len(dead) < 2 and time.monotonic() < deadline:
            dead += platform.bus.dead_letters(queue_name)
            time.sleep(0.05)
        errors = sorted(letter.error for letter in dead)
        assert len(errors) == 2 and "above the server's maximums" in errors[0] and "MAX_TIMEOUT_S" in errors[0]
        assert "invalid exec request" in errors[1]
        assert not platform.store.exists("results/two.json") and not platform.store.exists("results/three.json")
    finally:
        workers.stop()
        platform.bus.purge(queue_name)
        platform.close()




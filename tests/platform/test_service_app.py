"""A real service app (metrics, which runs the smoke pipeline): ops endpoints and the jobs API."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.assembly import platform_for, service_app
from flawforge.services import load_service
from flawforge.settings import Settings


def make_client(settings: Settings, run_worker: bool = True) -> TestClient:
    return TestClient(service_app("metrics", platform_for(settings), run_worker=run_worker),
                      headers=AUTHORIZATION)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), api_tokens=API_TOKENS)


def wait_for_state(client: TestClient, job_id: str, states: set[str], timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/jobs/{job_id}").json()
        if body["state"] in states:
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} stayed {body['state']}")


def test_ops_endpoints(settings):
    with make_client(settings) as client:
        assert client.get("/healthz").json() == {"status": "ok", "service": "metrics"}
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.json()
        assert ready.json()["checks"] == {"bus": "ok", "blob_store": "ok", "workers": "ok"}
        assert "/jobs" in client.get("/openapi.json").json()["paths"]
        assert client.get("/docs").status_code == 200


def test_readyz_fails_when_the_broker_is_unreachable(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(bus="rabbitmq", amqp_url=f"amqp://guest:guest@127.0.0.1:{port}/%2F",
                        blob_dir=str(tmp_path / "b"), api_tokens=API_TOKENS)
    with make_client(settings, run_worker=False) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["bus"].startswith(f"failed: cannot reach RabbitMQ at 127.0.0.1:{port}")


def test_submit_run_and_fetch_artifacts(settings):
    import hashlib

    from flawforge.pipelines.smoke import payload_for

    def processed(client) -> float:  # the process's counter: other tests' jobs may have counted before this one
        import re

        found = re.search(r'^flawforge_messages_processed_total\{queue="smoke.digest"\} (\S+)$',
                          client.get("/metrics").text, re.M)
        return float(found.group(1)) if found else 0.0

    with make_client(settings) as client:
        before = processed(client)
        created = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 12, "payload_bytes": 64}})
        assert created.status_code == 201
        job = wait_for_state(client, created.json()["job_id"], {"succeeded", "failed"})
        assert job["state"] == "succeeded", job
        assert job["progress"]["done"] == job["progress"]["total"] == 12
        names = [a["name"] for a in client.get(f"/jobs/{job['job_id']}/artifacts").json()]
        assert names == ["digests.json"]
        digests = client.get(f"/jobs/{job['job_id']}/artifacts/digests.json").json()
        expected = [hashlib.sha256(payload_for(job["job_id"], i, 64)).hexdigest() for i in range(12)]
        assert digests == {"count": 12, "sha256": expected}
        assert processed(client) == before + 12
        assert [j["job_id"] for j in client.get("/jobs").json()] == [job["job_id"]]


def test_unknown_pipeline_and_invalid_params_get_422_naming_the_field(settings):
    with make_client(settings, run_worker=False) as client:
        unknown = client.post("/jobs", json={"pipeline": "no-such", "params": {}})
        assert unknown.status_code == 422
        assert unknown.json()["detail"][0]["loc"] == ["body", "pipeline"]
        assert "unknown pipeline 'no-such'" in unknown.json()["detail"][0]["msg"]

        invalid = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 0, "colour": "red"}})
        assert invalid.status_code == 422
        locs = sorted(tuple(e["loc"]) for e in invalid.json()["detail"])
        assert locs == [("body", "params", "colour"), ("body", "params", "count")]
        assert client.get("/jobs").json() == []  # nothing recorded for a refused job


def test_unknown_job_and_artifact_are_404(settings):
    with make_client(settings, run_worker=False) as client:
        assert client.get("/jobs/deadbeef").status_code == 404
        assert client.get("/jobs/../etc").status_code == 404
        job_id = client.post("/jobs", json={"pipeline": "smoke", "params": {}}).json()["job_id"]
        assert client.get(f"/jobs/{job_id}/artifacts/missing.json").status_code == 404


def test_cancel_a_queued_job(settings):
    with make_client(settings, run_worker=False) as client:
        job_id = client.post("/jobs", json={"pipeline": "smoke", "params": {}}).json()["job_id"]
        assert client.post(f"/jobs/{job_id}/cancel").json()["state"] == "cancelled"


def test_cancel_a_running_job(settings):
    from flawforge.jobs.pipeline import pipelines
    from flawforge.jobs.runner import job_consumer
    from flawforge.runtime.service import Workers

    # Only the job runner works, not the digest worker: the job waits for items until cancelled.
    platform = platform_for(settings)
    workers = Workers(platform, [job_consumer(pipelines()["smoke"])]).start()
    try:
        with TestClient(service_app("metrics", platform, run_worker=False),
                        headers=AUTHORIZATION) as client:
            job_id = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 3}}).json()["job_id"]
            wait_for_state(client, job_id, {"running"})
            assert client.post(f"/jobs/{job_id}/cancel").json()["cancel_requested"] is True
            assert wait_for_state(client, job_id, {"cancelled", "failed", "succeeded"})["state"] == "cancelled"
    finally:
        workers.stop()


def test_a_cancel_request_survives_a_progress_update_read_before_it(tmp_path):
    """The runner's progress update reads the status, then saves it: a cancel requested in between stays."""
    from flawforge.blobstore import LocalBlobStore
    from flawforge.jobs.store import JobStore
    from flawforge.proto.jobs import JobState, Progress

    jobs = JobStore(LocalBlobStore(tmp_path / "blobs"))
    job_id = jobs.create("smoke", {}).job_id
    jobs.update(job_id, state=JobState.running)
    read_by_runner = jobs.get(job_id)
    assert jobs.request_cancel(job_id).cancel_requested is True
    read_by_runner.progress = Progress(done=1, total=3, message="digesting")
    jobs.save(read_by_runner)
    assert jobs.get(job_id).cancel_requested is True
    assert [status.cancel_requested for status in jobs.list()] == [True]


def test_a_cancel_request_leaves_a_running_jobs_status_to_its_runner(tmp_path):
    """A running job's status is written by its runner alone: a cancel saved after the runner's last update would
    undo that update."""
    from flawforge.blobstore import LocalBlobStore
    from flawforge.jobs.store import JobStore
    from flawforge.proto.jobs import JobState

    store = LocalBlobStore(tmp_path / "blobs")
    jobs = JobStore(store)
    running, queued = jobs.create("smoke", {}).job_id, jobs.create("smoke", {}).job_id
    jobs.update(running, state=JobState.running)
    written = store.get(f"jobs/{running}/status.json")
    jobs.request_cancel(running)
    assert store.get(f"jobs/{running}/status.json") == written
    assert jobs.get(running).state == JobState.running and jobs.get(running).cancel_requested
    # a queued job has no runner yet: it is cancelled at once
    assert jobs.request_cancel(queued).state == JobState.cancelled


def test_restart_loses_nothing_on_rabbitmq(amqp_url, tmp_path):
    """A job submitted to a stopped service finishes after another instance starts on the same broker and store."""
    settings = Settings(bus="rabbitmq", amqp_url=amqp_url, blob_dir=str(tmp_path / "blobs"), api_tokens=API_TOKENS)
    with make_client(settings, run_worker=False) as first:
        job_id = first.post("/jobs", json={"pipeline": "smoke", "params": {"count": 5}}).json()["job_id"]
        assert first.get(f"/jobs/{job_id}").json()["state"] == "queued"
    with make_client(settings) as second:
        assert wait_for_state(second, job_id, {"succeeded", "failed"})["state"] == "succeeded"
        assert second.get(f"/jobs/{job_id}/artifacts/digests.json").json()["count"] == 5


def test_a_dead_lettered_work_item_fails_its_job_at_once(tmp_path):
    from flawforge.jobs.pipeline import pipelines
    from flawforge.jobs.runner import job_consumer, submit
    from flawforge.jobs.store import JobStore
    from flawforge.proto.smoke import DIGEST
    from flawforge.runtime.service import Consumer, Workers

    def broken_handler(platform):
        def handle(message):
            raise RuntimeError(f"cannot digest item {message.item}")
        return handle

    settings = Settings(bus="memory", blob_dir=str(tmp_path / "blobs"), max_attempts=2, retry_delays_ms=[10])
    platform = platform_for(settings)
    workers = Workers(platform, [job_consumer(pipelines()["smoke"]), Consumer(DIGEST.queue, broken_handler)]).start()
    try:
        job_id = submit(platform, pipelines()["smoke"], {"count": 3}).job_id
        jobs = JobStore(platform.store)
        deadline = time.monotonic() + 10
        while not jobs.get(job_id).state.finished and time.monotonic() < deadline:
            time.sleep(0.05)
        status = jobs.get(job_id)
    finally:
        workers.stop()
    assert status.state.value == "failed"
    assert "failed for good on queue smoke.digest: RuntimeError: cannot digest item" in status.error


def test_every_service_app_serves_its_routers_and_the_embedded_stack_imports_no_web_framework(tmp_path):
    """Routers are named by path and imported when an app is built; the embedded stack only runs consumers."""
    from flawforge.services import SERVICE_NAMES

    for name in SERVICE_NAMES:
        spec = load_service(name)
        assert spec.routers or name == "mutator"
        assert [f"{f.__module__}:{f.__name__}" for f in spec.router_factories()] == list(spec.routers)
    with pytest.raises(ValueError, match="router 'flawforge.services.metrics.review_api' is not 'module:function'"):
        replace(load_service("metrics"), routers=("flawforge.services.metrics.review_api",)).router_factories()
    templates = service_app("template-loader", platform_for(
        Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "app"), api_tokens=API_TOKENS)),
        run_worker=False)
    assert "/templates/validate" in templates.openapi()["paths"]

    script = (
        "import sys\n"
        "from flawforge.assembly import embedded_stack\n"
        "from flawforge.settings import Settings\n"
        f"with embedded_stack(Settings(bus='memory', blob_backend='local', blob_dir={str(tmp_path / 'b')!r})):\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_queues_live_beside_their_messages():
    """A service finds a queue's name where its message is defined, as a `*_QUEUE` constant or a WorkUnit's (who may
    import whom: test_import_rules.py)."""
    from flawforge.proto import import_all
    from flawforge.proto.base import WorkUnit
    from flawforge.services import SERVICE_NAMES, consumers_of

    import_all()
    proto_values = [(name, value) for module in list(sys.modules.values())
                    if getattr(module, "__name__", "").startswith("flawforge.proto.")
                    for name, value in vars(module).items()]
    proto_queues = ({value for name, value in proto_values if name.endswith("_QUEUE") and isinstance(value, str)}
                    | {value.queue for _, value in proto_values if isinstance(value, WorkUnit)})
    assert {"math.problems", "smoke.digest"} <= proto_queues
    for name in SERVICE_NAMES:
        for consumer in consumers_of(load_service(name)):
            assert consumer.queue in proto_queues or consumer.queue.startswith("jobs."), (name, consumer.queue)

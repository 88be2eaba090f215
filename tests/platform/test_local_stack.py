"""`flawforge serve all` for real: every service a process on RabbitMQ, jobs run through it with `--stack`.

Each stack runs on its own queue prefix and ports, so it shares the broker with other tests and stacks.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from flawforge.bus.rabbitmq import RabbitMQBus
from flawforge.services import SERVICE_NAMES, load_service, queue_consumers

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]

FLAWFORGE = [sys.executable, "-m", "flawforge.cli.entry"]
CONSUMER_TIMEOUT_S = "3"
TOKEN = "stack-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_offset() -> int:
    """An offset that puts every service's port on a free one."""
    ports = [load_service(name).port for name in SERVICE_NAMES]
    for offset in range(21000 + os.getpid() % 500 * 20, 57000, 20):
        try:
            sockets = [socket.create_server(("127.0.0.1", port + offset)) for port in ports]
        except OSError:
            continue
        for s in sockets:
            s.close()
        return offset
    raise RuntimeError("no free ports")


class Stack:
    def __init__(self, amqp_url: str, folder: Path, skip: list[str]):
        self.prefix = f"test-{uuid.uuid4().hex[:8]}."
        self.offset = free_offset()
        self.folder = folder
        self.env = {**os.environ, "FLAWFORGE_AMQP_URL": amqp_url, "FLAWFORGE_QUEUE_PREFIX": self.prefix,
                    "FLAWFORGE_BLOB_DIR": str(folder / "blobs"), "FLAWFORGE_CONSUMER_TIMEOUT_S": CONSUMER_TIMEOUT_S,
                    "FLAWFORGE_API_TOKENS": f"test:{TOKEN}", "FLAWFORGE_TOKEN": TOKEN}
        self.env.pop("FLAWFORGE_BUS", None)
        self.log = open(folder / "stack.log", "w+")
        self.process = subprocess.Popen([*FLAWFORGE, "serve", "all", "--skip", ",".join(skip), "--port-offset",
                                         str(self.offset), "--host", "127.0.0.1"], env=self.env, cwd=folder,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.services = [name for name in SERVICE_NAMES if name not in skip]
        # It prints one `name URL` line a service once every one answers.
        self.urls = dict(self.process.stdout.readline().split() for _ in self.services)
        self.amqp_url = amqp_url

    def url(self, service: str) -> str:
        return self.urls[service]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(30)
        bus = RabbitMQBus(self.amqp_url, prefix=self.prefix)
        try:
            for queue in set(queue_consumers()) | {f"jobs.{name}" for name in ("smoke", "math-errors", "templates")}:
                bus.delete(queue)
        finally:
            bus.close()
        self.log.close()
        return code


@pytest.fixture(scope="module")
def stack(amqp_url, tmp_path_factory):
    stack = Stack(amqp_url, tmp_path_factory.mktemp("stack"), skip=["inference-server"])
    yield stack
    assert stack.stop() == 0


def run_cli(*args, stack: Stack, timeout=120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*FLAWFORGE, *args], capture_output=True, text=True, timeout=timeout, env=stack.env,
                          stdin=subprocess.DEVNULL, **kwargs)


def math_errors(stack: Stack, data: Path, out: Path, indices: str) -> list[str]:
    return ["run", "math-errors", "--gsm8k", str(data / "gsm8k" / "train.jsonl"), "--templates",
            str(data / "formalization-templates"), "--indices", indices, "--out", str(out),
            "--stack", stack.url("template-loader")]


def test_every_service_answers_and_is_ready_but_the_skipped(stack):
    assert set(stack.urls) == set(SERVICE_NAMES) - {"inference-server"}
    for name, url in stack.urls.items():
        ready = httpx.get(f"{url}/readyz", timeout=30).json()
        # The gateway's one provider is the skipped inference-server: not ready, and it says why.
        assert ready["ready"] == (name != "llm-gateway"), (name, ready)


def test_a_job_runs_through_the_stack_on_its_own_queues_and_can_be_deleted(stack, shared_data, tmp_path):
    result = run_cli(*math_errors(stack, shared_data, tmp_path / "out", "0-5"), stack=stack)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["problems"] == 6 and (tmp_path / "out" / "candidates.jsonl").stat().st_size > 0, summary
    # Its queues carry the stack's prefix, with the stack's consumers on them.
    bus = RabbitMQBus(stack.amqp_url, prefix=stack.prefix)
    try:
        assert bus.consumer_count("math.problems") >= 1 and bus.consumer_count("jobs.math-errors") >= 1
    finally:
        bus.close()
    job_id = re.search(r"job ([0-9a-f]{32}) succeeded", result.stderr).group(1)
    loader = stack.url("template-loader")
    assert list((stack.folder / "blobs" / "jobs" / job_id).iterdir())
    assert httpx.delete(f"{loader}/jobs/{job_id}", headers=AUTH).status_code == 204
    assert httpx.get(f"{loader}/jobs/{job_id}", headers=AUTH).status_code == 404
    assert not (stack.folder / "blobs" / "jobs" / job_id).exists() or not any(
        p.is_file() for p in (stack.folder / "blobs" / "jobs" / job_id).rglob("*"))


def test_ctrl_c_cancels_the_job_on_the_stack_when_not_at_a_terminal(stack, shared_data, tmp_path):
    loader = stack.url("template-loader")
    before = {job["job_id"] for job in httpx.get(f"{loader}/jobs", headers=AUTH).json()}
    client = subprocess.Popen([*FLAWFORGE, *math_errors(stack, shared_data, tmp_path / "out", "0-1999")], env=stack.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    job = None
    while job is None and time.monotonic() < deadline:
        job = next((j for j in httpx.get(f"{loader}/jobs", headers=AUTH).json() if j["job_id"] not in before
                    and j["state"] == "running"), None)
        time.sleep(0.2)
    assert job, "the job never started"
    started = time.monotonic()
    client.send_signal(signal.SIGINT)
    _, stderr = client.communicate(timeout=20)
    assert time.monotonic() - started < 5
    assert client.returncode == 130
    assert stderr.strip().splitlines()[-1].endswith(f"interrupted: job {job['job_id']} on {loader} cancelled")
    assert "Traceback" not in stderr
    final = httpx.get(f"{loader}/jobs/{job['job_id']}", headers=AUTH).json()
    assert final["cancel_requested"] is True
    deadline = time.monotonic() + 30
    while final["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        final = httpx.get(f"{loader}/jobs/{job['job_id']}", headers=AUTH).json()
    assert final["state"] == "cancelled"
    assert not (tmp_path / "out").exists()


def test_a_job_without_a_consumer_fails_naming_the_missing_service(amqp_url, shared_data, tmp_path):
    stack = Stack(amqp_url, tmp_path, skip=["inference-server", "mutator", "metrics", "llm-gateway"])
    try:
        # Work items nobody takes: the math job waits CONSUMER_TIMEOUT_S, then names the mutator.
        result = run_cli(*math_errors(stack, shared_data, tmp_path / "out", "0-3"), stack=stack)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1].endswith(
            "nothing consumes queue 'math.problems' after 3 s: start the mutator service (flawforge serve mutator)")
        assert not (tmp_path / "out").exists()
        # A job whose owner is not running stays queued, then fails naming it.
        result = run_cli("run", "smoke", "--count", "2", "--out", str(tmp_path / "smoke"), "--stack",
                         stack.url("template-loader"), stack=stack)
        assert result.returncode == 2
        assert "nothing consumes queue 'jobs.smoke' after" in result.stderr
        assert "start the metrics service (flawforge serve metrics)" in result.stderr
    finally:
        assert stack.stop() == 0

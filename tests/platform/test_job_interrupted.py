"""A job whose runner is killed does not stay running: it reads as interrupted (and resumable where its pipeline
is), may be cancelled, and runs again when its request comes back."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from pydantic import BaseModel

from flawforge.assembly import platform_for
from flawforge.jobs import store as job_store
from flawforge.jobs.pipeline import Pipeline
from flawforge.jobs.runner import run_job
from flawforge.jobs.store import JobStore
from flawforge.proto.jobs import JobState
from flawforge.settings import Settings

# The runner: a real process running a job whose pipeline never ends, beating every 0.1 s.
RUNNER = textwrap.dedent("""
    import sys, threading
    from pydantic import BaseModel
    from flawforge.assembly import platform_for
    from flawforge.jobs import runner
    from flawforge.jobs.pipeline import Pipeline
    from flawforge.settings import Settings

    runner.HEARTBEAT_S = 0.1
    class Nothing(BaseModel):
        pass
    endless = Pipeline(name="endless", description="", params=Nothing, owner="metrics",
                       run=lambda ctx, params: threading.Event().wait())
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=sys.argv[1]))
    runner.run_job(platform, endless, sys.argv[2])
""")


class Nothing(BaseModel):
    pass


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_runner_leaves_its_job_interrupted_not_running(tmp_path, monkeypatch):
    monkeypatch.setattr(job_store, "STALE_AFTER_S", 1.5)
    blobs = tmp_path / "blobs"
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(blobs)))
    jobs = JobStore(platform.store)
    job_id = jobs.create("endless", {}, resumable=True).job_id
    process = subprocess.Popen([sys.executable, "-c", RUNNER, str(blobs), job_id])
    try:
        wait_for(lambda: jobs.get(job_id).heartbeat_at is not None)
        time.sleep(2.5)  # longer than STALE_AFTER_S: the beats keep it running
        alive = jobs.get(job_id)
        assert alive.state == JobState.running and alive.error is None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        wait_for(lambda: jobs.get(job_id).state == JobState.interrupted, timeout=10)
    finally:
        process.kill()
    stopped = jobs.get(job_id)
    assert "its runner stopped" in stopped.error and "run the job again with the same inputs to resume" in stopped.error
    assert [s.state for s in jobs.list() if s.job_id == job_id] == [JobState.interrupted]
    # The record itself still says running: a runner that comes back (its request redelivered) takes it on.
    run_job(platform, Pipeline(name="endless", description="", params=Nothing, owner="metrics",
                               run=lambda ctx, params: None), job_id)
    assert jobs.get(job_id).state == JobState.succeeded and jobs.get(job_id).error is None


def test_an_interrupted_job_can_be_cancelled(tmp_path, monkeypatch):
    monkeypatch.setattr(job_store, "STALE_AFTER_S", 0.0)
    jobs = JobStore(platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path))).store)
    job_id = jobs.create("smoke", {}).job_id
    jobs.update(job_id, state=JobState.running)
    time.sleep(0.01)
    stopped = jobs.get(job_id)
    assert stopped.state == JobState.interrupted and "run it again to start it over" in stopped.error
    assert jobs.request_cancel(job_id).state == JobState.cancelled

"""Jobs leave the blob store: DELETE /jobs/{id}, and the retention sweep of finished jobs."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from auth_support import API_TOKENS, AUTHORIZATION
from fastapi.testclient import TestClient

from flawforge.jobs.retention import sweep_expired
from flawforge.jobs.store import JobStore
from flawforge.proto.jobs import JobState
from flawforge.assembly import platform_for, service_app
from flawforge.runtime.platform import Platform
from flawforge.settings import Settings


def platform_in(tmp_path, **settings) -> Platform:
    return platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"),
                                           api_tokens=API_TOKENS, **settings))


def job_with_blobs(jobs: JobStore, state: JobState, age_days: float = 0) -> str:
    job_id = jobs.create("smoke", {}).job_id
    jobs.put_artifact(job_id, "digests.json", b"{}")
    jobs.store.put(f"jobs/{job_id}/items/0.json", b"{}")
    status = jobs.update(job_id, state=state)
    if age_days:  # save() stamps the time: write the aged status directly
        status.updated_at = datetime.now(timezone.utc) - timedelta(days=age_days)
        jobs.store.put(f"jobs/{job_id}/status.json", status.model_dump_json().encode())
    return job_id


def test_delete_removes_a_finished_job_and_every_blob_and_refuses_a_running_one(tmp_path):
    platform = platform_in(tmp_path)
    jobs = JobStore(platform.store)
    done, running = job_with_blobs(jobs, JobState.succeeded), job_with_blobs(jobs, JobState.running)
    queued = jobs.create("smoke", {}).job_id
    with TestClient(service_app("metrics", platform, run_worker=False), headers=AUTHORIZATION) as client:
        assert client.delete(f"/jobs/{done}").status_code == 204
        assert client.get(f"/jobs/{done}").status_code == 404
        assert list(platform.store.list(f"jobs/{done}/")) == []
        refused = client.delete(f"/jobs/{running}")
        assert refused.status_code == 409 and "cancel it first" in refused.text
        assert len(list(platform.store.list(f"jobs/{running}/"))) == 3
        assert client.delete(f"/jobs/{queued}").status_code == 204  # cancelled, then deleted
        assert client.delete(f"/jobs/{queued}").status_code == 404


def test_the_sweep_deletes_finished_jobs_past_the_retention_period_only(tmp_path):
    platform = platform_in(tmp_path, job_retention_days=7)
    jobs = JobStore(platform.store)
    old = job_with_blobs(jobs, JobState.failed, age_days=8)
    recent = job_with_blobs(jobs, JobState.succeeded, age_days=6)
    old_but_running = job_with_blobs(jobs, JobState.running, age_days=30)
    assert sweep_expired(platform) == [old]
    assert list(platform.store.list(f"jobs/{old}/")) == []
    assert {s.job_id for s in jobs.list()} == {recent, old_but_running}
    keep_forever = platform_in(tmp_path, job_retention_days=0)
    assert sweep_expired(keep_forever) == []


def test_a_queued_job_whose_queue_nothing_consumes_fails_naming_the_owner(tmp_path):
    platform = platform_in(tmp_path, consumer_timeout_s=0.01)
    with TestClient(service_app("template-loader", platform, run_worker=False),
                    headers=AUTHORIZATION) as client:
        job = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 1}}).json()
        time.sleep(0.05)  # past the consumer timeout
        status = client.get(f"/jobs/{job['job_id']}").json()
    assert status["state"] == "failed"
    assert status["error"].startswith("nothing consumes queue 'jobs.smoke' after 0 s: start the metrics service")


def test_a_truncated_status_record_leaves_the_job_list_answering_and_the_sweep_sweeping(tmp_path, caplog):
    platform = platform_in(tmp_path, job_retention_days=0)  # the service's own sweep waits for the one below
    jobs = JobStore(platform.store)
    old, recent = job_with_blobs(jobs, JobState.failed, age_days=8), job_with_blobs(jobs, JobState.succeeded)
    broken = job_with_blobs(jobs, JobState.succeeded)
    record = f"jobs/{broken}/status.json"
    platform.store.put(record, platform.store.get(record)[:40])  # cut short, as by a full disk
    with TestClient(service_app("metrics", platform, run_worker=False), headers=AUTHORIZATION) as client:
        listed = client.get("/jobs")
        assert listed.status_code == 200 and {j["job_id"] for j in listed.json()} == {old, recent}
        one = client.get(f"/jobs/{broken}")
        assert one.status_code == 500 and one.json()["code"] == "job_record_unreadable"
    assert f"{record} is not a readable job record" in caplog.text
    assert sweep_expired(platform_in(tmp_path, job_retention_days=7)) == [old]


def test_the_retention_thread_logs_an_unexpected_failure_and_sweeps_again(tmp_path, caplog):
    from flawforge.jobs.retention import RetentionSweeper

    platform = platform_in(tmp_path, job_retention_days=7)
    old = job_with_blobs(JobStore(platform.store), JobState.failed, age_days=8)
    listing, calls = platform.store.list, []

    def failing_once(prefix):  # the first sweep meets an error no one planned for
        calls.append(prefix)
        if len(calls) == 1:
            raise RuntimeError("the listing broke")
        return listing(prefix)

    platform.store.list = failing_once
    sweeper = RetentionSweeper(platform, interval_s=0.05).start()
    try:
        deadline = time.monotonic() + 10
        while platform.store.exists(f"jobs/{old}/status.json") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not platform.store.exists(f"jobs/{old}/status.json") and sweeper._thread.is_alive()
    finally:
        sweeper.stop()
    assert "RuntimeError: the listing broke" in caplog.text

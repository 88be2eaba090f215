"""The `flawforge` command as a user runs it: embedded, against a served stack, and with bad input."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import hashlib

import pytest

from flawforge.pipelines.smoke import payload_for
from polling import wait_until_answers

FLAWFORGE = [sys.executable, "-m", "flawforge.cli.entry"]


def run_cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*FLAWFORGE, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_smoke_runs_embedded_and_writes_artifacts(tmp_path):
    result = run_cli("run", "smoke", "--count", "30", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    digests = json.loads((tmp_path / "out" / "digests.json").read_text())
    assert digests["count"] == 30 and len(set(digests["sha256"])) == 30
    assert "succeeded" in result.stderr
    # the blob store lived only as long as the run: OUT holds the artifacts alone
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["digests.json"]


@pytest.mark.parametrize("args", [["run", "--keep-blobs", "smoke"], ["run", "smoke", "--keep-blobs"]])
def test_keep_blobs_keeps_the_embedded_blob_store(tmp_path, args):
    result = run_cli(*args, "--count", "3", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / ".blobs" / "jobs").is_dir()


# done/total (a total unknown yet is '?'), the rate once items land, the time left where the total is known
PROGRESS_LINE = re.compile(r"math-errors: (\d+)/(?:\?|(\d+) \(\d+%\))(?:, ([\d.]+) items/s)?(?:, ETA (\S+))? \((.+)\)")


def _seconds(eta: str) -> int:
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", eta)
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def test_without_a_terminal_a_long_job_logs_a_progress_line_now_and_then(tmp_path, shared_data):
    """Under nohup or into a log there is no bar: a line every FLAWFORGE_PROGRESS_LOG_S seconds (30 by default)
    with done/total, the rate and the time left, per stage of the job."""
    out = tmp_path / "out"
    result = run_cli("run", "math-errors", "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"), "--templates",
                     str(shared_data / "formalization-templates"), "--indices", "0-99", "--out", str(out),
                     env={"FLAWFORGE_PROGRESS_LOG_S": "0.2"}, timeout=300)
    assert result.returncode == 0, result.stderr
    *lines, last = result.stderr.splitlines()
    assert last.startswith("math-errors: job ") and last.endswith(f"succeeded; artifacts in {out}")
    assert len(lines) >= 2 and "\r" not in result.stderr, result.stderr  # lines, not a bar redrawn in place
    stages: dict[str, list[tuple[int, int]]] = {}
    for line in lines:
        match = PROGRESS_LINE.fullmatch(line)
        assert match, line
        done, total, rate, eta, stage = match.groups()
        if total is None:
            assert eta is None, line
            continue
        stages.setdefault(stage, []).append((int(done), int(total)))
        if rate is not None:  # the time left is what is left at that rate (both printed rounded)
            left = (int(total) - int(done)) / float(rate)
            assert abs(_seconds(eta) - left) <= 1 + 0.1 * left, line
    summary = json.loads((out / "summary.json").read_text())
    assert stages, lines
    for stage, points in stages.items():  # each stage counts its own items, never backwards
        assert [done for done, _ in points] == sorted(done for done, _ in points), stage
        assert {total for _, total in points} <= {summary["problems"], summary["problems_with_template"]}, stage


def test_a_job_whose_work_is_done_is_asked_ten_times_as_often_so_the_command_ends_with_it(monkeypatch):
    """The last step, writing the artifacts, is short: polled at the usual pace the command would end up to a
    whole poll after the job did."""
    from datetime import datetime, timezone

    from flawforge.cli import jobs_client
    from flawforge.proto.jobs import JobState, JobStatus, Progress

    now = datetime.now(timezone.utc)
    statuses = iter(JobStatus(job_id="j", pipeline="smoke", params={}, state=state, created_at=now, updated_at=now,
                              progress=Progress(done=done, total=total))
                    for state, done, total in [(JobState.queued, 0, None), (JobState.running, 3, 10),
                                               (JobState.running, 10, 10), (JobState.running, 10, 10),
                                               (JobState.succeeded, 10, 10)])
    slept = []
    monkeypatch.setattr(jobs_client.time, "sleep", slept.append)
    assert jobs_client._follow(lambda: next(statuses), 0.5, "smoke").state == JobState.succeeded
    assert slept == [0.5, 0.5, 0.05, 0.05]


# Providers that serve the model asked for but are never reached: these cases fail before any model call.
UNREACHED_PROVIDER = {"FLAWFORGE_LLM_PROVIDERS": '{"down": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}'}


# DATA: the shared data folder; OUT: the case's output folder; {job}: a job id.
@pytest.mark.parametrize("args, message, status, env", [
    (["run", "smoke", "--count", "0", "--out", "x"], "flawforge: error: invalid count: Input should be greater than or equal to 1", 2, {}),
    (["serve", "no-such-service"], "flawforge: error: unknown service 'no-such-service'", 2, {}),
    (["run", "smoke", "--out", "x", "--stack", "http://127.0.0.1:9"], "flawforge: error: cannot reach the stack at http://127.0.0.1:9", 2, {}),
    (["serve", "metrics"], "flawforge: error: FLAWFORGE_API_TOKENS is empty: set `name:token` pairs, or FLAWFORGE_AUTH=disabled", 2, {}),
    # one service, its broker down: said once, before the server starts
    (["serve", "metrics"], "flawforge: error: cannot reach RabbitMQ at 127.0.0.1:9 (Connection refused); no service started",
     2, {"FLAWFORGE_BUS": "rabbitmq", "FLAWFORGE_AMQP_URL": "amqp://guest:guest@127.0.0.1:9/", "FLAWFORGE_AUTH": "disabled"}),
    # input with nothing to work on: every problem of the range has a template already
    (["run", "templates", "--gsm8k", "DATA/gsm8k/train.jsonl", "--templates", "DATA/formalization-templates",
      "--indices", "1001-1002", "--model", "m", "--out", "OUT"],
     "flawforge: templates: job {job} produced nothing: every problem of 1001-1002 has a template in "
     "DATA/formalization-templates already; nothing to ask the model; artifacts in OUT", 1, UNREACHED_PROVIDER),
    (["run", "templates", "--gsm8k", "OUT.jsonl", "--indices", "0-1", "--model", "m", "--out", "OUT"],
     "flawforge: error: job {job} failed: OUT.jsonl: no problems in the file", 2, UNREACHED_PROVIDER),
])
def test_user_mistakes_get_one_line_and_no_traceback(tmp_path, shared_data, args, message, status, env):
    out = tmp_path / "out"
    out.with_suffix(".jsonl").write_text("")  # an empty GSM8K file

    def placed(text: str) -> str:
        return text.replace("DATA", str(shared_data)).replace("OUT", str(out))

    result = run_cli(*map(placed, args), env={"FLAWFORGE_API_TOKENS": "", "FLAWFORGE_AUTH": "required", **env})
    assert result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert re.match(re.escape(placed(message)).replace(re.escape("{job}"), r"[0-9a-f]+"), lines[-1]), lines[-1]
    assert len(lines) == 1 and "Traceback" not in result.stderr, lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_smoke_through_a_served_service_on_rabbitmq(amqp_url, tmp_path):
    port = _free_port()
    env = {"FLAWFORGE_BUS": "rabbitmq", "FLAWFORGE_AMQP_URL": amqp_url,
           "FLAWFORGE_BLOB_DIR": str(tmp_path / "blobs"),
           "FLAWFORGE_API_TOKENS": "ops:tok-ops-5d1e,rev:tok-rev-0b7c:reviewer"}
    # No --host: outside a container a service binds the loopback address by default.
    server = subprocess.Popen([*FLAWFORGE, "serve", "metrics", "--port", str(port)],
                              env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/readyz", server)
        stack = ["run", "smoke", "--count", "25", "--out", str(tmp_path / "out"), "--stack", f"http://127.0.0.1:{port}"]
        refused = run_cli(*stack, "--token", "tok-wrong")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"flawforge: error: the stack at http://127.0.0.1:{port} refused the token: unknown bearer token "
            "(give --token or FLAWFORGE_TOKEN)")
        reviewer = run_cli(*stack, "--token", "tok-rev-0b7c")  # a reviewer's token runs no job
        assert reviewer.returncode == 2 and reviewer.stderr.strip().splitlines()[-1] == (
            f"flawforge: error: the stack at http://127.0.0.1:{port} refused the token: a reviewer token may not "
            "call POST /jobs (it is for operator and service tokens) (give --token or FLAWFORGE_TOKEN)")
        result = run_cli(*stack, env={"FLAWFORGE_TOKEN": "tok-ops-5d1e"})
        assert result.returncode == 0, result.stderr
        digests = json.loads((tmp_path / "out" / "digests.json").read_text())
        job_id = result.stderr.split("job ")[1].split()[0]
        expected = [hashlib.sha256(payload_for(job_id, i, 1024)).hexdigest() for i in range(25)]
        assert digests == {"count": 25, "sha256": expected}
        assert Path(tmp_path / "blobs" / "jobs" / job_id / "status.json").exists()  # state lives in the store
    finally:
        server.terminate()
        server.wait(30)  # its workers finish what they hold first

"""Runs a job embedded or on a running stack, shows progress, and writes its artifacts to a folder."""
from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from flawforge.blobstore.base import sha256_hex
from flawforge.cli.progress import progress_display
from flawforge.errors import FlawforgeError, Interrupted
from flawforge.jobs.polling import next_poll_s

# After Ctrl-C the embedded job is cancelled; its threads get this long to notice before the process ends.
INTERRUPTED_STOP_S = 1.0
from flawforge.proto.jobs import Artifact, JobState, JobStatus


def _follow(read_status, poll_s: float, label: str) -> JobStatus:
    """Polls the job until it ends, showing its progress: a bar at a terminal, else a line now and then."""
    display = progress_display(label)
    seen, changed = None, time.monotonic()
    try:
        while True:
            status = read_status()
            display.update(status.progress.done, status.progress.total,
                           status.progress.message or status.state.value)
            if status.state.finished or status.state == JobState.interrupted:
                return status
            if (status.state, status.progress) != seen:
                seen, changed = (status.state, status.progress), time.monotonic()
            # A job whose work is all done is writing its artifacts, a short step: asked ten times as often
            # then, the command ends when the job does rather than up to a poll later.
            time.sleep(poll_s / 10 if status.progress.total and status.progress.done >= status.progress.total
                       else next_poll_s(poll_s, time.monotonic() - changed))
    finally:
        display.close()


def _finish(status: JobStatus) -> None:
    if status.state == JobState.failed:
        raise FlawforgeError(f"job {status.job_id} failed: {status.error}")
    if status.state == JobState.cancelled:
        raise FlawforgeError(f"job {status.job_id} was cancelled")
    if status.state == JobState.interrupted:
        raise FlawforgeError(f"job {status.job_id} was interrupted: {status.error}")


def _keep_or_cancel(job: str, cancel_on_exit: bool | None, cancel) -> str:
    """After Ctrl-C: cancels the job when told to, or when asked and the user says so; says what became of it.

    Without --cancel-on-exit/--keep-on-exit the user is asked at a terminal; elsewhere (scripts, CI) the job is
    cancelled, since nobody is left to follow it.
    """
    if cancel_on_exit is None:
        cancel_on_exit = True
        if sys.stdin.isatty():
            try:
                cancel_on_exit = input(f"\ncancel {job}? [y/N] ").strip().lower() in ("y", "yes")
            except (EOFError, KeyboardInterrupt):
                cancel_on_exit = False
    if cancel_on_exit:
        cancel()
        return f"interrupted: {job} cancelled"
    return f"interrupted: {job} keeps running"


@contextmanager
def _quieted(logger: logging.Logger):
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _quiet_after_ctrl_c():
    """Ctrl-C at a terminal reaches the job's worker and sandbox processes too: from that moment, what the
    winding-down stack logs about them dying is no news to the user, who gets one line."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame):
        logging.disable(logging.WARNING)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_embedded(pipeline_name: str, params: dict, out: Path, settings) -> JobStatus:
    from pydantic import ValidationError

    from flawforge.jobs.pipeline import pipeline_named
    from flawforge.jobs.runner import invalid_params, submit
    from flawforge.jobs.store import JobStore
    from flawforge.assembly import EMBEDDED_SERVICES, embedded_stack

    pipeline = pipeline_named(pipeline_name)
    services = EMBEDDED_SERVICES if pipeline.services is None else pipeline.services
    if pipeline.owner not in services:  # a pipeline owned by a heavy service (the inference-server) brings it
        services = (pipeline.owner, *services)
    # The command reports the job's outcome itself, in one line: the runner's own log line would repeat it.
    runner_log = logging.getLogger("flawforge.jobs.runner")
    with embedded_stack(settings, services, pipelines=(pipeline_name,)) as stack, _quieted(runner_log):
        jobs = JobStore(stack.platform.store)
        try:
            status = submit(stack.platform, pipeline, params)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        try:
            with _quiet_after_ctrl_c():
                status = _follow(lambda: jobs.get(status.job_id), 0.1, pipeline_name)
        except KeyboardInterrupt:
            # The job dies with this process: cancel it so its threads stop at once.
            jobs.request_cancel(status.job_id)
            stack.stop_timeout_s = INTERRUPTED_STOP_S
            raise Interrupted(f"interrupted: job {status.job_id} cancelled; nothing written to {out}") from None
        _finish(status)
        out.mkdir(parents=True, exist_ok=True)
        for name in jobs.artifact_names(status.job_id):
            jobs.download_artifact(status.job_id, name, out / name)
    return status


def run_on_stack(url: str, pipeline_name: str, params: dict, out: Path, token: str | None = None,
                 cancel_on_exit: bool | None = None) -> JobStatus:
    import httpx  # only here: an embedded run has no use for an HTTP client (a tenth of its start-up)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30) as client:
        try:
            response = client.post("/jobs", json={"pipeline": pipeline_name, "params": params})
        except httpx.HTTPError as exc:
            raise FlawforgeError(f"cannot reach the stack at {url}: {exc}") from exc
        if response.status_code in (401, 403):  # unknown, or of a role that may not run jobs (a reviewer's)
            raise FlawforgeError(f"the stack at {url} refused the token: {response.json().get('detail')} "
                                 "(give --token or FLAWFORGE_TOKEN)")
        if response.status_code == 422:
            detail = response.json()["detail"]  # the findings, or one message (a JSON body refused whole)
            details = detail if isinstance(detail, str) else "; ".join(
                f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in detail)
            raise FlawforgeError(f"the stack refused the job: {details}")
        response.raise_for_status()
        job_id = response.json()["job_id"]
        try:
            status = _follow(lambda: JobStatus.model_validate(client.get(f"/jobs/{job_id}").raise_for_status().json()),
                             0.5, pipeline_name)
        except KeyboardInterrupt:
            where = f"job {job_id} on {url}"
            raise Interrupted(_keep_or_cancel(
                where, cancel_on_exit, lambda: client.post(f"/jobs/{job_id}/cancel").raise_for_status())) from None
        _finish(status)
        out.mkdir(parents=True, exist_ok=True)
        for item in client.get(f"/jobs/{job_id}/artifacts").raise_for_status().json():
            artifact = Artifact.model_validate(item)
            data = client.get(f"/jobs/{job_id}/artifacts/{artifact.name}").raise_for_status().content
            if sha256_hex(data) != artifact.blob.sha256:
                raise FlawforgeError(f"artifact {artifact.name} of job {job_id} arrived corrupted (checksum mismatch)")
            (out / artifact.name).write_bytes(data)
    return status

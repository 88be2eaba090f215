"""Runs a recorded job: the handler behind every `jobs.<pipeline>` queue."""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from pydantic import BaseModel, ValidationError

from flawforge.errors import FlawforgeError, InvalidInput
from flawforge.inputs import MUST_EXIST_CONTEXT, ROOTS_CONTEXT, data_roots
from flawforge.jobs.context import JobCancelled, JobContext, missing_consumer
from flawforge.jobs.pipeline import Pipeline, pipeline_named
from flawforge.jobs.store import HEARTBEAT_S, JobNotFound, JobStore
from flawforge.proto.jobs import JobRequested, JobState, JobStatus
from flawforge.runtime.metrics import JOB_STATES, JOBS_RUNNING
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

log = logging.getLogger(__name__)


def enter_state(jobs: JobStore, pipeline: str, job_id: str, state: JobState, **changes) -> JobStatus:
    """Records the job's new state, and counts it (flawforge_jobs_total)."""
    status = jobs.update(job_id, state=state, **changes)
    JOB_STATES.labels(pipeline, state.value).inc()
    return status


def validated_params(platform: Platform, pipeline: Pipeline, params: dict, *, inputs_must_exist: bool = True
                     ) -> BaseModel:
    """The pipeline's parameters, their paths checked against the data roots (ValidationError naming each)."""
    context = {ROOTS_CONTEXT: data_roots(platform.settings.data_roots), MUST_EXIST_CONTEXT: inputs_must_exist}
    return pipeline.params.model_validate(params, context=context)


def invalid_params(exc: ValidationError) -> InvalidInput:
    """The first problem with a job's parameters, in one line naming the parameter."""
    err = exc.errors(include_url=False)[0]
    return InvalidInput(f"invalid {'.'.join(map(str, err['loc']))}: {err['msg']}")


@contextmanager
def heartbeat(jobs: JobStore, job_id: str) -> Iterator[None]:
    """Beats for the job every HEARTBEAT_S while the block runs, from a thread of its own: a pass that holds the
    job's thread for minutes (a model's forward pass) is still a live runner."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                jobs.beat(job_id)
            except Exception as exc:  # the store hiccupped: the next beat may land, and the job is unharmed
                log.warning("job %s: heartbeat not stored: %s", job_id, exc)
            if stop.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{job_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_job(platform: Platform, pipeline: Pipeline, job_id: str) -> None:
    ctx = JobContext(platform, job_id)
    try:
        status = ctx.jobs.get(job_id)
    except JobNotFound:
        return  # deleted while it waited in the queue
    if status.state.finished:
        return  # a redelivered request for a job already settled
    enter_state(ctx.jobs, pipeline.name, job_id, JobState.running, error=None)
    running = JOBS_RUNNING.labels(pipeline.name)
    running.inc()
    try:
        # Checked again where the files are read, before any is opened: the service that took the job may not
        # see them, and they may have changed since.
        try:
            params = validated_params(platform, pipeline, status.params)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        with heartbeat(ctx.jobs, job_id):
            pipeline.run(ctx, params)
    except JobCancelled:
        enter_state(ctx.jobs, pipeline.name, job_id, JobState.cancelled)
    except Exception as exc:
        error = str(exc) if isinstance(exc, FlawforgeError) else f"{type(exc).__name__}: {exc}"
        # One line with the reason; the traceback only for whoever debugs.
        log.error("job %s (%s) failed: %s", job_id, pipeline.name, error)
        log.debug("job %s failed", job_id, exc_info=True)
        enter_state(ctx.jobs, pipeline.name, job_id, JobState.failed, error=error)
    else:
        enter_state(ctx.jobs, pipeline.name, job_id, JobState.succeeded)
    finally:
        running.dec()


def job_consumer(pipeline: Pipeline) -> Consumer:
    def make_handler(platform: Platform):
        def handle(message: JobRequested) -> None:
            run_job(platform, pipeline, message.job_id)

        return handle

    return Consumer(queue=pipeline.queue, make_handler=make_handler)


def fail_if_unclaimed(platform: Platform, status: JobStatus) -> JobStatus:
    """A job still queued after the consumer timeout, whose queue nothing consumes, fails naming the service
    that should (without this it would wait at 0 done for ever)."""
    waited_s = (datetime.now(timezone.utc) - status.created_at).total_seconds()
    if status.state != JobState.queued or waited_s < platform.settings.consumer_timeout_s:
        return status
    queue = pipeline_named(status.pipeline).queue
    if platform.bus.consumer_count(queue) > 0:
        return status
    return enter_state(JobStore(platform.store), status.pipeline, status.job_id, JobState.failed,
                       error=missing_consumer(platform, queue, waited_s))


def submit(platform: Platform, pipeline: Pipeline, params: dict):
    """Records a job and asks its owner service to run it."""
    # A service that does not run this pipeline may not see its files: it checks only that they are under the roots.
    owner = platform.settings.service in ("", pipeline.owner)
    validated = validated_params(platform, pipeline, params, inputs_must_exist=owner)
    status = JobStore(platform.store).create(pipeline.name, validated.model_dump(mode="json"),
                                             resumable=pipeline.resumable)
    platform.bus.declare(pipeline.queue)
    platform.bus.publish(pipeline.queue, JobRequested(job_id=status.job_id, pipeline=pipeline.name))
    JOB_STATES.labels(pipeline.name, JobState.queued.value).inc()
    return status

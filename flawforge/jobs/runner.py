"""Runs a recorded job: the handler behind every `jobs.<pipeline>` queue."""
from __future__ import annotations

import logging

from flawforge.jobs.context import JobCancelled, JobContext
from flawforge.jobs.pipeline import Pipeline
from flawforge.proto.jobs import JobRequested, JobState
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

log = logging.getLogger(__name__)


def run_job(platform: Platform, pipeline: Pipeline, job_id: str) -> None:
    ctx = JobContext(platform, job_id)
    status = ctx.jobs.get(job_id)
    if status.state.finished:
        return  # a redelivered request for a job already settled
    ctx.jobs.update(job_id, state=JobState.running, error=None)
    try:
        pipeline.run(ctx, pipeline.params.model_validate(status.params))
    except JobCancelled:
        ctx.jobs.update(job_id, state=JobState.cancelled)
    except Exception as exc:
        log.exception("job %s failed", job_id)
        ctx.jobs.update(job_id, state=JobState.failed, error=f"{type(exc).__name__}: {exc}")
    else:
        ctx.jobs.update(job_id, state=JobState.succeeded)


def job_consumer(pipeline: Pipeline) -> Consumer:
    def make_handler(platform: Platform):
        def handle(message: JobRequested) -> None:
            run_job(platform, pipeline, message.job_id)

        return handle

    return Consumer(queue=pipeline.queue, make_handler=make_handler)


def submit(platform: Platform, pipeline: Pipeline, params: dict):
    """Records a job and asks its owner service to run it."""
    from flawforge.jobs.store import JobStore

    validated = pipeline.params.model_validate(params)
    status = JobStore(platform.store).create(pipeline.name, validated.model_dump(mode="json"))
    platform.bus.declare(pipeline.queue)
    platform.bus.publish(pipeline.queue, JobRequested(job_id=status.job_id, pipeline=pipeline.name))
    return status

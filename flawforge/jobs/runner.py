"""Runs a recorded job: the handler behind every `jobs.<pipeline>` queue."""
from __future__ import annotations

import logging

from pydantic import BaseModel, ValidationError

from flawforge.errors import InvalidInput
from flawforge.inputs import MUST_EXIST_CONTEXT, ROOTS_CONTEXT, data_roots
from flawforge.jobs.context import JobCancelled, JobContext
from flawforge.jobs.pipeline import Pipeline
from flawforge.proto.jobs import JobRequested, JobState
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

log = logging.getLogger(__name__)


def validated_params(platform: Platform, pipeline: Pipeline, params: dict, *, inputs_must_exist: bool = True
                     ) -> BaseModel:
    """The pipeline's parameters, their paths checked against the data roots (ValidationError naming each)."""
    context = {ROOTS_CONTEXT: data_roots(platform.settings.data_roots), MUST_EXIST_CONTEXT: inputs_must_exist}
    return pipeline.params.model_validate(params, context=context)


def invalid_params(exc: ValidationError) -> InvalidInput:
    """The first problem with a job's parameters, in one line naming the parameter."""
    err = exc.errors(include_url=False)[0]
    return InvalidInput(f"invalid {'.'.join(map(str, err['loc']))}: {err['msg']}")


def run_job(platform: Platform, pipeline: Pipeline, job_id: str) -> None:
    ctx = JobContext(platform, job_id)
    status = ctx.jobs.get(job_id)
    if status.state.finished:
        return  # a redelivered request for a job already settled
    ctx.jobs.update(job_id, state=JobState.running, error=None)
    try:
        # Checked again where the files are read, before any is opened: the service that took the job may not
        # see them, and they may have changed since.
        try:
            params = validated_params(platform, pipeline, status.params)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        pipeline.run(ctx, params)
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

    # A service that does not run this pipeline may not see its files: it checks only that they are under the roots.
    owner = platform.settings.service in ("", pipeline.owner)
    validated = validated_params(platform, pipeline, params, inputs_must_exist=owner)
    status = JobStore(platform.store).create(pipeline.name, validated.model_dump(mode="json"))
    platform.bus.declare(pipeline.queue)
    platform.bus.publish(pipeline.queue, JobRequested(job_id=status.job_id, pipeline=pipeline.name))
    return status

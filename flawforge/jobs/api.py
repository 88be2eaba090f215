"""The jobs HTTP API, mounted on every service: submit, read, list artifacts, cancel, delete."""
from __future__ import annotations

from fastapi import APIRouter, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from flawforge.jobs.pipeline import pipelines
from flawforge.jobs.runner import fail_if_unclaimed, submit
from flawforge.errors import Conflict
from flawforge.jobs.store import JobStore
from flawforge.proto.jobs import Artifact, JobState, JobStatus, JobSubmit
from flawforge.runtime.platform import Platform


def jobs_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/jobs", tags=["jobs"])
    store = JobStore(platform.store)

    @router.post("", status_code=status.HTTP_201_CREATED)
    def submit_job(body: JobSubmit) -> JobStatus:
        """Validates the parameters against the pipeline's model and queues the job."""
        known = pipelines()
        pipeline = known.get(body.pipeline)
        if pipeline is None:
            raise RequestValidationError([{
                "type": "value_error", "loc": ("body", "pipeline"), "input": body.pipeline,
                "msg": f"unknown pipeline {body.pipeline!r}; known: {', '.join(sorted(known))}",
            }])
        try:
            return submit(platform, pipeline, body.params)
        except ValidationError as exc:
            raise RequestValidationError([
                {**err, "loc": ("body", "params", *err["loc"])} for err in exc.errors(include_url=False)
            ]) from None

    @router.get("")
    def list_jobs() -> list[JobStatus]:
        return store.list()

    @router.get("/{job_id}")
    def get_job(job_id: str) -> JobStatus:
        return fail_if_unclaimed(platform, store.get(job_id))

    @router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
    def delete_job(job_id: str) -> Response:
        """Removes the job and its blobs; a queued job is cancelled first, a running one must be cancelled."""
        job = store.get(job_id)
        if job.state == JobState.queued:
            job = store.request_cancel(job_id)
        if not job.state.finished:
            raise Conflict(f"job {job_id} is {job.state.value}: cancel it first (POST /jobs/{job_id}/cancel)")
        store.delete(job_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.get("/{job_id}/artifacts")
    def list_artifacts(job_id: str) -> list[Artifact]:
        store.get(job_id)  # JobNotFound: 404
        return store.artifacts(job_id)

    @router.get("/{job_id}/artifacts/{name}")
    def get_artifact(job_id: str, name: str) -> Response:
        return Response(store.artifact(job_id, name), media_type="application/octet-stream")

    @router.post("/{job_id}/cancel")
    def cancel_job(job_id: str) -> JobStatus:
        return store.request_cancel(job_id)

    return router

"""Jobs: what a user submits, what the platform reports back."""
from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import Field

from flawforge.proto.base import BlobRef, Message, Model


class JobState(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    # Recorded as running, but its runner stopped beating (killed, its machine gone): nothing runs it now. A
    # resumable pipeline run again with the same inputs goes on where it stopped.
    interrupted = "interrupted"

    @property
    def finished(self) -> bool:
        return self in (JobState.succeeded, JobState.failed, JobState.cancelled)


class JobSubmit(Model):
    pipeline: str = Field(max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)


class Progress(Model):
    done: int = 0
    total: int | None = None
    message: str = ""


class JobStatus(Model):
    schema_version: int = 1
    job_id: str
    pipeline: str
    params: dict[str, Any]
    state: JobState
    progress: Progress = Field(default_factory=Progress)
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    cancel_requested: bool = False
    resumable: bool = Field(False, description="Run again with the same inputs, the pipeline goes on from what this "
                                               "job finished instead of starting over.")
    heartbeat_at: datetime | None = Field(None, description="When its runner last said it was alive (running jobs).")


class Artifact(Model):
    name: str
    blob: BlobRef


def job_queue(pipeline: str) -> str:
    """The queue of a pipeline's JobRequested messages, consumed by the service that owns the pipeline."""
    return f"jobs.{pipeline}"


class JobRequested(Message):
    """Asks the service that owns a pipeline to run a job already recorded in the store."""

    kind = "job.requested"
    job_id: str
    pipeline: str

"""Job state in the blob store, so a restarted service loses nothing."""
from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterable

from pydantic import ValidationError

from flawforge.blobstore import BlobStore
from flawforge.errors import BlobNotFound, FlawforgeError, NotFound
from flawforge.proto.jobs import Artifact, JobState, JobStatus, Progress

log = logging.getLogger(__name__)


class JobNotFound(NotFound):
    code = "job_not_found"


class JobRecordUnreadable(FlawforgeError):
    """A job's stored status that does not parse (cut short, edited): the job is listed without it."""

    code = "job_record_unreadable"


# A running job's runner says it is alive every HEARTBEAT_S; one silent for STALE_AFTER_S (a dozen beats, room for a
# loaded machine) has stopped: killed, or its machine gone. Its job then reads as interrupted.
HEARTBEAT_S = 5.0
STALE_AFTER_S = 60.0


def _now() -> datetime:
    return datetime.now(timezone.utc)


class JobStore:
    def __init__(self, store: BlobStore):
        self.store = store

    @staticmethod
    def _status_key(job_id: str) -> str:
        return f"jobs/{job_id}/status.json"

    @staticmethod
    def _cancel_key(job_id: str) -> str:
        return f"jobs/{job_id}/cancel"

    @staticmethod
    def _heartbeat_key(job_id: str) -> str:
        return f"jobs/{job_id}/heartbeat"

    @staticmethod
    def _artifact_prefix(job_id: str) -> str:
        return f"jobs/{job_id}/artifacts/"

    def create(self, pipeline: str, params: dict, *, resumable: bool = False) -> JobStatus:
        now = _now()
        status = JobStatus(job_id=uuid.uuid4().hex, pipeline=pipeline, params=params, state=JobState.queued,
                           created_at=now, updated_at=now, resumable=resumable)
        self.save(status)
        return status

    def save(self, status: JobStatus) -> None:
        status.updated_at = _now()
        self.store.put(self._status_key(status.job_id), status.model_dump_json().encode(), "application/json")

    def get(self, job_id: str) -> JobStatus:
        """The job as it stands: a running job whose runner stopped reads as interrupted."""
        return self._with_liveness(self._recorded(job_id))

    def _recorded(self, job_id: str) -> JobStatus:
        """The job as its record says, with a cancel request seen."""
        if not job_id.isalnum():
            raise JobNotFound(f"no job {job_id!r}")
        try:
            return self._with_cancel(self._read(self._status_key(job_id)))
        except BlobNotFound:
            raise JobNotFound(f"no job {job_id!r}") from None

    def _read(self, key: str) -> JobStatus:
        try:
            return JobStatus.model_validate_json(self.store.get(key))
        except ValidationError as exc:
            raise JobRecordUnreadable(f"{key} is not a readable job record: {exc.errors()[0]['msg']}") from None

    def list(self) -> list[JobStatus]:
        """Every job whose record reads; one that does not is logged and left out, so one bad record does not
        hide the others (nor stop the retention sweep)."""
        keys = [k for k in self.store.list("jobs/") if k.endswith("/status.json") and k.count("/") == 2]
        statuses = []
        for key in keys:
            try:
                statuses.append(self._with_liveness(self._with_cancel(self._read(key))))
            except BlobNotFound:
                continue  # deleted since the listing
            except JobRecordUnreadable as exc:
                log.warning("job list: %s; left out", exc)
        return sorted(statuses, key=lambda s: s.created_at)

    def _with_cancel(self, status: JobStatus) -> JobStatus:
        if not status.cancel_requested and self.store.exists(self._cancel_key(status.job_id)):
            status.cancel_requested = True
        return status

    def beat(self, job_id: str) -> None:
        """The runner's sign of life: a blob of its own, like the cancel request, so it never races the status."""
        self.store.put(self._heartbeat_key(job_id), _now().isoformat().encode())

    def _with_liveness(self, status: JobStatus) -> JobStatus:
        """A running job whose runner has not beaten (nor saved its status) for STALE_AFTER_S reads as interrupted."""
        if status.state != JobState.running:
            return status
        try:
            beat = datetime.fromisoformat(self.store.get(self._heartbeat_key(status.job_id)).decode())
        except (BlobNotFound, ValueError):
            beat = None
        status.heartbeat_at = beat
        alive = max(filter(None, (beat, status.updated_at)))
        silent_s = (_now() - alive).total_seconds()
        if silent_s > STALE_AFTER_S:
            status.state = JobState.interrupted
            status.error = (f"its runner stopped: nothing from it since {alive.isoformat(timespec='seconds')} "
                            f"({silent_s:.0f} s); " + ("run the job again with the same inputs to resume it, its "
                                                      "finished work is kept" if status.resumable else
                                                      "run it again to start it over"))
        return status

    def update(self, job_id: str, **changes) -> JobStatus:
        status = self._recorded(job_id)  # never the read-time interrupted state: the runner may be back
        for name, value in changes.items():
            setattr(status, name, value)
        self.save(status)
        return status

    def set_progress(self, job_id: str, done: int, total: int | None, message: str = "") -> None:
        self.update(job_id, progress=Progress(done=done, total=total, message=message))

    def request_cancel(self, job_id: str) -> JobStatus:
        """Cancels a queued or interrupted job; asks a running one to stop. The request is a blob of its own, never a rewrite of
        the status a running job keeps updating: a status read before the request and saved after it (a progress
        update) would undo the request, and a request saved after the job's last update would undo its state."""
        status = self.get(job_id)
        if status.state.finished:
            return status
        self.store.put_if_absent(self._cancel_key(job_id), b"")
        if status.state in (JobState.queued, JobState.interrupted):  # nothing runs it to see the request
            return self.update(job_id, cancel_requested=True, state=JobState.cancelled)
        return self.get(job_id)

    def delete(self, job_id: str) -> None:
        """Removes the job and every blob under it; its status goes last, so a deletion cut short is seen (and
        finished by the retention sweep or another DELETE)."""
        status_key = self._status_key(self.get(job_id).job_id)
        for key in list(self.store.list(f"jobs/{job_id}/")):
            if key != status_key:
                self.store.delete(key)
        self.store.delete(status_key)

    def expired(self, retention_days: float, now: datetime | None = None) -> list[str]:
        """Finished jobs last changed more than the retention period ago (none when it is 0: keep forever)."""
        if retention_days <= 0:
            return []
        cutoff = (now or _now()) - timedelta(days=retention_days)
        return [status.job_id for status in self.list() if status.state.finished and status.updated_at < cutoff]

    def _artifact_key(self, job_id: str, name: str) -> str:
        if "/" in name or name.startswith("."):
            raise ValueError(f"invalid artifact name {name!r}")
        return self._artifact_prefix(job_id) + name

    def put_artifact(self, job_id: str, name: str, data: bytes) -> Artifact:
        return Artifact(name=name, blob=self.store.put(self._artifact_key(job_id, name), data))

    def put_artifact_chunks(self, job_id: str, name: str, chunks: Iterable[bytes]) -> Artifact:
        """An artifact written as its chunks come (see BlobStore.put_chunks)."""
        return Artifact(name=name, blob=self.store.put_chunks(self._artifact_key(job_id, name), chunks))

    def artifact_names(self, job_id: str) -> list[str]:
        self.get(job_id)
        prefix = self._artifact_prefix(job_id)
        return [key[len(prefix):] for key in self.store.list(prefix)]

    def artifacts(self, job_id: str) -> list[Artifact]:
        """Names with checksums: reads every artifact, so callers that only need names use artifact_names."""
        prefix = self._artifact_prefix(job_id)
        return [Artifact(name=name, blob=self.store.ref_for(prefix + name, self.store.get(prefix + name)))
                for name in self.artifact_names(job_id)]

    def artifact(self, job_id: str, name: str) -> bytes:
        self.get(job_id)
        try:
            return self.store.get(self._artifact_key(job_id, name))
        except (BlobNotFound, ValueError):
            raise JobNotFound(f"job {job_id} has no artifact {name!r}") from None

    def download_artifact(self, job_id: str, name: str, path: str | os.PathLike) -> None:
        """Copies an artifact into a file without reading it into memory (they can be large)."""
        self.get(job_id)
        try:
            self.store.download(self._artifact_key(job_id, name), path)
        except (BlobNotFound, ValueError):
            raise JobNotFound(f"job {job_id} has no artifact {name!r}") from None

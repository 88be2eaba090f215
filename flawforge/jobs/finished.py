"""Work items of a job that has finished (failed, cancelled, or done) or is asked to stop are acknowledged
without being worked on: a failed job's queued items would otherwise keep the workers busy for nothing.

A job's state is read from the store at most once a second per job and worker; a finished job stays finished.
"""
from __future__ import annotations

import threading
import time

from flawforge.blobstore import BlobStore
from flawforge.bus.base import Delivery, Middleware, SkipMessage
from flawforge.jobs.store import JobNotFound, JobStore

RECHECK_S = 1.0


class SkipWorkOfFinishedJobs(Middleware):
    def __init__(self, store: BlobStore, recheck_s: float = RECHECK_S):
        self.jobs = JobStore(store)
        self.recheck_s = recheck_s
        self._stopped: set[str] = set()
        self._running_seen: dict[str, float] = {}  # job id -> when it was last read as running
        self._lock = threading.Lock()

    def _stopped_job(self, job_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if job_id in self._stopped:
                return True
            if now - self._running_seen.get(job_id, -self.recheck_s) < self.recheck_s:
                return False
        try:
            status = self.jobs.get(job_id)
        except JobNotFound:  # not a recorded job's item: the handler decides
            return False
        stopped = status.state.finished or status.cancel_requested
        with self._lock:
            if stopped:
                self._stopped.add(job_id)
                self._running_seen.pop(job_id, None)
            else:
                self._running_seen[job_id] = now
        return stopped

    def before_process(self, bus, delivery: Delivery) -> None:
        job_id = getattr(delivery.decode(), "job_id", None)
        if job_id and self._stopped_job(job_id):
            raise SkipMessage()

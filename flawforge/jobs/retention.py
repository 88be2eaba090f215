"""Deletes finished jobs and their blobs once they are older than the retention period (a job is ~100s of MB)."""
from __future__ import annotations

import logging
import threading

from flawforge.errors import FlawforgeError
from flawforge.jobs.store import JobNotFound, JobStore
from flawforge.runtime.platform import Platform

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 3600.0


def sweep_expired(platform: Platform) -> list[str]:
    """Deletes every expired job; returns their ids."""
    jobs = JobStore(platform.store)
    deleted = []
    for job_id in jobs.expired(platform.settings.job_retention_days):
        try:
            jobs.delete(job_id)
        except JobNotFound:
            continue  # another service's sweep took it
        deleted.append(job_id)
    if deleted:
        log.info("deleted %d jobs older than %g days", len(deleted), platform.settings.job_retention_days)
    return deleted


class RetentionSweeper:
    """Sweeps at start and then every SWEEP_INTERVAL_S on a thread, until stopped."""

    def __init__(self, platform: Platform, interval_s: float = SWEEP_INTERVAL_S):
        self.platform = platform
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-retention", daemon=True)

    def start(self) -> "RetentionSweeper":
        if self.platform.settings.job_retention_days > 0:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sweep_expired(self.platform)
            except FlawforgeError as exc:  # the store is down: try again next round
                log.warning("job retention sweep failed: %s", exc)
            except Exception:  # anything else, logged whole: the thread lives on and sweeps again next round
                log.exception("job retention sweep failed")
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

"""What a running pipeline sees: progress, cancellation, artifacts, and its platform."""
from __future__ import annotations

import json
import time
from typing import Iterable, Iterator

from flawforge.errors import Conflict, FlawforgeError
from flawforge.jobs.dead_letters import dead_item_prefix
from flawforge.jobs.store import JobStore
from flawforge.proto.jobs import Artifact
from flawforge.runtime.platform import Platform


class JobCancelled(Conflict):
    code = "job_cancelled"


def item_key(job_id: str, name: str) -> str:
    """Where a work item of a job stores its result."""
    return f"jobs/{job_id}/items/{name}"


class JobContext:
    def __init__(self, platform: Platform, job_id: str):
        self.platform = platform
        self.job_id = job_id
        self.jobs = JobStore(platform.store)
        self._last_progress = 0.0

    def progress(self, done: int, total: int | None = None, message: str = "", *, force: bool = False) -> None:
        # Progress is a blob write; a few updates a second is plenty.
        now = time.monotonic()
        if force or now - self._last_progress >= 0.5 or (total is not None and done >= total):
            self._last_progress = now
            self.jobs.set_progress(self.job_id, done, total, message)

    def check_cancelled(self) -> None:
        if self.jobs.get(self.job_id).cancel_requested:
            raise JobCancelled(f"job {self.job_id} was cancelled")

    def put_artifact(self, name: str, data: bytes) -> Artifact:
        return self.jobs.put_artifact(self.job_id, name, data)

    def put_artifact_chunks(self, name: str, chunks: Iterable[bytes]) -> Artifact:
        return self.jobs.put_artifact_chunks(self.job_id, name, chunks)

    def item_key(self, name: str) -> str:
        return item_key(self.job_id, name)

    def input_key(self, name: str) -> str:
        """Where the job keeps work items' inputs, the blobs their messages point to: with the job, in one
        folder (a folder per content hash would cost a store on local disk hundreds of folders a job)."""
        return f"jobs/{self.job_id}/inputs/{name}"

    def wait_for_items(self, names: list[str], *, poll_s: float = 0.05, timeout_s: float = 3600,
                       total: int | None = None, message: str = "") -> dict[str, bytes]:
        """Blocks until every named item result exists (see items_as_done)."""
        return dict(self.items_as_done(names, poll_s=poll_s, timeout_s=timeout_s, total=total, message=message))

    def items_as_done(self, names: list[str], *, poll_s: float = 0.05, timeout_s: float = 3600,
                      total: int | None = None, message: str = "") -> Iterator[tuple[str, bytes]]:
        """(name, result) of every named work item, as each result lands; reports progress and honours cancel.

        Fails at once when a work item of this job was dead-lettered: its result will never come.
        """
        pending = {self.item_key(name): name for name in names}
        done = 0
        deadline = time.monotonic() + timeout_s
        store = self.platform.store
        items_prefix = self.item_key("")
        while pending:
            # One listing per poll, not one lookup per pending item.
            for key in store.list(items_prefix):
                if key in pending:
                    done += 1
                    yield pending.pop(key), store.get(key)
            self.progress(done, total if total is not None else len(names), message)
            if not pending:
                break
            dead = next(iter(store.list(dead_item_prefix(self.job_id))), None)
            if dead is not None:
                record = json.loads(store.get(dead))
                raise FlawforgeError(f"a work item of job {self.job_id} failed for good on queue "
                                     f"{record['queue']}: {record['reason']}")
            self.check_cancelled()
            if time.monotonic() > deadline:
                raise FlawforgeError(f"timed out waiting for {len(pending)} work items of job {self.job_id}")
            time.sleep(poll_s)

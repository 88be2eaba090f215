"""What a running pipeline sees: progress, cancellation, artifacts, and its platform."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Iterable, Iterator, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from flawforge.bus import Bus
from flawforge.errors import Conflict, FlawforgeError
from flawforge.jobs.dead_letters import dead_item_prefix
from flawforge.jobs.polling import next_poll_s
from flawforge.jobs.store import JobStore
from flawforge.proto.base import Message, WorkUnit
from flawforge.proto.jobs import Artifact
from flawforge.runtime.platform import Platform


# How often a job whose work items stopped landing asks the broker whether anything consumes them.
CONSUMER_CHECK_S = 5.0

R = TypeVar("R", bound=BaseModel)


class JobCancelled(Conflict):
    code = "job_cancelled"


def missing_consumer(platform: Platform, queue: str, waited_s: float) -> str:
    """The message of a job that waited in vain for a consumer of the queue."""
    service = platform.queue_owner(queue)
    start = f"start the {service} service (flawforge serve {service})" if service else "no service consumes it"
    return f"nothing consumes queue {queue!r} after {waited_s:.0f} s: {start}"


def item_key(job_id: str, name: str) -> str:
    """Where a work item of a job stores its result."""
    return f"jobs/{job_id}/items/{name}"


class JobBus:
    """The bus as a job sees it: remembers the queues the job publishes to, so a job waiting for its work items
    can tell when nothing consumes them."""

    def __init__(self, bus: Bus):
        self._bus = bus
        self.queues: set[str] = set()

    def publish(self, queue: str, message) -> None:
        self.queues.add(queue)
        self._bus.publish(queue, message)

    def publish_many(self, queue: str, messages) -> None:
        self.queues.add(queue)
        self._bus.publish_many(queue, messages)

    def __getattr__(self, name: str):
        return getattr(self._bus, name)


class JobContext:
    def __init__(self, platform: Platform, job_id: str):
        self.bus = JobBus(platform.bus)
        self.platform = replace(platform, bus=self.bus)
        self.job_id = job_id
        self.jobs = JobStore(platform.store)
        self._last_progress = 0.0

    def progress(self, done: int, total: int | None = None, message: str = "", *, force: bool = False) -> None:
        # Progress is a blob write; a few updates a second is plenty.
        now = time.monotonic()
        if force or now - self._last_progress >= 0.5 or (total is not None and done >= total):
            self._last_progress = now
            self.jobs.set_progress(self.job_id, done, total, message)

    def _require_consumers(self, waited_s: float) -> None:
        for queue in sorted(self.bus.queues):
            if self.bus.consumer_count(queue) == 0:
                raise FlawforgeError(missing_consumer(self.platform, queue, waited_s))

    def check_cancelled(self) -> None:
        if self.jobs.get(self.job_id).cancel_requested:
            raise JobCancelled(f"job {self.job_id} was cancelled")

    def put_artifact(self, name: str, data: bytes) -> Artifact:
        return self.jobs.put_artifact(self.job_id, name, data)

    def put_artifact_chunks(self, name: str, chunks: Iterable[bytes]) -> Artifact:
        return self.jobs.put_artifact_chunks(self.job_id, name, chunks)

    def item_key(self, name: str) -> str:
        return item_key(self.job_id, name)

    def publish(self, unit: WorkUnit, message: Message) -> None:
        """Publishes a work item of this job on its unit's queue, declared before the job's first item on it."""
        unit.checked(message)
        if unit.queue not in self.bus.queues:
            self.bus.declare(unit.queue)
        self.bus.publish(unit.queue, message)

    def results_as_done(self, unit: WorkUnit[Message, R], names: list[str], *, message: str = "",
                        weights: Mapping[str, int] | None = None,
                        timeout_s: float = 3600) -> Iterator[tuple[str, R]]:
        """(name, result) of every named work item of the unit, as each result lands (see items_as_done); a
        stored result that is not the unit's result model fails the job, naming the item."""
        for name, stored in self.items_as_done(names, message=message, weights=weights, timeout_s=timeout_s):
            try:
                result = unit.result.model_validate_json(stored)
            except ValidationError as exc:
                raise FlawforgeError(f"work item {name} of job {self.job_id} stored a result that is not a "
                                     f"{unit.result.__name__}: {exc}") from None
            yield name, result

    def input_key(self, name: str) -> str:
        """Where the job keeps work items' inputs, the blobs their messages point to: with the job, in one
        folder (a folder per content hash would cost a store on local disk hundreds of folders a job)."""
        return f"jobs/{self.job_id}/inputs/{name}"

    def wait_for_items(self, names: list[str], *, poll_s: float = 0.05, timeout_s: float = 3600,
                       total: int | None = None, message: str = "") -> dict[str, bytes]:
        """Blocks until every named item result exists (see items_as_done)."""
        return dict(self.items_as_done(names, poll_s=poll_s, timeout_s=timeout_s, total=total, message=message))

    def items_as_done(self, names: list[str], *, poll_s: float = 0.05, timeout_s: float = 3600,
                      total: int | None = None, message: str = "",
                      weights: Mapping[str, int] | None = None) -> Iterator[tuple[str, bytes]]:
        """(name, result) of every named work item, as each result lands; reports progress and honours cancel.
        A work item counts for its weight in the progress (1 unless `weights` names it: a batch of problems
        counts its problems).

        Fails at once when a work item of this job was dead-lettered: its result will never come.
        """
        pending = {self.item_key(name): name for name in names}
        weights = weights or {}
        if total is None:
            total = sum(weights.get(name, 1) for name in names)
        done = 0
        deadline = time.monotonic() + timeout_s
        last_landed = next_consumer_check = time.monotonic()
        store = self.platform.store
        items_prefix = self.item_key("")
        while pending:
            # One listing per poll, not one lookup per pending item.
            for key in store.list(items_prefix):
                if key in pending:
                    name = pending.pop(key)
                    done += weights.get(name, 1)
                    last_landed = time.monotonic()
                    yield name, store.get(key)
            self.progress(done, total, message)
            if not pending:
                break
            dead = next(iter(store.list(dead_item_prefix(self.job_id))), None)
            if dead is not None:
                record = json.loads(store.get(dead))
                raise FlawforgeError(f"a work item of job {self.job_id} failed for good on queue "
                                     f"{record['queue']}: {record['reason']}")
            self.check_cancelled()
            now = time.monotonic()
            if now - last_landed >= self.platform.settings.consumer_timeout_s and now >= next_consumer_check:
                next_consumer_check = now + CONSUMER_CHECK_S
                self._require_consumers(now - last_landed)
            if time.monotonic() > deadline:
                raise FlawforgeError(f"timed out waiting for {len(pending)} work items of job {self.job_id}")
            time.sleep(next_poll_s(poll_s, time.monotonic() - last_landed))

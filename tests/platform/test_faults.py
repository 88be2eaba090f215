"""Faults on the real broker: a dead letter the blob store cannot record is still one dead letter, and the
queued work items of a failed job are acknowledged without being worked on."""
from __future__ import annotations

import threading
import time

import pytest

from flawforge.blobstore import LocalBlobStore
from flawforge.bus.base import Delivery
from flawforge.jobs.dead_letters import JobDeadLetters
from flawforge.jobs.finished import SkipWorkOfFinishedJobs
from flawforge.jobs.store import JobStore
from flawforge.proto.base import BlobRef
from flawforge.proto.jobs import JobState
from flawforge.proto.smoke import DigestRequested
from flawforge.settings import Settings

pytestmark = pytest.mark.rabbitmq

PAYLOAD = BlobRef(key="smoke/payloads/none", sha256="0" * 64, size=1)


def rabbit(amqp_url, store, **settings):
    from flawforge.bus import open_bus

    settings = Settings(bus="rabbitmq", amqp_url=amqp_url, max_attempts=2, retry_delays_ms=[50], prefetch=4,
                        **settings)
    return open_bus(settings, store, [JobDeadLetters(store), SkipWorkOfFinishedJobs(store, recheck_s=0.1)])


def consume_until(bus, queue, handler, settled, timeout=60):
    stop = threading.Event()
    thread = threading.Thread(target=bus.consume, args=(queue, handler, stop), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not settled():
            assert time.monotonic() < deadline, "the queue never settled"
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(30)


def test_a_dead_letter_the_store_cannot_record_is_not_multiplied(amqp_url, queue_name, tmp_path):
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    (root / "jobs").write_text("not a folder")  # every record under jobs/ fails: the store is broken for them
    with pytest.raises(OSError):
        store.put("jobs/x/dead/y.json", b"{}")
    bus = rabbit(amqp_url, store)
    bus.declare(queue_name)
    messages = [DigestRequested(job_id="job1", item=i, payload=PAYLOAD) for i in range(20)]
    bus.publish_many(queue_name, messages)
    calls = []

    def always_fails(message):
        calls.append(message.item)
        raise RuntimeError(f"cannot digest item {message.item}")

    try:
        consume_until(bus, queue_name, always_fails,
                      lambda: bus.depth(queue_name) == 0 and bus.depth(f"{queue_name}.dlq") >= 20
                      and bus.depth(f"{queue_name}.retry.0") == 0)
        time.sleep(1.0)  # a redelivered copy would be dead-lettered again by now
        dead = bus.dead_letters(queue_name)
        assert sorted(d.message_id for d in dead) == sorted(m.message_id for m in messages)
        assert all(d.error == f"RuntimeError: cannot digest item {d.decode().item}" for d in dead)
        assert len(calls) == 40  # two attempts each, no more
    finally:
        bus.delete(queue_name)
        bus.close()


def test_the_queued_work_items_of_a_failed_job_are_not_worked_on(amqp_url, queue_name, tmp_path):
    store = LocalBlobStore(tmp_path / "blobs")
    jobs = JobStore(store)
    failed, running = jobs.create("smoke", {}), jobs.create("smoke", {})
    jobs.update(failed.job_id, state=JobState.failed, error="a work item failed for good")
    jobs.update(running.job_id, state=JobState.running)
    bus = rabbit(amqp_url, store)
    bus.declare(queue_name)
    bus.publish_many(queue_name, [DigestRequested(job_id=failed.job_id, item=i, payload=PAYLOAD) for i in range(10)]
                     + [DigestRequested(job_id=running.job_id, item=i, payload=PAYLOAD) for i in range(3)])
    worked: list[tuple[str, int]] = []
    try:
        consume_until(bus, queue_name, lambda m: worked.append((m.job_id, m.item)),
                      lambda: len(worked) == 3 and bus.depth(queue_name) == 0)
        time.sleep(0.5)
        assert sorted(worked) == [(running.job_id, i) for i in range(3)]
        assert bus.depth(queue_name) == 0 and bus.dead_letters(queue_name) == []  # acknowledged, not failed

        # Cancelling the running job stops its items too (its state is read again after recheck_s).
        jobs.request_cancel(running.job_id)
        time.sleep(0.2)
        bus.publish(queue_name, DigestRequested(job_id=running.job_id, item=9, payload=PAYLOAD))
        consume_until(bus, queue_name, lambda m: worked.append((m.job_id, m.item)),
                      lambda: bus.depth(queue_name) == 0)
        time.sleep(0.5)
        assert (running.job_id, 9) not in worked
    finally:
        bus.delete(queue_name)
        bus.close()


def test_a_delivery_is_decoded_once():
    delivery = Delivery("q", "m1", DigestRequested(job_id="j", item=1, payload=PAYLOAD).model_dump_json().encode(),
                        {"x-flawforge-kind": DigestRequested.kind})
    assert delivery.decode() is delivery.decode()

"""The bus contract, run against both backends: the in-memory one and the real RabbitMQ."""
from __future__ import annotations

import threading
import time

import pytest

from flawforge.blobstore import LocalBlobStore
from flawforge.bus import MemoryBus
from flawforge.bus.base import ATTEMPT_HEADER, KIND_HEADER
from flawforge.bus.middleware import Idempotency, Retries
from flawforge.errors import BusUnavailable
from flawforge.proto.base import BlobRef
from flawforge.proto.smoke import DigestRequested
from polling import wait_until

DELAYS = [50, 100]


@pytest.fixture(params=["memory", "rabbitmq"])
def bus(request, tmp_path, queue_name):
    # as open_bus configures them: markers in memory for the in-memory bus, in the blob store for RabbitMQ
    markers = None if request.param == "memory" else LocalBlobStore(tmp_path / "blobs")
    middleware = [Retries(max_attempts=3, delays_ms=DELAYS), Idempotency(markers)]
    if request.param == "memory":
        instance = MemoryBus(middleware=middleware)
    else:
        from flawforge.bus.rabbitmq import RabbitMQBus

        instance = RabbitMQBus(request.getfixturevalue("amqp_url"), middleware=middleware, prefetch=4,
                               retry_delays_ms=DELAYS)
    instance.declare(queue_name)
    yield instance
    if request.param == "rabbitmq":
        instance.delete(queue_name)
    instance.close()


def _message(item: int = 0) -> DigestRequested:
    return DigestRequested(job_id="job", item=item, payload=BlobRef(key=f"k/{item}", sha256="0" * 64, size=1))


class Consuming:
    """Runs bus.consume on a thread until the test is done with it."""

    def __init__(self, bus, queue, handler):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=bus.consume, args=(queue, handler, self.stop), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def test_round_trip_keeps_type_and_fields(bus, queue_name):
    received = []
    sent = [_message(i) for i in range(20)]
    with Consuming(bus, queue_name, received.append):
        for message in sent:
            bus.publish(queue_name, message)
        assert wait_until(lambda: len(received) == 20)
    assert sorted(received, key=lambda m: m.item) == sent
    assert all(isinstance(m, DigestRequested) for m in received)


def test_failure_is_retried_with_attempt_count_then_succeeds(bus, queue_name):
    attempts = []

    def flaky(message):
        attempts.append(time.monotonic())
        if len(attempts) < 2:
            raise RuntimeError("transient")

    with Consuming(bus, queue_name, flaky):
        bus.publish(queue_name, _message())
        assert wait_until(lambda: len(attempts) == 2)
        time.sleep(0.3)
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] >= DELAYS[0] / 1000 * 0.9  # waited in the delay queue
    assert bus.dead_letters(queue_name) == []


def test_message_that_always_fails_ends_in_dead_letter_queue_with_reason(bus, queue_name):
    calls = []

    def broken(message):
        calls.append(message.item)
        raise ValueError(f"cannot handle item {message.item}")

    message = _message(7)
    with Consuming(bus, queue_name, broken):
        bus.publish(queue_name, message)
        assert wait_until(lambda: len(calls) == 3)
        dead = []
        assert wait_until(lambda: dead.extend(bus.dead_letters(queue_name)) or dead)
    assert len(calls) == 3  # max_attempts, no more
    assert len(dead) == 1
    assert dead[0].error == "ValueError: cannot handle item 7"
    assert dead[0].attempt == 3
    assert dead[0].decode() == message


def test_undecodable_message_is_dead_lettered_without_retries(bus, queue_name):
    calls = []
    with Consuming(bus, queue_name, calls.append):
        bus.publish_raw(queue_name, b"{not json", "bad-1", {KIND_HEADER: "smoke.digest_requested", ATTEMPT_HEADER: 1})
        bus.publish_raw(queue_name, b"{}", "bad-2", {KIND_HEADER: "no.such.kind", ATTEMPT_HEADER: 1})
        dead = []
        assert wait_until(lambda: dead.extend(bus.dead_letters(queue_name)) or len(dead) == 2)
    assert calls == []
    reasons = {d.message_id: d.error for d in dead}
    assert reasons["bad-1"].startswith("poison: invalid smoke.digest_requested")
    assert reasons["bad-2"] == "poison: unknown message kind 'no.such.kind'"


def test_consumer_is_idempotent_on_message_id(bus, queue_name):
    calls = []
    message = _message(3)
    with Consuming(bus, queue_name, calls.append):
        bus.publish(queue_name, message)
        assert wait_until(lambda: len(calls) == 1)
        bus.publish(queue_name, message)  # same message id: a duplicate delivery
        bus.publish(queue_name, _message(4))
        assert wait_until(lambda: len(calls) == 2)
        time.sleep(0.2)
    assert [m.item for m in calls] == [3, 4]


def test_publishing_to_an_undeclared_queue_raises(bus):
    with pytest.raises(BusUnavailable, match="nowhere.queue"):
        bus.publish("nowhere.queue", _message())


def test_depth_and_purge(bus, queue_name):
    for i in range(5):
        bus.publish(queue_name, _message(i))
    assert wait_until(lambda: bus.depth(queue_name) == 5)
    bus.purge(queue_name)
    assert bus.depth(queue_name) == 0


def test_publish_many_delivers_every_message_once(bus, queue_name):
    received = []
    sent = [_message(i) for i in range(250)]
    with Consuming(bus, queue_name, received.append):
        bus.publish_many(queue_name, sent)
        assert wait_until(lambda: len(received) == 250)
    assert sorted(m.item for m in received) == list(range(250))


def test_publish_many_to_an_undeclared_queue_raises(bus):
    with pytest.raises(BusUnavailable, match="nowhere.queue"):
        bus.publish_many("nowhere.queue", [_message(i) for i in range(3)])


def test_waiting_consumers_stop_when_woken_not_at_their_next_poll(queue_name):
    bus = MemoryBus()
    bus.poll_s = 60  # a consumer that were not woken would sleep past the join below
    bus.declare(queue_name)
    consuming = Consuming(bus, queue_name, lambda message: None).__enter__()
    assert wait_until(lambda: consuming.thread.is_alive())
    time.sleep(0.05)  # blocked waiting for a message
    consuming.stop.set()
    bus.wake_consumers()
    consuming.thread.join(5)
    assert not consuming.thread.is_alive()
    bus.close()

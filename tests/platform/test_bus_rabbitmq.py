"""RabbitMQ-only guarantees: crash redelivery, heartbeats during long work, broker down."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika
import pytest

from flawforge.blobstore import LocalBlobStore
from flawforge.bus.rabbitmq import RabbitMQBus
from flawforge.errors import BusUnavailable
from flawforge.proto.base import BlobRef
from flawforge.proto.smoke import DigestRequested
from polling import wait_until

WORKER = Path(__file__).with_name("crash_worker.py")


def _start_worker(amqp_url, queue, tmp_path, work_s):
    return subprocess.Popen([sys.executable, str(WORKER), amqp_url, queue, str(tmp_path / "blobs"), str(work_s)])


@pytest.fixture
def rabbit(amqp_url, queue_name):
    bus = RabbitMQBus(amqp_url, retry_delays_ms=[100])
    bus.declare(queue_name)
    yield bus
    bus.delete(queue_name)
    bus.close()


def test_worker_killed_mid_message_redelivers_and_the_effect_happens_once(amqp_url, queue_name, rabbit, tmp_path):
    store = LocalBlobStore(tmp_path / "blobs")
    message = DigestRequested(job_id="j", item=42, payload=BlobRef(key="p", sha256="0" * 64, size=1))
    rabbit.publish(queue_name, message)

    first = _start_worker(amqp_url, queue_name, tmp_path, work_s=60)
    second = None
    try:
        assert wait_until(lambda: (tmp_path / f"started-{first.pid}").exists(), timeout=20), \
            "first worker never got the message"
        os.kill(first.pid, signal.SIGKILL)  # mid-message: artifact stored, not yet acked
        first.wait()
        assert not store.exists(f"bus/processed/{queue_name}/{message.message_id}")

        second = _start_worker(amqp_url, queue_name, tmp_path, work_s=0)
        assert wait_until(lambda: (tmp_path / f"started-{second.pid}").exists(), timeout=20), \
            "message was not redelivered"
        assert wait_until(lambda: store.exists(f"bus/processed/{queue_name}/{message.message_id}"))
        # Acked once done: nothing left in the queue, nothing dead-lettered.
        assert wait_until(lambda: rabbit.depth(queue_name) == 0)
    finally:
        (tmp_path / "stop").touch()
        first.kill()
        if second is not None:
            second.wait(10)
    assert len(list(store.list("artifacts/"))) == 1  # redelivery rewrote the same content-addressed key
    handlers = sorted(store.get(k).decode().split(":")[0] for k in store.list("handled-by/"))
    assert handlers == sorted([str(first.pid), str(second.pid)])
    assert rabbit.dead_letters(queue_name) == []


def test_long_work_keeps_the_connection_alive_past_the_heartbeat_timeout(amqp_url, queue_name, rabbit, tmp_path):
    # Heartbeat 1 s: a connection whose thread blocked for 4 s would be closed by the broker
    # (after two missed heartbeats) and the message redelivered to a second run.
    store = LocalBlobStore(tmp_path / "blobs")
    message = DigestRequested(job_id="j", item=1, payload=BlobRef(key="p", sha256="0" * 64, size=1))
    rabbit.publish(queue_name, message)
    worker = _start_worker(amqp_url, queue_name, tmp_path, work_s=4)
    try:
        assert wait_until(lambda: store.exists(f"bus/processed/{queue_name}/{message.message_id}"), timeout=30)
        assert wait_until(lambda: rabbit.depth(queue_name) == 0)
        time.sleep(1.5)
    finally:
        (tmp_path / "stop").touch()
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
    assert len(list(store.list("handled-by/"))) == 1  # handled exactly once: no redelivery


def test_publishing_while_the_broker_is_down_raises_a_clear_error():
    with socket_free_port() as port:
        bus = RabbitMQBus(f"amqp://guest:guest@127.0.0.1:{port}/%2F")
        with pytest.raises(BusUnavailable, match=f"cannot reach RabbitMQ at 127.0.0.1:{port}"):
            bus.publish("anything", DigestRequested(job_id="j", item=0,
                                                    payload=BlobRef(key="p", sha256="0" * 64, size=1)))


def test_queues_are_durable_quorum_with_delivery_limit_and_dead_lettering(amqp_url, queue_name, rabbit):
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        ch = conn.channel()
        # Redeclaring with the same arguments succeeds; with other arguments the broker refuses,
        # which proves what the queue was declared with.
        ch.queue_declare(queue_name, durable=True, passive=False, arguments={
            "x-queue-type": "quorum", "x-delivery-limit": rabbit.delivery_limit,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue_name}.dlq"})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="PRECONDITION_FAILED"):
            ch.queue_declare(queue_name, durable=True, arguments={"x-queue-type": "classic"})
    finally:
        conn.close()


def test_stacks_with_different_queue_prefixes_share_a_broker_without_seeing_each_other(amqp_url, queue_name):
    one, two = (RabbitMQBus(amqp_url, retry_delays_ms=[100], prefix=f"{queue_name}.{name}.") for name in ("one", "two"))
    message = DigestRequested(job_id="j", item=1, payload=BlobRef(key="p", sha256="0" * 64, size=1))
    try:
        one.declare(queue_name)
        two.declare(queue_name)
        one.publish(queue_name, message)
        assert wait_until(lambda: one.depth(queue_name) == 1)
        assert two.depth(queue_name) == 0
        # On the broker the queue and its dead-letter queue carry the prefix; the bare name is free.
        conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
        try:
            ch = conn.channel()
            assert ch.queue_declare(f"{queue_name}.one.{queue_name}", passive=True).method.message_count == 1
            ch.queue_declare(f"{queue_name}.one.{queue_name}.dlq", passive=True)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
                ch.queue_declare(queue_name, passive=True)
        finally:
            conn.close()
    finally:
        for bus in (one, two):
            bus.delete(queue_name)
            bus.close()


class socket_free_port:
    """A local port with nothing listening on it."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc):
        self.sock.close()

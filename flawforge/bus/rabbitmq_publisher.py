"""A publisher that pipelines confirms: one connection on its own I/O thread.

Blocking pika waits for each confirm before the next publish, which caps a publisher at
one broker round trip (a Raft commit on quorum queues) per message. Here any number of
threads hand batches to one asynchronous connection; each caller still returns only once
the broker has confirmed every message it published, or raises.
"""
from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future, TimeoutError as FutureTimeout

import pika
from pika.adapters.select_connection import SelectConnection

from flawforge.errors import BusUnavailable


class ConfirmingPublisher:
    def __init__(self, params: pika.ConnectionParameters, confirm_timeout_s: float = 30.0):
        self.params = params
        self.confirm_timeout_s = confirm_timeout_s
        self._lock = threading.Lock()
        self._conn: SelectConnection | None = None
        self._channel = None
        self._thread: threading.Thread | None = None
        self._tag = 0
        self._pending: dict[int, Future] = {}
        self._by_message_id: dict[str, Future] = {}

    # --- connection lifecycle (all callbacks run on the I/O thread) -----------------------
    def _ensure_open(self) -> None:
        with self._lock:
            if self._channel is not None and self._channel.is_open:
                return
            ready: Future = Future()

            def on_channel_open(channel):
                self._channel = channel
                channel.add_on_return_callback(self._on_return)
                channel.add_on_close_callback(lambda ch, reason: self._fail_all(reason))
                channel.confirm_delivery(self._on_confirm, callback=lambda _frame: ready.set_result(None))

            def on_open(conn):
                conn.channel(on_open_callback=on_channel_open)

            def on_open_error(conn, err):
                if not ready.done():
                    ready.set_exception(BusUnavailable(
                        f"cannot reach RabbitMQ at {self.params.host}:{self.params.port}: {type(err).__name__} {err}"))

            def on_closed(conn, reason):
                self._fail_all(reason)
                if not ready.done():
                    ready.set_exception(BusUnavailable(f"RabbitMQ closed the connection: {reason}"))
                conn.ioloop.stop()

            self._tag = 0
            conn = SelectConnection(self.params, on_open_callback=on_open, on_open_error_callback=on_open_error,
                                    on_close_callback=on_closed)
            thread = threading.Thread(target=conn.ioloop.start, name="amqp-publisher", daemon=True)
            thread.start()
            try:
                ready.result(timeout=max(self.params.socket_timeout or 10, 10))
            except FutureTimeout:
                conn.ioloop.add_callback_threadsafe(conn.ioloop.stop)
                raise BusUnavailable(f"RabbitMQ at {self.params.host}:{self.params.port} did not answer") from None
            except BusUnavailable:
                thread.join(5)
                raise
            self._conn, self._thread = conn, thread

    def _fail_all(self, reason) -> None:
        pending, self._pending, self._by_message_id = self._pending, {}, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(BusUnavailable(f"RabbitMQ connection lost before confirming: {reason}"))
        self._channel = None

    def _on_confirm(self, frame) -> None:
        method = frame.method
        acked = isinstance(method, pika.spec.Basic.Ack)
        if method.multiple:  # tags are issued in increasing order, so pending is sorted
            tags = list(itertools.takewhile(lambda t: t <= method.delivery_tag, self._pending))
        else:
            tags = [method.delivery_tag]
        for tag in tags:
            future = self._pending.pop(tag, None)
            if future is None or future.done():
                continue
            if acked:
                future.set_result(None)
            else:
                future.set_exception(BusUnavailable("RabbitMQ refused (nacked) a message"))

    def _on_return(self, channel, method, props, body) -> None:
        # A mandatory message no queue took comes back before its (positive) confirm.
        future = self._by_message_id.pop(props.message_id, None)
        if future is not None and not future.done():
            future.set_exception(BusUnavailable(
                f"RabbitMQ could not route a message to queue {method.routing_key!r} (not declared?)"))

    def _send(self, batch, futures) -> None:
        for (queue, body, props), future in zip(batch, futures):
            if self._channel is None or not self._channel.is_open:
                future.set_exception(BusUnavailable("RabbitMQ channel closed"))
                continue
            self._tag += 1
            self._pending[self._tag] = future
            self._by_message_id[props.message_id] = future
            self._channel.basic_publish("", queue, body, props, mandatory=True)

    # --- public -------------------------------------------------------------------------
    def publish_batch(self, batch: list[tuple[str, bytes, pika.BasicProperties]]) -> None:
        """Publishes every (queue, body, properties) and returns once all are confirmed."""
        self._ensure_open()
        futures = [Future() for _ in batch]
        self._conn.ioloop.add_callback_threadsafe(lambda: self._send(batch, futures))
        try:
            for future in futures:
                future.result(timeout=self.confirm_timeout_s)
        except FutureTimeout:
            raise BusUnavailable(f"RabbitMQ did not confirm within {self.confirm_timeout_s} s") from None
        finally:
            for (_, _, props) in batch:
                self._by_message_id.pop(props.message_id, None)

    def close(self) -> None:
        with self._lock:
            conn, thread = self._conn, self._thread
            self._conn = self._thread = self._channel = None
        if conn is not None:
            conn.ioloop.add_callback_threadsafe(lambda: conn.close() if conn.is_open else conn.ioloop.stop())
            thread.join(5)

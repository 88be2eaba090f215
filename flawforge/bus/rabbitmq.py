"""RabbitMQ bus over pika.

Topology per logical queue `q`:
  q            quorum queue, x-delivery-limit (a message that keeps killing its consumer
               is dead-lettered by the broker), dead-letters to q.dlq
  q.retry.<i>  one quorum queue per retry delay; x-message-ttl, dead-letters back to q
  q.dlq        quorum queue of failures; each keeps the reason in x-flawforge-error
Publishing uses publisher confirms with `mandatory` (pipelined, see
rabbitmq_publisher), so an unroutable or refused message raises instead of vanishing. Handlers run on worker threads while the
connection thread keeps serving heartbeats; acks go back through
`add_callback_threadsafe`, only after the work (or its retry copy) is stored.
Every name on the broker carries the bus's prefix (FLAWFORGE_QUEUE_PREFIX), so stacks with
different prefixes share one broker; callers and deliveries use the names without it.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pika
from pika.exceptions import AMQPError, ChannelClosedByBroker

from flawforge.bus.base import ATTEMPT_HEADER, KIND_HEADER, Bus, Delivery, Handler, dead_letter_headers, retry_headers
from flawforge.bus.rabbitmq_publisher import ConfirmingPublisher
from flawforge.errors import BusUnavailable

log = logging.getLogger(__name__)


def _retry_queue(queue: str, index: int) -> str:
    return f"{queue}.retry.{index}"


def _dlq(queue: str) -> str:
    return f"{queue}.dlq"


def _all_queues(queue: str, retry_count: int) -> list[str]:
    return [queue, _dlq(queue)] + [_retry_queue(queue, i) for i in range(retry_count)]


class RabbitMQBus(Bus):
    def __init__(self, url: str, middleware=None, *, heartbeat: int = 30, prefetch: int = 4,
                 delivery_limit: int = 5, retry_delays_ms=(200, 1000, 5000), prefix: str = ""):
        super().__init__(middleware)
        self.prefix = prefix
        self.params = pika.URLParameters(url)
        self.params.heartbeat = heartbeat
        self.params.blocked_connection_timeout = 30
        self.params.connection_attempts = 1
        self.params.socket_timeout = 5
        self.prefetch = prefetch
        self.delivery_limit = delivery_limit
        self.retry_delays_ms = list(retry_delays_ms)
        self._publisher = ConfirmingPublisher(self.params)
        self._local = threading.local()  # one admin connection per thread: pika is not thread-safe
        self._connections: list[pika.BlockingConnection] = []
        self._lock = threading.Lock()
        self._declared: set[str] = set()

    # --- connections --------------------------------------------------------------------
    def _connect(self) -> pika.BlockingConnection:
        try:
            conn = pika.BlockingConnection(self.params)
        except AMQPError as exc:
            raise BusUnavailable(f"cannot reach RabbitMQ at {self.params.host}:{self.params.port}: "
                                 f"{type(exc).__name__} {exc}".strip()) from exc
        with self._lock:
            self._connections.append(conn)
        return conn

    def _channel(self):
        ch = getattr(self._local, "channel", None)
        if ch is None or ch.is_closed or ch.connection.is_closed:
            conn = self._connect()
            ch = conn.channel()
            self._local.channel = ch
        return ch

    def _with_channel(self, action):
        """Runs `action(channel)`, reconnecting once if an idle connection was dropped."""
        for attempt in (1, 2):
            ch = self._channel()
            try:
                return action(ch)
            except AMQPError as exc:
                self._local.channel = None
                if attempt == 2:
                    raise BusUnavailable(f"RabbitMQ connection failed: {type(exc).__name__} {exc}") from exc

    def ping(self) -> None:
        self._with_channel(lambda ch: None)

    # --- topology -----------------------------------------------------------------------
    def declare(self, queue: str) -> None:
        if queue in self._declared:
            return
        name = self.prefix + queue

        def declare_all(ch):
            ch.queue_declare(_dlq(name), durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_declare(name, durable=True, arguments={
                "x-queue-type": "quorum",
                "x-delivery-limit": self.delivery_limit,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": _dlq(name),
            })
            for i, delay in enumerate(self.retry_delays_ms):
                ch.queue_declare(_retry_queue(name, i), durable=True, arguments={
                    "x-queue-type": "quorum",
                    "x-message-ttl": int(delay),
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": name,
                })

        self._with_channel(declare_all)
        self._declared.add(queue)

    # --- publishing ---------------------------------------------------------------------
    @staticmethod
    def _properties(message_id: str, headers: dict) -> pika.BasicProperties:
        return pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent, message_id=message_id,
                                    headers=headers, content_type="application/json")

    def publish_raw(self, queue: str, body: bytes, message_id: str, headers: dict) -> None:
        self._publisher.publish_batch([(self.prefix + queue, body, self._properties(message_id, headers))])

    def publish_many(self, queue: str, messages) -> None:
        # One batch: the broker's confirms overlap instead of costing a round trip each.
        self._publisher.publish_batch([
            (self.prefix + queue, m.model_dump_json().encode(),
             self._properties(m.message_id, {KIND_HEADER: m.kind, ATTEMPT_HEADER: 1}))
            for m in messages])

    def retry_later(self, delivery: Delivery, delay_ms: int, reason: str) -> None:
        # The configured delay for this attempt picks its TTL queue; the nearest one that is
        # not shorter keeps the contract "at least delay_ms".
        index = next((i for i, d in enumerate(self.retry_delays_ms) if d >= delay_ms), len(self.retry_delays_ms) - 1)
        self.publish_raw(_retry_queue(delivery.queue, index), delivery.body, delivery.message_id,
                         retry_headers(delivery, reason))

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self.publish_raw(_dlq(delivery.queue), delivery.body, delivery.message_id,
                         dead_letter_headers(delivery, reason))

    # --- consuming ----------------------------------------------------------------------
    def consume(self, queue: str, handler: Handler, stop: threading.Event) -> None:
        self.declare(queue)
        conn = self._connect()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=self.prefetch)
        pool = ThreadPoolExecutor(max_workers=self.prefetch, thread_name_prefix=f"worker-{queue}")

        def ack(tag: int) -> None:
            if ch.is_open:
                ch.basic_ack(tag)

        def work(delivery: Delivery, tag: int) -> None:
            try:
                self.process(delivery, handler)
            except Exception:
                # Storing the retry copy or dead letter failed: leave it unacked for redelivery.
                log.exception("could not finish %s from %s; it will be redelivered", delivery.message_id, queue)
                conn.add_callback_threadsafe(lambda: ch.basic_nack(tag, requeue=True) if ch.is_open else None)
                return
            conn.add_callback_threadsafe(lambda: ack(tag))

        def on_message(_ch, method, props, body):
            headers = dict(props.headers or {})
            # x-delivery-count is set by quorum queues on redelivery after a crash.
            delivery = Delivery(queue, props.message_id or "", body, headers)
            pool.submit(work, delivery, method.delivery_tag)

        ch.basic_consume(self.prefix + queue, on_message, auto_ack=False)
        try:
            while not stop.is_set():
                conn.process_data_events(time_limit=0.1)
        except AMQPError as exc:
            raise BusUnavailable(f"lost RabbitMQ while consuming {queue!r}: {exc}") from exc
        finally:
            pool.shutdown(wait=True)
            try:
                conn.process_data_events(time_limit=0)  # flush acks of finished work
                conn.close()
            except AMQPError:
                pass

    # --- inspection ---------------------------------------------------------------------
    def dead_letters(self, queue: str) -> list[Delivery]:
        def drain(ch):
            out = []
            while True:
                method, props, body = ch.basic_get(self.prefix + _dlq(queue), auto_ack=True)
                if method is None:
                    return out
                headers = dict(props.headers or {})
                if "x-flawforge-error" not in headers:
                    # Dead-lettered by the broker itself (delivery limit): keep its reason.
                    headers["x-flawforge-error"] = f"broker: {headers.get('x-first-death-reason', 'dead-lettered')}"
                out.append(Delivery(queue, props.message_id or "", body, headers))

        return self._with_channel(drain)

    def depth(self, queue: str) -> int:
        return self._with_channel(lambda ch: ch.queue_declare(self.prefix + queue, passive=True).method.message_count)

    def consumer_count(self, queue: str) -> int:
        def count(ch) -> int:
            try:
                return ch.queue_declare(self.prefix + queue, passive=True).method.consumer_count
            except ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                self._local.channel = None  # the broker closed it: a queue nobody declared has no consumer
                return 0

        return self._with_channel(count)

    def purge(self, queue: str) -> None:
        def purge_all(ch):
            for name in _all_queues(self.prefix + queue, len(self.retry_delays_ms)):
                ch.queue_purge(name)

        self._with_channel(purge_all)

    def delete(self, queue: str) -> None:
        """Removes the queue and its companions (tests and tear-down)."""
        def delete_all(ch):
            for name in _all_queues(self.prefix + queue, len(self.retry_delays_ms)):
                ch.queue_delete(name)

        self._with_channel(delete_all)
        self._declared.discard(queue)

    def close(self) -> None:
        self._publisher.close()
        with self._lock:
            conns, self._connections = self._connections, []
        for conn in conns:
            try:
                if conn.is_open:
                    conn.close()
            except AMQPError:
                pass

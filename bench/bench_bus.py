"""Bus round-trip throughput with publisher confirms, 1 KiB payloads: RabbitMQ beside in-memory.

Round trip: published (confirmed by the broker), delivered, handled, acknowledged.
Target: at least 2,000 messages/s on RabbitMQ on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

from flawforge.bus import MemoryBus
from flawforge.bus.rabbitmq import RabbitMQBus
from flawforge.proto.ops import Echo

TARGET_RABBITMQ = 2000


def round_trip(bus, queue: str, count: int, publishers: int, batch: int) -> float:
    bus.declare(queue)
    bus.purge(queue)
    payload = "x" * 1024
    done = threading.Event()
    received = 0
    lock = threading.Lock()

    def handle(message: Echo) -> None:
        nonlocal received
        with lock:
            received += 1
            if received == count:
                done.set()

    stop = threading.Event()
    consumer = threading.Thread(target=bus.consume, args=(queue, handle, stop), daemon=True)
    consumer.start()

    def publish(share: int) -> None:
        for start in range(0, share, batch):
            bus.publish_many(queue, [Echo(payload=payload) for _ in range(min(batch, share - start))])

    start = time.perf_counter()
    threads = [threading.Thread(target=publish, args=(count // publishers,)) for _ in range(publishers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not done.wait(120):
        raise SystemExit(f"only {received}/{count} messages came back")
    elapsed = time.perf_counter() - start
    stop.set()
    consumer.join(10)
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=64)
    parser.add_argument("--batch", type=int, default=100, help="messages per confirmed publish_many call")
    parser.add_argument("--amqp-url", default=os.environ.get("FLAWFORGE_AMQP_URL",
                                                             "amqp://guest:guest@127.0.0.1:5672/%2F"))
    args = parser.parse_args()
    count = args.count - args.count % args.publishers

    memory_rate = round_trip(MemoryBus(), "bench.echo", count, args.publishers, args.batch)
    rabbit = RabbitMQBus(args.amqp_url, prefetch=args.prefetch)
    queue = f"bench.echo.{uuid.uuid4().hex[:8]}"
    try:
        rabbit_rate = round_trip(rabbit, queue, count, args.publishers, args.batch)
    finally:
        rabbit.delete(queue)
        rabbit.close()

    print(f"messages: {count} x 1 KiB, publishers: {args.publishers}, batch: {args.batch}, prefetch: {args.prefetch}")
    print(f"in-memory  round trip: {memory_rate:10.0f} msg/s (baseline)")
    print(f"RabbitMQ   round trip: {rabbit_rate:10.0f} msg/s (confirms, persistent, quorum queue)")
    print(f"ratio RabbitMQ / in-memory: {rabbit_rate / memory_rate:.3f}")
    verdict = "meets" if rabbit_rate >= TARGET_RABBITMQ else "MISSES"
    print(f"target >= {TARGET_RABBITMQ} msg/s on RabbitMQ: {verdict}")


if __name__ == "__main__":
    main()

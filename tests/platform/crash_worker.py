"""A worker process for the crash tests: stores a content-addressed artifact, then works slowly.

Run as: python crash_worker.py AMQP_URL QUEUE BLOB_DIR WORK_SECONDS
It writes BLOB_DIR/../started-<pid> once the artifact is stored, so the test knows when to kill it.
"""
import os
import sys
import threading
import time
from pathlib import Path

from flawforge.blobstore import LocalBlobStore
from flawforge.bus.middleware import Idempotency, Retries
from flawforge.bus.rabbitmq import RabbitMQBus


def main() -> None:
    url, queue, blob_dir, work_s = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
    store = LocalBlobStore(blob_dir)
    bus = RabbitMQBus(url, middleware=[Retries(3, [100]), Idempotency(store)], heartbeat=1, prefetch=1,
                      retry_delays_ms=[100])

    def handle(message):
        store.put_content("artifacts", f"digest of item {message.item}".encode())
        store.put_content("handled-by", f"{os.getpid()}:{time.time_ns()}".encode())
        (blob_dir.parent / f"started-{os.getpid()}").touch()
        time.sleep(work_s)  # long work: heartbeats must keep flowing meanwhile

    stop = threading.Event()
    threading.Thread(target=bus.consume, args=(queue, handle, stop), daemon=True).start()
    while not (blob_dir.parent / "stop").exists():
        time.sleep(0.05)
    stop.set()
    time.sleep(0.5)
    bus.close()


if __name__ == "__main__":
    main()

"""Waiting for asynchronous effects in tests, without fixed sleeps."""
from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())

"""Waiting for asynchronous effects in tests, without fixed sleeps."""
from __future__ import annotations

import subprocess
import time

import httpx


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def wait_until_answers(url: str, server: subprocess.Popen, timeout: float = 30.0) -> None:
    """Waits until GET `url` answers 200; fails with the server's stderr if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert server.poll() is None, server.stderr.read()
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)

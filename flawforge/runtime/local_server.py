"""A service's app served from this process on a free loopback port: how an embedded run reaches a
model when no provider is configured (the local inference-server, with a token made for the run)."""
from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import httpx

from flawforge.errors import FlawforgeError
from flawforge.runtime.platform import Platform
from flawforge.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

KEY_ENV = "FLAWFORGE_LOCAL_SERVER_KEY"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_service(service: str, settings: Settings, ready_path: str,
                  assemble: Callable[[str, Settings], tuple["FastAPI", Platform]], timeout_s: float = 600
                  ) -> Iterator[str]:
    """Runs `service` (HTTP API and its workers, as `assemble` builds them: flawforge.assembly.served_app) until
    the block ends; yields its base URL once `ready_path` answers 200. Its bearer token is in the environment
    variable KEY_ENV for the block's callers."""
    import uvicorn

    token = secrets.token_urlsafe(24)
    settings = settings.model_copy(update={"service": service, "api_tokens": f"local:{token}"})
    port = free_port()
    app, platform = assemble(service, settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"local-{service}", daemon=True)
    previous = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = token
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(base + ready_path, headers={"Authorization": f"Bearer {token}"}, timeout=5).is_success:
                    break
            except httpx.HTTPError:
                pass
            if not thread.is_alive() or time.monotonic() > deadline:
                raise FlawforgeError(f"the local {service} did not start on port {port} within {timeout_s:.0f} s")
            time.sleep(0.2)
        yield base
    finally:
        server.should_exit = True
        thread.join(60)
        platform.close()
        if previous is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = previous

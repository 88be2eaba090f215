"""`flawforge serve all`: every service as its own process on this machine, on RabbitMQ, without Docker.

Each service runs `flawforge serve <name>` (its HTTP API and queue workers), so the local stack behaves as
the compose and k8s ones do; they share the broker (FLAWFORGE_AMQP_URL, FLAWFORGE_QUEUE_PREFIX) and the
blob store (a local folder by default, or FLAWFORGE_S3_*). Their output is shown prefixed with the
service's name; Ctrl-C or SIGTERM stops them all, as does one of them exiting.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from flawforge.errors import BusUnavailable, ConfigError, FlawforgeError
from flawforge.runtime.auth import Authenticator
from flawforge.settings import Settings

STOP_GRACE_S = 10.0
HEALTH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LocalService:
    name: str
    port: int
    env: dict[str, str]

    def url(self, host: str) -> str:
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{self.port}"


def plan(services: list[str], own_ports: dict[str, int], port_offset: int, environ: dict[str, str]
         ) -> list[LocalService]:
    """The processes to start and the environment of each, from this process's environment; `own_ports` has
    every service's own port."""
    settings = Settings()
    Authenticator(settings)  # no tokens and authentication not disabled: say so before starting six processes
    if environ.get("FLAWFORGE_BUS", "rabbitmq") != "rabbitmq":
        raise ConfigError("FLAWFORGE_BUS: the local stack runs its services as processes, which share RabbitMQ "
                          "(unset it or set it to rabbitmq)")
    base = {k: v for k, v in environ.items() if k not in ("FLAWFORGE_HTTP_PORT", "FLAWFORGE_SERVICE")}
    base["FLAWFORGE_BUS"] = "rabbitmq"
    if settings.blob_backend == "local":  # one folder for every process, wherever each one starts
        base["FLAWFORGE_BLOB_DIR"] = str(Path(settings.blob_dir).resolve())
    ports = {name: port + port_offset for name, port in own_ports.items()}
    bad = [p for p in ports.values() if not 0 < p < 65536]
    if bad:
        raise ConfigError(f"--port-offset {port_offset} puts service ports outside 1-65535: {bad}")
    planned = []
    for name in services:
        env = dict(base)
        if name == "llm-gateway" and "FLAWFORGE_LLM_PROVIDERS" not in environ:
            # The default provider is the local inference-server: at its port in this stack.
            env["FLAWFORGE_LLM_PROVIDERS"] = json.dumps({"local": {
                "base_url": f"http://127.0.0.1:{ports['inference-server']}/v1", "api_key_env": "FLAWFORGE_TOKEN"}})
        planned.append(LocalService(name, ports[name], env))
    return planned


def require_broker(settings: Settings) -> None:
    """Every service opens the broker as it starts: one that cannot be reached is said once, here, rather than in
    each service's traceback."""
    import logging
    import socket

    from flawforge.bus.rabbitmq import RabbitMQBus

    bus = RabbitMQBus(settings.amqp_url, prefix=settings.queue_prefix)
    where = f"RabbitMQ at {bus.params.host}:{bus.params.port}"
    pika_log = logging.getLogger("pika")
    level = pika_log.level
    pika_log.setLevel(logging.CRITICAL)  # it logs each failed attempt, traceback and all; the reason comes below
    try:
        socket.create_connection((bus.params.host, bus.params.port), timeout=5).close()
        bus.ping()  # the broker answers; this also proves the credentials and virtual host
    except OSError as exc:
        raise BusUnavailable(f"cannot reach {where} ({exc.strerror or exc}); no service started "
                             "(FLAWFORGE_AMQP_URL names the broker)") from None
    except BusUnavailable as exc:
        raise BusUnavailable(f"{exc}; no service started (FLAWFORGE_AMQP_URL names the broker)") from None
    finally:
        bus.close()
        pika_log.setLevel(level)


def _relay(name: str, stream, width: int) -> None:
    for line in iter(stream.readline, ""):
        sys.stderr.write(f"{name:<{width}} | {line}")
    stream.close()


def _wait_healthy(service: LocalService, host: str, process: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise FlawforgeError(f"{service.name} exited with code {process.returncode} while starting "
                                 f"(its output is above)")
        try:
            if httpx.get(f"{service.url(host)}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise FlawforgeError(f"{service.name} did not answer {service.url(host)}/healthz within {HEALTH_TIMEOUT_S:.0f} s")


def _stop(processes: dict[str, subprocess.Popen]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes.values():
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _interrupt(signum, frame) -> None:
    """SIGTERM (a supervisor, `kill`) stops the stack as Ctrl-C does."""
    raise KeyboardInterrupt


def serve_all(services: list[str], own_ports: dict[str, int], port_offset: int, host: str) -> None:
    """Starts the services, reports their URLs once each answers, and supervises them until stopped."""
    planned = plan(services, own_ports, port_offset, dict(os.environ))
    require_broker(Settings())
    width = max(len(s.name) for s in planned)
    processes: dict[str, subprocess.Popen] = {}
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        for service in planned:
            processes[service.name] = process = subprocess.Popen(
                [sys.executable, "-m", "flawforge.cli.entry", "serve", service.name, "--port", str(service.port),
                 "--host", host], env=service.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)  # Ctrl-C reaches the stack, which stops its services in order
            threading.Thread(target=_relay, args=(service.name, process.stdout, width), daemon=True).start()
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        for service in planned:
            _wait_healthy(service, host, processes[service.name], deadline)
        print("\n".join(f"{s.name:<{width}}  {s.url(host)}" for s in planned), flush=True)
        print(f"stack up: {len(planned)} services on queue prefix {Settings().queue_prefix!r}; Ctrl-C stops it",
              file=sys.stderr, flush=True)
        while True:
            for name, process in processes.items():
                if process.poll() is not None:
                    raise FlawforgeError(f"{name} exited with code {process.returncode}; the stack stopped")
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping the stack", file=sys.stderr, flush=True)
    finally:
        _stop(processes)
        signal.signal(signal.SIGTERM, previous)

"""Sandboxed template executions per second, beside the naive baseline, in one run.

Sandboxed: every real formalization template traced by flawforge.sandbox (fork server,
namespaces, limits, full typed trace). Naive baseline: one fresh `python -c` process per
template that just calls solve() (no isolation, no trace), with the same concurrency.
The two alternate in rounds, so both see the same load from whatever else runs.

Reported: wall-clock rates (what a caller gets now) and CPU time per execution (all
processes involved: service, zygote, units / the python -c processes), whose ratio does
not depend on the machine's load.
Targets: at least 500 sandboxed executions/s on a 2-core machine, and at least 20x the baseline.

HTTP path: the trace-executor served as on a stack (`flawforge serve trace-executor`, its own
process, bearer token), called by 16 concurrent clients: executions/s through POST
/sandbox/batch (a template and its next 63 as variants per request) and through single POST
/sandbox/exec requests, with p50/p99 request latency, beside the in-process rate of the same
run. Targets on an idle machine: /sandbox/batch >= 1,000 executions/s, /sandbox/exec p99 <
150 ms; the in-process rate within 20% of the 1,294/s measured before the sandbox's hardening.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from flawforge.sandbox import Sandbox, SandboxLimits

TARGET_RATE = 500
TARGET_RATIO = 20
TARGET_HTTP_BATCH_RATE = 1000
TARGET_HTTP_EXEC_P99_MS = 150
IN_PROCESS_BEFORE_HARDENING = 1294  # CPU-bound executions/s on 2 idle cores, measured on the code before the hardening
ALLOWED_HARDENING_COST = 0.20
HTTP_CONCURRENCY = 16
BATCH_PROGRAMS = 64
TOKEN = "bench-token"
DEFAULT_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float:
    """CPU seconds of one process itself (not its children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def reaped_cpu(pid: int) -> float:
    """CPU seconds of the children a process has waited for (the zygote's units), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / TICK


def descendants(pid: int, depth: int) -> list[int]:
    """The process and its children, `depth` generations down, from /proc."""
    children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()] if depth else []
    return [pid] + [d for child in children for d in descendants(child, depth - 1)]


def zygote_pids(sandbox: Sandbox) -> list[int]:
    """The zygote, and its PID-namespace init if it has one."""
    return descendants(sandbox.zygote_pid(), 1)


def self_cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class Sandboxed:
    def __init__(self, workers: int, chunk: int):
        self.sandbox = Sandbox.from_settings(limits=SandboxLimits(timeout_s=5), in_process=True,
                                             **({"workers": workers} if workers else {}))
        self.chunk = chunk
        self.wall = self.cpu = 0.0
        self.count = 0
        self.outcomes: dict[str, int] = {}

    def run(self, sources: list[str]) -> None:
        pids = zygote_pids(self.sandbox)

        def processes_cpu() -> float:  # service, zygote and the units it reaped (a batch's whole unit)
            return sum(own_cpu(p) + reaped_cpu(p) for p in pids) + self_cpu(resource.RUSAGE_SELF)

        before = processes_cpu()
        start = time.perf_counter()
        for first in range(0, len(sources), self.chunk):
            part = sources[first:first + self.chunk]
            for result in self.sandbox.trace_batch(part[0], part[1:]):
                self.outcomes[result.outcome] = self.outcomes.get(result.outcome, 0) + 1
        self.wall += time.perf_counter() - start
        self.cpu += processes_cpu() - before
        self.count += len(sources)


class Naive:
    def __init__(self, workers: int):
        self.pool = ThreadPoolExecutor(workers)
        self.wall = self.cpu = 0.0
        self.count = 0

    @staticmethod
    def _one(source: str) -> int:
        return subprocess.run([sys.executable, "-c", source + "\nprint(repr(solve()))\n"], capture_output=True,
                              timeout=60).returncode

    def run(self, sources: list[str]) -> None:
        before = self_cpu(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        list(self.pool.map(self._one, sources))
        self.wall += time.perf_counter() - start
        self.cpu += self_cpu(resource.RUSAGE_CHILDREN) - before
        self.count += len(sources)


class Served:
    """The trace-executor as on a stack: `flawforge serve trace-executor` in a process of its own."""

    def __init__(self, workers: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.blobs = tempfile.TemporaryDirectory(prefix="bench-sandbox-")
        env = {**os.environ, "FLAWFORGE_API_TOKENS": f"bench:{TOKEN}", "FLAWFORGE_BUS": "memory",
               "FLAWFORGE_BLOB_BACKEND": "local", "FLAWFORGE_BLOB_DIR": self.blobs.name, "FLAWFORGE_RUN_WORKER": "false",
               "FLAWFORGE_HTTP_HOST": "127.0.0.1", "FLAWFORGE_HTTP_PORT": str(self.port)}
        if workers:
            env["FLAWFORGE_SANDBOX_WORKERS"] = str(workers)
        env.pop("FLAWFORGE_SANDBOX_URL", None)
        self.process = subprocess.Popen([sys.executable, "-m", "flawforge.cli.entry", "serve", "trace-executor"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120,
                                   headers={"Authorization": f"Bearer {TOKEN}"},
                                   limits=httpx.Limits(max_connections=HTTP_CONCURRENCY))
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.client.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit("the trace-executor did not become ready")
            time.sleep(0.2)

    def processes_cpu(self) -> float:
        """CPU seconds of the service, its zygote and the units it reaped, and of this client."""
        return sum(own_cpu(p) + reaped_cpu(p) for p in descendants(self.process.pid, 2)) + self_cpu(resource.RUSAGE_SELF)

    def measure(self, path: str, bodies: list[dict], programs_each: list[int]) -> tuple[float, float, float, float]:
        """Executions per second, p50 and p99 request latency (ms), at HTTP_CONCURRENCY requests at once, and
        the CPU milliseconds per execution of every process involved (client included)."""
        encoded = [json.dumps(body).encode() for body in bodies]  # a caller's own encoding is not the service's cost

        def one(body: bytes) -> float:
            start = time.perf_counter()
            response = self.client.post(path, content=body, headers={"Content-Type": "application/json"})
            response.raise_for_status()
            return time.perf_counter() - start

        cpu, start = self.processes_cpu(), time.perf_counter()
        with ThreadPoolExecutor(HTTP_CONCURRENCY) as pool:
            latencies = sorted(pool.map(one, encoded))
        wall, cpu = time.perf_counter() - start, self.processes_cpu() - cpu
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        count = sum(programs_each)
        return count / wall, 1000 * statistics.median(latencies), 1000 * p99, 1000 * cpu / count

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        self.process.wait(30)
        self.blobs.cleanup()


def measure_http(sources: list[str], workers: int, exec_count: int) -> dict:
    served = Served(workers)
    try:
        batches = [sources[i:i + BATCH_PROGRAMS] for i in range(0, len(sources), BATCH_PROGRAMS)]
        bodies = [{"original": part[0], "variants": part[1:], "call": "solve"} for part in batches]
        served.measure("/sandbox/batch", bodies[:HTTP_CONCURRENCY], [1])  # warm-up
        batch = served.measure("/sandbox/batch", bodies, [len(part) for part in batches])
        singles = [{"source": source, "call": "solve", "trace": True} for source in sources[:exec_count]]
        served.measure("/sandbox/exec", singles[:HTTP_CONCURRENCY], [1])
        single = served.measure("/sandbox/exec", singles, [1] * len(singles))
    finally:
        served.close()
    return {"batch": batch, "exec": single, "batch_requests": len(bodies), "exec_requests": len(singles)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--count", type=int, default=0, help="templates to run sandboxed; 0: all")
    parser.add_argument("--naive-count", type=int, default=200, help="templates to run the naive way")
    parser.add_argument("--workers", type=int, default=0,
                        help="units at once, both ways; 0: as the settings say (FLAWFORGE_SANDBOX_WORKERS)")
    parser.add_argument("--chunk", type=int, default=256, help="programs per trace_batch call")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of the two ways")
    parser.add_argument("--exec-count", type=int, default=800, help="single /sandbox/exec requests")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP path")
    args = parser.parse_args()

    files = sorted((args.data / "formalization-templates").glob("tier*/*/*.py"))
    if not files:
        raise SystemExit(f"no templates under {args.data / 'formalization-templates'}")
    sources = [f.read_text() for f in files][:args.count or None]
    naive_sources = sources[:args.naive_count]

    sandboxed = Sandboxed(args.workers, args.chunk)
    naive = Naive(sandboxed.sandbox.workers)
    try:
        sandboxed.sandbox.trace_batch(sources[0], sources[1:64])  # warm-up
        for r in range(args.rounds):
            sandboxed.run(sources[r::args.rounds])
            naive.run(naive_sources[r::args.rounds])
    finally:
        sandboxed.sandbox.close()
        naive.pool.shutdown()

    rate, baseline = sandboxed.count / sandboxed.wall, naive.count / naive.wall
    cpu_ms, naive_cpu_ms = 1000 * sandboxed.cpu / sandboxed.count, 1000 * naive.cpu / naive.count
    cores = os.cpu_count() or 1
    print(f"templates: {sandboxed.count} sandboxed, {naive.count} naive, in {args.rounds} alternating rounds; "
          f"workers: {sandboxed.sandbox.workers}; cpus: {cores}; load average now: {os.getloadavg()[0]:.1f}")
    print(f"sandboxed (fork server, traced): {rate:7.0f} executions/s wall, {cpu_ms:6.2f} ms CPU each "
          f"(all processes); outcomes: {sandboxed.outcomes}")
    print(f"naive (fresh python -c each):    {baseline:7.0f} executions/s wall, {naive_cpu_ms:6.2f} ms CPU each (baseline)")
    print(f"ratio sandboxed / naive: {rate / baseline:.1f}x by wall clock, {naive_cpu_ms / cpu_ms:.1f}x by CPU time")
    print(f"CPU-bound capacity on {cores} idle cores: {cores * 1000 / cpu_ms:.0f} sandboxed executions/s")
    print(f"target >= {TARGET_RATE}/s (wall): {'meets' if rate >= TARGET_RATE else 'MISSES'}; "
          f"target >= {TARGET_RATIO}x (wall): {'meets' if rate / baseline >= TARGET_RATIO else 'MISSES'}")
    floor, capacity = (1 - ALLOWED_HARDENING_COST) * IN_PROCESS_BEFORE_HARDENING, cores * 1000 / cpu_ms
    print(f"in-process CPU-bound capacity vs {IN_PROCESS_BEFORE_HARDENING}/s before the hardening: "
          f"{capacity / IN_PROCESS_BEFORE_HARDENING:.2f}x (target >= {floor:.0f}/s: "
          f"{'meets' if capacity >= floor else 'MISSES'}; by CPU time, which the machine's load changes less than the wall clock)")
    if args.no_http:
        return
    http = measure_http(sources, args.workers, args.exec_count)
    (batch_rate, batch_p50, batch_p99, batch_cpu), (exec_rate, exec_p50, exec_p99, exec_cpu) = http["batch"], http["exec"]
    print(f"HTTP /sandbox/batch ({http['batch_requests']} requests of up to {BATCH_PROGRAMS} programs, "
          f"{HTTP_CONCURRENCY} at once): {batch_rate:7.0f} executions/s, request p50 {batch_p50:.0f} ms, "
          f"p99 {batch_p99:.0f} ms; {batch_cpu:.2f} ms CPU each (service, units and client; capacity on "
          f"{cores} idle cores: {cores * 1000 / batch_cpu:.0f}/s); {batch_rate / rate:.2f}x the in-process rate")
    print(f"HTTP /sandbox/exec ({http['exec_requests']} requests, {HTTP_CONCURRENCY} at once): {exec_rate:7.0f} "
          f"executions/s, p50 {exec_p50:.0f} ms, p99 {exec_p99:.0f} ms; {exec_cpu:.2f} ms CPU each (capacity on "
          f"{cores} idle cores: {cores * 1000 / exec_cpu:.0f}/s); {exec_rate / rate:.2f}x the in-process rate")
    print(f"target /sandbox/batch >= {TARGET_HTTP_BATCH_RATE}/s: "
          f"{'meets' if batch_rate >= TARGET_HTTP_BATCH_RATE else 'MISSES'}; target /sandbox/exec p99 < "
          f"{TARGET_HTTP_EXEC_P99_MS} ms: {'meets' if exec_p99 < TARGET_HTTP_EXEC_P99_MS else 'MISSES'} "
          f"(targets for an idle machine; load average now: {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

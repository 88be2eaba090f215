"""Sandboxed template executions per second, beside the naive baseline, in one run.

Sandboxed: every real formalization template traced by flawforge.sandbox (fork server,
namespaces, limits, full typed trace). Naive baseline: one fresh `python -c` process per
template that just calls solve() (no isolation, no trace), with the same concurrency.
The two alternate in rounds, so both see the same load from whatever else runs.

Reported: wall-clock rates (what a caller gets now) and CPU time per execution (all
processes involved: service, zygote, units / the python -c processes), whose ratio does
not depend on the machine's load.
Targets: at least 500 sandboxed executions/s on a 2-core machine, and at least 20x the baseline.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flawforge.sandbox import Sandbox, SandboxLimits

TARGET_RATE = 500
TARGET_RATIO = 20
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


def zygote_pids(sandbox: Sandbox) -> list[int]:
    """The zygote, and its PID-namespace init if it has one."""
    outer = sandbox.zygote_pid()
    children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
    return [outer] + [int(p) for p in children]


def self_cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class Sandboxed:
    def __init__(self, workers: int, chunk: int):
        self.sandbox = Sandbox.from_settings(limits=SandboxLimits(timeout_s=5), **({"workers": workers} if workers else {}))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--count", type=int, default=0, help="templates to run sandboxed; 0: all")
    parser.add_argument("--naive-count", type=int, default=200, help="templates to run the naive way")
    parser.add_argument("--workers", type=int, default=0,
                        help="units at once, both ways; 0: as the settings say (FLAWFORGE_SANDBOX_WORKERS)")
    parser.add_argument("--chunk", type=int, default=256, help="programs per trace_batch call")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of the two ways")
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


if __name__ == "__main__":
    main()

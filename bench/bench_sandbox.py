"""Sandboxed template executions per second, beside the naive baseline, in one run.

Sandboxed: every real formalization template traced by flawforge.sandbox (fork server,
namespaces, limits, full typed trace). Naive baseline: one fresh `python -c` process per
template that just calls solve() (no isolation, no trace), with the same concurrency.
Targets: at least 500 sandboxed executions/s on a 2-core machine, and at least 20x the baseline.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flawforge.sandbox import Sandbox, SandboxLimits

TARGET_RATE = 500
TARGET_RATIO = 20
DEFAULT_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def sandboxed_rate(sources: list[str], workers: int, chunk: int) -> tuple[float, dict[str, int]]:
    outcomes: dict[str, int] = {}
    with Sandbox(SandboxLimits(timeout_s=5), workers=workers) as sandbox:
        sandbox.trace_batch(sources[0], sources[1:64])  # warm-up: zygote pages, pool of slots
        start = time.perf_counter()
        for first in range(0, len(sources), chunk):
            part = sources[first:first + chunk]
            for result in sandbox.trace_batch(part[0], part[1:]):
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        elapsed = time.perf_counter() - start
    return len(sources) / elapsed, outcomes


def naive_rate(sources: list[str], workers: int) -> float:
    def run(source: str) -> int:
        return subprocess.run([sys.executable, "-c", source + "\nprint(repr(solve()))\n"], capture_output=True,
                              timeout=60).returncode

    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        list(pool.map(run, sources))
        return len(sources) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--count", type=int, default=0, help="templates to run sandboxed; 0: all")
    parser.add_argument("--naive-count", type=int, default=200, help="templates to run the naive way")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="units at once, both ways")
    parser.add_argument("--chunk", type=int, default=256, help="programs per trace_batch call")
    args = parser.parse_args()

    files = sorted((args.data / "formalization-templates").glob("tier*/*/*.py"))
    if not files:
        raise SystemExit(f"no templates under {args.data / 'formalization-templates'}")
    sources = [f.read_text() for f in files][:args.count or None]

    rate, outcomes = sandboxed_rate(sources, args.workers, args.chunk)
    baseline = naive_rate(sources[:args.naive_count], args.workers)

    print(f"templates: {len(sources)} sandboxed, {min(args.naive_count, len(sources))} naive; "
          f"workers: {args.workers}; cpus: {os.cpu_count()}")
    print(f"sandboxed (fork server, traced):   {rate:8.0f} executions/s  outcomes: {outcomes}")
    print(f"naive (fresh python -c each):      {baseline:8.0f} executions/s (baseline)")
    print(f"ratio sandboxed / naive: {rate / baseline:.1f}x")
    print(f"target >= {TARGET_RATE}/s: {'meets' if rate >= TARGET_RATE else 'MISSES'}; "
          f"target >= {TARGET_RATIO}x: {'meets' if rate / baseline >= TARGET_RATIO else 'MISSES'}")


if __name__ == "__main__":
    main()

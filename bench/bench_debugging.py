"""Bugs validated per second on the shared libraries, beside the naive baseline, in one run.

Flawforge: the debug-conversations job, embedded (each library's named environment, clean suites
twice, candidates chosen from the functions the baseline tests execute, each run in a sandbox unit
forked from the warm zygote, only the tests that can notice the change, then
the final gate: every valid candidate's tests re-run in fresh units, clean and with the bug, where
the candidate's own unit was not already that run). Naive
baseline (the seed's way): a fresh `python -m pytest` process per candidate on an unpacked copy
with the bug written in, in a plain venv of the library's environment, the whole suite every
time, unsandboxed, as many at once as the job runs; it settles a sample of
the job's own instances (the first --naive-sample of each library), whose wall time is what
a candidate costs it, and its clean runs are not counted. Reported: candidates settled and
bugs validated per second (wall clock), CPU seconds per candidate (all processes; on a
shared machine this ratio moves less than the wall clock's), yield per modifier.
Targets: yield >= 50% after the final gate, >= 5x the baseline's rate, --per-library 30 on the shared libraries
in 10 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_sandbox import own_cpu, reaped_cpu, self_cpu

TARGET_YIELD = 0.50
TARGET_RATIO = 5
TARGET_SECONDS = 600
DEFAULT_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def children_cpu(pid: int) -> float:
    """CPU of a process's live descendants (the job's sandbox zygotes) and of the children they reaped (units). Found
    by their parent's pid in /proc/*/stat: a thread's `children` list loses a child once that thread has ended (one
    run counted 55 of some 200 CPU s that way)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):  # one that ended meanwhile
                continue

    def below(parent: int) -> float:
        total = 0.0
        for child in (p for p, ppid in parents.items() if ppid == parent):
            try:
                total += own_cpu(child) + reaped_cpu(child) + below(child)
            except (FileNotFoundError, ProcessLookupError):  # ended since the listing: its parent's reaped CPU holds it
                continue
        return total

    return below(pid)


def run_job(libraries: Path, per_library: int, seed: int, root: Path) -> tuple[dict, float, float, Path]:
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    out = root / "job"
    cpu = self_cpu(resource.RUSAGE_SELF) + self_cpu(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    # Trajectories (an agent's tool calls replayed in the sandbox per instance) are training data written after the
    # bugs are validated, not part of validating them: left out, as before they existed.
    run_embedded("debug-conversations", {"libraries": str(libraries), "per_library": per_library, "seed": seed,
                                         "trajectories": False}, out,
                 Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs"), data_roots=str(libraries)))
    wall = time.monotonic() - started
    # Its own CPU, what the children it reaped used (a process the stack closed before this line), and its live
    # descendants' (the sandbox's zygote and the units it reaped)
    cpu = self_cpu(resource.RUSAGE_SELF) + self_cpu(resource.RUSAGE_CHILDREN) - cpu + children_cpu(os.getpid())
    return json.loads((out / "summary.json").read_text()), wall, cpu, out


def plain_venvs(instances, scratch: Path) -> dict[str, Path]:
    """A plain venv of each environment the instances ran in (its exact packages, wheels only), built before the
    baseline's clock starts, as the job's environments are built before its runs (and cached)."""
    pythons = {}
    for environment in {i.environment.key: i.environment for i in instances}.values():
        folder = scratch / f"venv-{environment.key}"
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", "--only-binary", ":all:", *environment.packages], check=True)
        pythons[environment.key] = folder / "bin" / "python"
    return pythons


def naive_one(archive: Path, instance, scratch: Path, python: Path) -> float:
    """One candidate the seed's way: unpack, write the bug in, a fresh pytest over the whole suite, in a plain venv
    of the library's environment."""
    from flawforge.debugging.patches import apply_patch
    from flawforge.proto.debugging import SUITE_HASH_SEED

    folder = Path(tempfile.mkdtemp(dir=scratch))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    (project,) = folder.iterdir()
    target = project / instance.path
    target.write_text(apply_patch(target.read_text(), instance.patch))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": str(SUITE_HASH_SEED),
           "PYTHONPATH": os.pathsep.join(str(project / r) for r in instance.source_roots)}
    started = time.monotonic()
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    *instance.test_paths], cwd=project, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - started
    shutil.rmtree(folder, ignore_errors=True)
    return wall


def run_naive(libraries: Path, out: Path, sample: int, workers: int, scratch: Path) -> tuple[int, float, float]:
    from flawforge.proto.debugging import Instance

    instances = [Instance.model_validate_json(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    chosen, per_source = [], {}
    for instance in instances:
        if per_source.get(instance.source, 0) < sample:
            per_source[instance.source] = per_source.get(instance.source, 0) + 1
            chosen.append(instance)
    archives = {f"{i.source}-{i.version}": libraries / f"{i.source}-{i.version}.tar.gz" for i in chosen}
    pythons = plain_venvs(chosen, scratch)
    cpu = self_cpu(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda i: naive_one(archives[f"{i.source}-{i.version}"], i, scratch,
                                          pythons[i.environment.key]), chosen))
    return len(chosen), time.monotonic() - started, self_cpu(resource.RUSAGE_CHILDREN) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libraries", type=Path, default=DEFAULT_DATA / "python-libraries")
    parser.add_argument("--per-library", type=int, default=30)
    parser.add_argument("--naive-sample", type=int, default=2, help="Instances per library the baseline settles.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from flawforge.sandbox.suites import SUITE_WORKERS

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        summary, wall, cpu, out = run_job(args.libraries, args.per_library, args.seed, root)
        naive_count, naive_wall, naive_cpu = run_naive(args.libraries, out, args.naive_sample, SUITE_WORKERS, root)
    tried, valid = summary["tried"], summary["valid"]
    rate, naive_rate = tried / wall, naive_count / naive_wall
    report = {
        "libraries": summary["libraries"], "per_library": args.per_library, "tried": tried, "valid": valid,
        "yield": summary["yield"], "job_wall_s": round(wall, 1), "job_cpu_s": round(cpu, 1),
        "candidates_per_s": round(rate, 3), "valid_bugs_per_s": round(valid / wall, 3),
        "cpu_s_per_candidate": round(cpu / tried, 2),
        "naive_candidates": naive_count, "naive_wall_s": round(naive_wall, 1),
        "naive_candidates_per_s": round(naive_rate, 3), "naive_cpu_s_per_candidate": round(naive_cpu / naive_count, 2),
        "ratio_wall": round(rate / naive_rate, 2), "ratio_cpu": round((naive_cpu / naive_count) / (cpu / tried), 2),
        "final_gate": summary["final_gate"],
        "yield_by_modifier": {m: v["yield"] for m, v in summary["by_modifier"].items()},
        "rejects_by_reason": summary["rejects_by_reason"],
    }
    print(json.dumps(report, indent=1))
    print(f"yield {summary['yield']:.1%} (target >= {TARGET_YIELD:.0%}); {rate:.3f} candidates/s vs naive "
          f"{naive_rate:.3f}/s: {rate / naive_rate:.1f}x wall, {report['ratio_cpu']:.1f}x CPU per candidate "
          f"(target >= {TARGET_RATIO}x); job {wall:.0f} s (target < {TARGET_SECONDS} s for --per-library 30)")


if __name__ == "__main__":
    main()

"""Math error pipeline throughput: problems per second on the whole shared template corpus.

Flawforge: the math-errors job, embedded (in-memory bus, local blob store), both error
families, under the seed's caps (at most 2 conceptual errors of a type, 2 on a line, 5 in
all: the baseline's own), so that both sides keep the same number of conceptual errors.
Every template is validated in the sandbox; a mutant of a straight-line template is
executed by the arithmetic interpreter that reproduced its template's sandboxed trace, any
other mutant in the sandbox (see flawforge.math.generate). The job's default caps keep
about three times as many conceptual errors (flawforge.proto.math.DEFAULT_CONCEPTUAL_CAPS);
its rate under them is measured in the same rounds and reported beside the ratio.
Baseline, measured in the same run: the seed notebook's per-problem loop (`process_single_index`
from ../shared/seeds/000_*.txt), conceptual errors only, unsandboxed, one problem after
another. Its code is read from the seed file at run time; only its paths and its dataset
loader (GSM8K from the shared jsonl instead of the Hugging Face hub) are replaced, and its
parallel driver cells (joblib, pandas catalog) are left out. It crashes on some templates,
so each problem's exception is caught and counted.

Both sides are timed the same way: loading code (our imports, the seed's cells) is outside
the timer, the whole run (our services' start included) inside.

As a user sees it: the whole `flawforge run math-errors` process (interpreter start, imports,
the embedded services, the job, writing OUT) on --command-indices (1,000 problems by default),
under the seed's caps, against the seed's loop on the same problems (its seconds on them, taken
from the same rounds' loop over the whole corpus). Target: at least 10x too. The machine's speed drifts
by a fifth from minute to minute, so the two sides alternate for --rounds rounds, each
measurement in a fresh interpreter, and the ratio is that of the median rates. Scratch folders are removed only after the last round:
ext4 is slow to create files in the half minute after many are deleted, and a side run
after the other's clean-up would pay for it.
Target: at least 10x the baseline's rate.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FLAWFORGE_SHARED_DATA", REPO.parent / "shared" / "data")).parent
TARGET_RATIO = 10.0
MODEL_PREFERENCE = ["google_gemini-2.5-flash", "openai_gpt-4.1"]  # the seed's own preference order

# Exact seed lines and what replaces them. A seed that no longer has one of them stops the bench.
DRIVER_ONLY_IMPORTS = ("import pandas as pd\n", "from joblib import Parallel, delayed\n")
DATASET_IMPORT = "from datasets import load_dataset, Dataset\n"
PROJECT_ROOT_LINE = "PROJECT_ROOT = find_project_root()\n"
TEMPLATE_DIR_LINE = 'PROCESSED_TEMPLATE_DIR = DATA_DIR / "template-generated-processed"\n'
DRIVER_CALL = "run_candidate_generation_pipeline_parallel()"


def seed_program(seed_text: str, templates: Path, scratch: Path) -> str:
    """The seed notebook's code cells with only paths, dataset loader and driver adapted."""
    cells = re.findall(r"^```python\n(.*?)^```", seed_text, re.S | re.M)
    cells = [cell for cell in cells if cell.strip() and cell.strip() != DRIVER_CALL]
    code = "\n".join(cells)
    replacements = {
        DATASET_IMPORT: "",  # load_dataset and Dataset are provided by the bench, reading the shared jsonl
        PROJECT_ROOT_LINE: f"PROJECT_ROOT = Path({str(scratch)!r})\n",
        TEMPLATE_DIR_LINE: f"PROCESSED_TEMPLATE_DIR = Path({str(templates)!r})\n",
        **{line: "" for line in DRIVER_ONLY_IMPORTS},
    }
    for old, new in replacements.items():
        if code.count(old) != 1:
            raise SystemExit(f"the seed notebook changed: expected the line {old.strip()!r} once")
        code = code.replace(old, new)
    return code


def baseline_rate(gsm8k: Path, templates: Path, indices: range, scratch: Path,
                  among: range) -> tuple[float, int, int, float]:
    """(problems/s, problems that crashed, candidates, seconds spent on the problems `among`) of the seed's loop
    over `indices`."""
    rows = [json.loads(line) for line in gsm8k.read_text().splitlines() if line.strip()]
    seed_text = next((SHARED / "seeds").glob("000_*.txt")).read_text()
    namespace = {"__name__": "seed_000", "load_dataset": lambda *args, **kw: {"train": rows}, "Dataset": list}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(seed_program(seed_text, templates, scratch), "seed_000", "exec"), namespace)
    tasks = [(tier, index) for tier, members in namespace["TIER_LISTS"].items() for index in members
             if index in indices]
    process_single_index = namespace["process_single_index"]
    crashed = produced = 0
    spent_among = 0.0
    start = time.perf_counter()
    for task in tasks:
        began = time.perf_counter()
        try:
            produced += len(process_single_index(task, MODEL_PREFERENCE))
        except Exception:
            crashed += 1
        if task[1] in among:
            spent_among += time.perf_counter() - began
    elapsed = time.perf_counter() - start
    return len(tasks) / elapsed, crashed, produced, spent_among


def flawforge_rate(gsm8k: Path, templates: Path, indices: range, scratch: Path, caps: str) -> tuple[float, dict]:
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.math.selection import DEFAULT_CAPS, SEED_CAPS
    from flawforge.settings import Settings

    params = {"gsm8k": str(gsm8k), "templates": str(templates), "indices": f"{indices.start}-{indices.stop - 1}",
              "families": ["computational", "conceptual"],
              "caps": {"seed": SEED_CAPS, "default": DEFAULT_CAPS}[caps].model_dump()}
    out = scratch / "out"
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(scratch / "blobs"))
    start = time.perf_counter()
    run_embedded("math-errors", params, out, settings)
    elapsed = time.perf_counter() - start
    return len(indices) / elapsed, json.loads((out / "summary.json").read_text())


def command_seconds(gsm8k: Path, templates: Path, indices: range, scratch: Path) -> float:
    """Wall seconds of the user's command, start to exit: `flawforge run math-errors` on `indices`, the seed's
    caps, into a fresh OUT."""
    installed = Path(sys.executable).with_name("flawforge")
    command = [str(installed)] if installed.exists() else [sys.executable, "-m", "flawforge.cli.main"]
    command += ["run", "math-errors", "--gsm8k", str(gsm8k), "--templates", str(templates), "--indices",
                f"{indices.start}-{indices.stop - 1}", "--caps", "seed", "--out", str(scratch / "out")]
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "FLAWFORGE_DATA_ROOTS": f"{gsm8k.parent},{templates}"})
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return elapsed


def load_flawforge() -> None:
    """Our side's code loading, outside its timer as the seed's is: the modules a job runs."""
    import flawforge.jobs.runner  # noqa: F401
    import flawforge.jobs.store  # noqa: F401
    import flawforge.math.generate  # noqa: F401
    import flawforge.assembly  # noqa: F401
    from flawforge.jobs.pipeline import pipelines

    pipelines()


def measure(side: str, indices: range, scratch: Path, command_indices: range) -> dict:
    """One side's measurement in a fresh interpreter, so that no round inherits another's caches or processes."""
    command = [sys.executable, __file__, "--side", side, "--scratch", str(scratch),
               "--indices", f"{indices.start}-{indices.stop - 1}",
               "--command-indices", f"{command_indices.start}-{command_indices.stop - 1}"]
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def run_side(side: str, gsm8k: Path, templates: Path, indices: range, scratch: Path,
             command_indices: range) -> dict:
    scratch.mkdir(parents=True)
    if side == "command":
        return {"seconds": command_seconds(gsm8k, templates, command_indices, scratch)}
    if side.startswith("flawforge"):
        load_flawforge()
        rate, summary = flawforge_rate(gsm8k, templates, indices, scratch, caps=side.partition("-")[2] or "seed")
        return {"rate": rate, "candidates": summary["candidates"], "rejects": summary["rejects"]}
    rate, crashed, produced, among = baseline_rate(gsm8k, templates, indices, scratch, command_indices)
    return {"rate": rate, "candidates": produced, "crashed": crashed, "command_problems_s": among}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--indices", default=None, help="Problems A-B; default: the whole shared corpus.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating measurements of each side.")
    parser.add_argument("--command-indices", default="0-999",
                        help="Problems A-B of the user's command measurement (within --indices).")
    parser.add_argument("--side", choices=["flawforge", "flawforge-default", "seed", "command"],
                        help=argparse.SUPPRESS)  # one measurement
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")  # the job's progress bar would bury the measurements
    from flawforge.math.gsm8k import index_range
    from flawforge.math.templates import TemplateFolder

    gsm8k = SHARED / "data" / "gsm8k" / "train.jsonl"
    templates = SHARED / "data" / "formalization-templates"
    indices = index_range(args.indices) if args.indices else TemplateFolder(templates).extent()
    command_indices = index_range(args.command_indices)
    if not (indices.start <= command_indices.start and command_indices.stop <= indices.stop):
        raise SystemExit(f"--command-indices {args.command_indices} must lie within the measured problems "
                         f"{indices.start}-{indices.stop - 1}")
    if args.side:
        print(json.dumps(run_side(args.side, gsm8k, templates, indices, args.scratch, command_indices)))
        return

    rates: dict[str, list[float]] = {"flawforge": [], "seed": [], "flawforge-default": []}
    seconds: dict[str, list[float]] = {"command": [], "seed": []}
    span = f"{command_indices.start}-{command_indices.stop - 1}"
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(1, args.rounds + 1):
            ours = measure("flawforge", indices, Path(scratch) / f"flawforge-{round_number}", command_indices)
            rates["flawforge"].append(ours["rate"])
            print(f"round {round_number} flawforge: {ours['rate']:8.1f} problems/s  ({len(indices)} problems, both "
                  f"families, sandboxed, the seed's caps; {ours['candidates']} candidates, {ours['rejects']} rejects)",
                  flush=True)
            seed = measure("seed", indices, Path(scratch) / f"seed-{round_number}", command_indices)
            rates["seed"].append(seed["rate"])
            seconds["seed"].append(seed["command_problems_s"])
            print(f"round {round_number} seed 000:  {seed['rate']:8.1f} problems/s  ({len(indices)} problems, "
                  f"conceptual only, unsandboxed; {seed['candidates']} candidates, {seed['crashed']} problems "
                  f"crashed)", flush=True)
            default = measure("flawforge-default", indices, Path(scratch) / f"default-{round_number}",
                              command_indices)
            rates["flawforge-default"].append(default["rate"])
            print(f"round {round_number} flawforge, default caps: {default['rate']:8.1f} problems/s  "
                  f"({default['candidates']} candidates)", flush=True)
            command = measure("command", indices, Path(scratch) / f"command-{round_number}", command_indices)
            seconds["command"].append(command["seconds"])
            print(f"round {round_number} the user's command on {span}: {command['seconds']:.2f} s, start-up "
                  f"included; the seed's loop on the same problems {seed['command_problems_s']:.2f} s "
                  f"({seed['command_problems_s'] / command['seconds']:.1f}x)", flush=True)
    ours_rate, seed_rate = statistics.median(rates["flawforge"]), statistics.median(rates["seed"])
    print(f"median:    flawforge {ours_rate:.1f}, seed 000 {seed_rate:.1f} problems/s")
    ratio = ours_rate / seed_rate
    print(f"ratio:     {ratio:8.1f}x  (target >= {TARGET_RATIO:g}x)")
    default_rate = statistics.median(rates["flawforge-default"])
    print(f"default caps: flawforge {default_rate:.1f} problems/s, {default_rate / seed_rate:.1f}x the seed's loop "
          f"(reported, not the target: it keeps about three times as many conceptual errors)")
    command_s, seed_s = statistics.median(seconds["command"]), statistics.median(seconds["seed"])
    command_ratio = seed_s / command_s
    print(f"as a user sees it: `flawforge run math-errors --indices {span} --caps seed` {command_s:.2f} s, the "
          f"seed's loop on those problems {seed_s:.2f} s: {command_ratio:.1f}x  (target >= {TARGET_RATIO:g}x)")
    if ratio < TARGET_RATIO or command_ratio < TARGET_RATIO:
        sys.exit(1)


if __name__ == "__main__":
    main()

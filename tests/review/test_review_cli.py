"""`flawforge review ...` on the original project's real review data, as a user runs it."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def flawforge(tmp_path):
    env = {**os.environ, "FLAWFORGE_BLOB_BACKEND": "local", "FLAWFORGE_BLOB_DIR": str(tmp_path / "blobs")}

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "flawforge.cli.entry", "review", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert (done.returncode == 0) == ok, done.stderr
        return done

    return run


def test_import_the_real_decisions_and_report_agreement(flawforge, shared_data, tmp_path):
    review = shared_data / "human-review"
    gsm8k = str(shared_data / "gsm8k" / "train.jsonl")
    shortlist = json.loads(flawforge("shortlist", "--round", "legacy", "--legacy-human-review", str(review),
                                     "--gsm8k", gsm8k, "--size-per-error-type", "1000").stdout)
    accepted_files = len(list((review / "accepted").glob("tier*/*/*.json")))
    assert shortlist["items"] == shortlist["candidates"] == accepted_files

    with (review / "decisions.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    summary = json.loads(flawforge("import-decisions", str(review / "decisions.csv"), "--round", "legacy").stdout)
    assert (summary["rows"], summary["imported"], summary["rejected_rows"]) == (len(rows), len(rows), [])
    again = json.loads(flawforge("import-decisions", str(review / "decisions.csv"), "--round", "legacy").stdout)
    assert (again["imported"], again["already_present"]) == (0, len(rows))

    report = flawforge("agreement", "--round", "legacy").stdout
    for reviewer in {r["validator"] for r in rows}:
        mine = [r for r in rows if r["validator"] == reviewer]
        accepted = sum(r["status"] == "accepted" for r in mine)
        rate = accepted / (accepted + sum(r["status"] == "rejected" for r in mine))
        line = next(line for line in report.splitlines() if line.startswith(reviewer + " "))
        assert line.split()[1] == str(len(mine)) and line.split()[-1] == f"{rate:.3f}"
    assert "kappa needs at least 2 items with two or more verdicts" in report
    log = [json.loads(line) for line in flawforge("decisions", "--round", "legacy").stdout.splitlines()]
    assert len(log) == len(rows) and {d["source"] for d in log} == {"import:decisions.csv"}

    out = tmp_path / "dataset"
    counts = json.loads(flawforge("export", "--round", "legacy", "--gsm8k", gsm8k, "--sizes",
                                  "correct=40,conceptual=60", "--out", str(out)).stdout)
    assert sum(c["by_family"]["conceptual"] for c in counts.values()) == 60
    assert sum(c["by_family"]["correct"] for c in counts.values()) == 40
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert not {r["problem_index"] for r in train} & {r["problem_index"] for r in test}


def test_cli_errors_are_one_line(flawforge, shared_data):
    gsm8k = str(shared_data / "gsm8k" / "train.jsonl")
    done = flawforge("shortlist", "--round", "r", "--gsm8k", gsm8k, ok=False)
    assert done.stderr.strip() == "flawforge: error: give exactly one of --candidates and --legacy-human-review"
    done = flawforge("agreement", "--round", "bad round", ok=False)
    assert done.stderr.strip().startswith("flawforge: error: invalid round name 'bad round'")
    done = flawforge("export", "--round", "r", "--gsm8k", gsm8k, "--sizes", "correct", "--out", "/tmp/x", ok=False)
    assert "is not CLASS=N" in done.stderr and "Traceback" not in done.stderr
    done = flawforge("export", "--round", "r", "--gsm8k", gsm8k, "--out", "/tmp/x", ok=False)
    assert done.stderr.strip() == "flawforge: error: no review round 'r'"

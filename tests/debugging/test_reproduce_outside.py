"""Every emitted instance holds outside the project: a plain venv built from the instance's recorded environment
(python -m venv, pip install of its exact packages), the task folder's own run_tests.py with the buggy code, then
the solution's fix applied with `patch -p1`. Nothing here goes through the sandbox or the pipeline's records."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flawforge.proto.debugging import Instance

LIBRARIES = ("python-dateutil-2.9.0.post0.tar.gz", "markdown-3.7.tar.gz")
OUTCOME_WORDS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                 "XFAIL": "skipped", "XPASS": "passed"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_folder(shared_data, tmp_path_factory) -> Path:
    from flawforge.cli.debugging import unpack_tasks
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    root = tmp_path_factory.mktemp("outside")
    libraries = root / "libraries"
    libraries.mkdir()
    for name in LIBRARIES:
        shutil.copy(shared_data / "python-libraries" / name, libraries / name)
    out = root / "out"
    run_embedded("debug-conversations", {"libraries": str(libraries), "per_library": 2, "seed": 5}, out,
                 Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs"),
                          data_roots=str(libraries)))
    unpack_tasks(out)
    return out


def plain_venv(folder: Path, packages: list[str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", *packages], check=True, timeout=600)
    return python


def reported(python: Path, task: Path, listed: list[str]) -> tuple[dict[str, str], int]:
    """Each listed test's outcome, as pytest's own summary (-rA) names it, from the task's run_tests.py, and its exit
    status."""
    done = subprocess.run([str(python), "run_tests.py", "-rA", "--tb=no", "-p", "no:randomly"], cwd=task,
                          capture_output=True, text=True, timeout=600, env={"PATH": os.environ["PATH"]})
    outcomes = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        test = rest.split(" - ", 1)[0].strip()
        if word.startswith("SUBFAILED"):  # "SUBFAILED(label) test": its test is failing, whatever else -rA says of it
            # The label may hold spaces (more-itertools: "SUBFAILED(slice_args=(4, -3, -2)) test"), so the listed
            # test is found at the line's end or before its " - " reason.
            for name in listed:
                if line.endswith(" " + name) or f" {name} - " in line:
                    outcomes[name] = "failed"
        elif word in OUTCOME_WORDS and outcomes.get(test) != "failed":
            outcomes[test] = OUTCOME_WORDS[word]
    return outcomes, done.returncode


def test_every_instance_reproduces_in_a_plain_venv_of_its_environment(run_folder, tmp_path):
    solutions = sorted((run_folder / "solutions").glob("*.json"))
    instances = [Instance.model_validate(json.loads(p.read_text())["instance"]) for p in solutions]
    summary = json.loads((run_folder / "summary.json").read_text())
    assert summary["valid"] == len(instances) and summary["final_gate"]["emitted"] == len(instances)
    assert {i.source for i in instances} == {"python-dateutil", "markdown"}, summary["rejects_by_reason"]
    venvs: dict[str, Path] = {}
    for path, instance in zip(solutions, instances):
        environment = instance.environment
        if environment.key not in venvs:
            venvs[environment.key] = plain_venv(tmp_path / environment.key, environment.packages)
        python = venvs[environment.key]
        task = tmp_path / "tasks" / path.stem
        shutil.copytree(run_folder / "tasks" / path.stem, task)
        with_bug, status = reported(python, task, instance.FAIL_TO_PASS + instance.PASS_TO_PASS)
        assert status == 1, (instance.instance_id, status)
        for test in instance.FAIL_TO_PASS:
            assert with_bug.get(test) in ("failed", "error"), (instance.instance_id, test, with_bug.get(test))
        for test in instance.PASS_TO_PASS:
            assert with_bug.get(test) == "passed", (instance.instance_id, test, with_bug.get(test))
        os.chmod(task / instance.path, 0o644)
        subprocess.run(["patch", "-p1", "--quiet"], input=instance.fix_patch, text=True, cwd=task, check=True)
        fixed, status = reported(python, task, instance.FAIL_TO_PASS + instance.PASS_TO_PASS)
        assert status == 0, (instance.instance_id, status)
        assert all(fixed.get(t) == "passed" for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS), \
            (instance.instance_id, {t: fixed.get(t) for t in instance.FAIL_TO_PASS})
    dateutil = next(i for i in instances if i.source == "python-dateutil")
    assert any(p.startswith(("freezegun==", "six==")) for p in dateutil.environment.packages)

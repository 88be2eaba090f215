"""Every CLI command with a user's mistakes: one line on stderr naming the problem, a non-zero status, no
traceback, and nothing left at the output path.

Each case runs the real command in its own process, as a user would, several at a time.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FLAWFORGE = [sys.executable, "-m", "flawforge.cli.entry"]


@dataclass
class Case:
    id: str
    args: list[str]
    message: str  # must appear in the one stderr line
    env: dict[str, str] = field(default_factory=dict)
    status: int = 2
    leaves_no: str | None = "OUT"  # the path that must not exist afterwards (OUT: the case's --out)


# Data roots that hold none of the cases' files.
OUTSIDE_THE_ROOTS = {"FLAWFORGE_DATA_ROOTS": "/nonexistent-root"}


def cases(data: Path) -> list[Case]:
    gsm8k, templates = str(data / "gsm8k" / "train.jsonl"), str(data / "formalization-templates")
    human = str(data / "human-review")
    math = ["run", "math-errors", "--gsm8k", gsm8k, "--templates", templates, "--out", "OUT"]
    return [
        # missing, wrong type, out of range
        Case("missing option", ["run", "smoke"], "Missing option '--out'", leaves_no=None),
        Case("wrong type", ["run", "smoke", "--count", "x", "--out", "OUT"], "Invalid value for '--count'"),
        Case("out of range", ["run", "smoke", "--count", "0", "--out", "OUT"], "invalid count"),
        Case("unknown command", ["nosuch"], "No such command 'nosuch'", leaves_no=None),
        Case("unknown option", ["run", "smoke", "--out", "OUT", "--colour", "red"], "No such option: --colour"),
        # the output path
        Case("out is a file", ["run", "smoke", "--count", "1", "--out", "FILE"], "is a file; name a folder",
             leaves_no=None),
        Case("out cannot be created", ["run", "smoke", "--count", "1", "--out", "/proc/1/nope/out"],
             "cannot create it", leaves_no=None),
        Case("export out is a file", ["export", "math", "--candidates", "EMPTY", "--gsm8k", gsm8k, "--out",
                                      "FILE"], "is a file; name a folder", leaves_no=None),
        Case("export debug bad format", ["export", "debug", "/nonexistent", "--format", "csv", "--out", "OUT"],
             "--format 'csv': choose one of swe-bench, hf"),
        Case("export debug no run", ["export", "debug", "/nonexistent", "--out", "OUT"],
             "cannot read /nonexistent/instances.jsonl"),
        # --stack
        Case("stack url with a path", ["run", "smoke", "--out", "OUT", "--stack", "http://127.0.0.1:8006/jobs"],
             "has a path; give the service's base URL, e.g. http://127.0.0.1:8006"),
        Case("stack not a url", ["run", "smoke", "--out", "OUT", "--stack", "localhost"], "is not an http(s)"),
        Case("stack bad port", ["run", "smoke", "--out", "OUT", "--stack", "http://127.0.0.1:port"],
             "has no valid port"),
        Case("stack unreachable", ["run", "smoke", "--out", "OUT", "--stack", "http://127.0.0.1:9"],
             "cannot reach the stack at http://127.0.0.1:9"),
        # settings from the environment, named by their variable
        Case("bad integer setting", ["run", "smoke", "--count", "1", "--out", "OUT"],
             "FLAWFORGE_PREFETCH='abc': Input should be a valid integer", env={"FLAWFORGE_PREFETCH": "abc"}),
        Case("bad choice setting", ["serve", "metrics"], "FLAWFORGE_BUS='kafka': Input should be 'memory' or",
             env={"FLAWFORGE_BUS": "kafka"}, leaves_no=None),
        Case("bad prefix setting", ["serve", "metrics"], "FLAWFORGE_QUEUE_PREFIX='a b': String should match",
             env={"FLAWFORGE_QUEUE_PREFIX": "a b"}, leaves_no=None),
        Case("no api tokens", ["serve", "metrics"], "FLAWFORGE_API_TOKENS is empty",
             env={"FLAWFORGE_API_TOKENS": ""}, leaves_no=None),
        # math-errors inputs
        Case("gsm8k missing", ["run", "math-errors", "--gsm8k", "/nonexistent/train.jsonl", "--templates", templates,
                               "--indices", "0-1", "--out", "OUT"], "/nonexistent/train.jsonl"),
        # an embedded run reads the user's own files, wherever they are (here outside the data roots, and read:
        # the job fails on what they hold); a missing one is named as missing
        Case("gsm8k missing outside the roots", [*math, "--gsm8k", "/tmp/nonexistent/train.jsonl", "--indices", "0-1"],
             "/tmp/nonexistent/train.jsonl does not exist", env=OUTSIDE_THE_ROOTS),
        Case("gsm8k empty", ["run", "math-errors", "--gsm8k", "EMPTY", "--templates", templates, "--indices", "0-1",
                             "--out", "OUT"], "EMPTY: no problems in the file", env=OUTSIDE_THE_ROOTS),
        Case("gsm8k malformed", ["run", "math-errors", "--gsm8k", "MALFORMED", "--templates", templates,
                                 "--indices", "0-1", "--out", "OUT"], "MALFORMED: line 1 is not JSON",
             env=OUTSIDE_THE_ROOTS),
        Case("indices malformed", [*math, "--indices", "5-2"], "indices"),
        Case("caps malformed", [*math, "--indices", "0-1", "--caps", "per_type=many"], "--caps: per_type must be"),
        Case("unknown family", [*math, "--indices", "0-1", "--families", "cosmic"], "invalid families"),
        Case("unknown model: nothing done", [*math, "--indices", "0-2", "--models", "nosuch"],
             "has a template of nosuch", status=1, leaves_no=None),
        # templates: every model call fails
        Case("provider unreachable: nothing done",
             ["run", "templates", "--gsm8k", gsm8k, "--indices", "5000-5001", "--model", "m", "--out", "OUT"],
             "no model reply for any of the 2 problems", status=1, leaves_no=None,
             env={"FLAWFORGE_LLM_PROVIDERS": '{"down": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}',
                  "FLAWFORGE_LLM_MAX_ATTEMPTS": "1"}),
        Case("templates bad mode", ["run", "templates", "--gsm8k", gsm8k, "--indices", "0-1", "--model", "m",
                                    "--mode", "fast", "--out", "OUT"], "invalid mode"),
        # recall: arguments before 17 s of parsing
        Case("recall candidates missing", ["recall", "--candidates", "/nonexistent.jsonl", "--human-review", human],
             "--candidates /nonexistent.jsonl: no such file", leaves_no=None),
        Case("recall bad indices", ["recall", "--candidates", "EMPTY", "--human-review", human, "--indices", "zz"],
             "--indices", leaves_no=None),
        Case("recall review folder missing", ["recall", "--candidates", "EMPTY", "--human-review", "/nonexistent"],
             "no decisions.csv in /nonexistent", leaves_no=None),
        Case("recall candidates malformed", ["recall", "--candidates", "MALFORMED", "--human-review", human],
             "MALFORMED", leaves_no=None),
        # review
        Case("review unknown round: agreement", ["review", "agreement", "--round", "nosuch"],
             "no review round 'nosuch'", leaves_no=None),
        Case("review unknown round: decisions", ["review", "decisions", "--round", "nosuch"],
             "no review round 'nosuch'", leaves_no=None),
        Case("review bad round name", ["review", "agreement", "--round", "bad name!"], "round name", leaves_no=None),
        Case("review shortlist bad round name", ["review", "shortlist", "--round", "bad name!", "--candidates",
                                                 "EMPTY", "--gsm8k", gsm8k], "round name", leaves_no=None),
        Case("review export unknown round", ["review", "export", "--round", "nosuch", "--gsm8k", gsm8k, "--out",
                                             "OUT"], "no review round 'nosuch'"),
        Case("review export bad sizes", ["review", "export", "--round", "r", "--gsm8k", gsm8k, "--sizes", "lots",
                                         "--out", "OUT"], "--sizes entry 'lots' is not CLASS=N"),
        # the semantic-pressure pipelines: checked before a model loads
        Case("dataset unknown category", ["run", "pressure-dataset", "--categories", "nosuch", "--out", "OUT"],
             "invalid categories"),
        Case("dataset unknown model", ["run", "pressure-dataset", "--per-category", "1", "--model", "nosuch",
                                       "--out", "OUT"], "unknown model 'nosuch': the local inference-server serves"),
        Case("templates unknown model", ["run", "templates", "--gsm8k", gsm8k, "--indices", "0-1", "--model", "nosuch",
                                         "--out", "OUT"], "unknown model 'nosuch'"),
        Case("study neither prompts nor demo", ["run", "pressure-study", "--out", "OUT"],
             "give either --prompts FILE or --demo"),
        Case("study prompts malformed", ["run", "pressure-study", "--prompts", "MALFORMED", "--out", "OUT"],
             "MALFORMED:1: line: Invalid JSON"),
        Case("study prompts empty", ["run", "pressure-study", "--prompts", "EMPTY", "--out", "OUT"],
             "EMPTY holds no prompts"),
        Case("study model missing", ["run", "pressure-study", "--demo", "--model", "/nonexistent.gguf", "--out",
                                     "OUT"], "model path '/nonexistent.gguf' does not exist"),
        Case("import decisions bad round name", ["review", "import-decisions", "--round", "bad name!"], "round name",
             leaves_no=None),
        Case("import decisions before the shortlist", ["review", "import-decisions", f"{human}/decisions.csv",
                                                       "--round", "nosuch"], "no review round 'nosuch'",
             leaves_no=None),
        # services and the sandbox
        Case("unknown service", ["serve", "nosuch"], "unknown service 'nosuch'", leaves_no=None),
        Case("serve all unknown skip", ["serve", "all", "--skip", "nosuch"], "--skip: unknown service(s) nosuch",
             leaves_no=None),
        Case("serve all broker down", ["serve", "all"], "cannot reach RabbitMQ at 127.0.0.1:9 (Connection refused); "
             "no service started", env={"FLAWFORGE_AMQP_URL": "amqp://guest:guest@127.0.0.1:9/%2F"}, leaves_no=None),
        Case("sandbox file missing", ["sandbox", "exec", "/nonexistent.py"], "/nonexistent.py", leaves_no=None),
        Case("sandbox bad timeout", ["sandbox", "exec", "EMPTY", "--timeout", "-1"], "timeout", leaves_no=None),
        Case("conversation missing", ["validate-conversation", "/nonexistent.json"], "/nonexistent.json",
             leaves_no=None),
        Case("debug libraries missing", ["run", "debug-conversations", "--libraries", "/nonexistent", "--out", "OUT"],
             "/nonexistent"),
        Case("debug library without tests: nothing done", ["run", "debug-conversations", "--libraries",
                                                            "NO_TESTS_LIBRARIES", "--per-library", "2", "--out", "OUT"],
             "produced nothing: nothing to inject bugs into: tinylib 0.1: no tests found", status=1, leaves_no=None),
        # file inputs: regular files only, never waited on or read whole
        Case("sandbox file a fifo", ["sandbox", "exec", "FIFO"], "is a FIFO, not a regular file", leaves_no=None),
        Case("sandbox file endless", ["sandbox", "exec", "/dev/zero"], "/dev/zero is a character device",
             leaves_no=None),
        Case("conversation a fifo", ["validate-conversation", "FIFO"], "is a FIFO, not a regular file",
             leaves_no=None),
        Case("conversation endless", ["validate-conversation", "/dev/zero"], "/dev/zero is a character device",
             leaves_no=None),
        Case("export candidates a fifo", ["export", "math", "--candidates", "FIFO", "--gsm8k", gsm8k, "--out", "OUT"],
             "is a FIFO, not a regular file"),
        Case("export candidates endless", ["export", "math", "--candidates", "/dev/zero", "--gsm8k", gsm8k, "--out",
                                           "OUT"], "/dev/zero is a character device"),
        Case("export candidates a folder", ["export", "math", "--candidates", human, "--gsm8k", gsm8k, "--out",
                                            "OUT"], "is a folder, not a regular file"),
        # output folders and addresses the system refuses
        Case("out takes no entries", ["run", "smoke", "--count", "1", "--out", "/proc/self/fd"],
             "--out /proc/self/fd: cannot create it or write in it", leaves_no=None),
        Case("out name too long", ["run", "smoke", "--count", "1", "--out", "a" * 100_000],
             "(100,000 characters): cannot create it or write in it (File name too long)", leaves_no=None),
        Case("serve port out of range", ["serve", "metrics", "--port", "99999"], "Invalid value for '--port'",
             leaves_no=None),
        Case("serve host with a direction mark", ["serve", "metrics", "--host", "127.0.0.1\u202e"],
             "--host '127.0.0.1\\u202e' is not a host name or an IP address", leaves_no=None),
    ]


def library_without_tests(folder: Path) -> dict[str, Path]:
    """A folder holding one library sdist, with no tests, as the cases name it."""
    library = folder / "tinylib-0.1"
    (library / "tinylib").mkdir(parents=True)
    (library / "tinylib" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (library / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tinylib\nVersion: 0.1\n")
    (library / "pyproject.toml").write_text('[project]\nname = "tinylib"\nversion = "0.1"\n')
    (folder / "libraries").mkdir()
    with tarfile.open(folder / "libraries" / "tinylib-0.1.tar.gz", "w:gz") as tar:
        tar.add(library, arcname=library.name)
    return {"NO_TESTS_LIBRARIES": folder / "libraries"}


def run_case(case: Case, folder: Path, own: dict[str, Path]) -> tuple[Case, subprocess.CompletedProcess, Path]:
    folder.mkdir()
    (folder / "FILE").write_text("a file the user has\n")
    (folder / "EMPTY").write_text("")
    (folder / "MALFORMED").write_text("{not json\n")
    os.mkfifo(folder / "FIFO")  # nobody writes it: a command that opens it to read waits for good
    paths = {"OUT": folder / "out", "FILE": folder / "FILE", "EMPTY": folder / "EMPTY",
             "MALFORMED": folder / "MALFORMED", "FIFO": folder / "FIFO", **own}
    args = [str(paths.get(arg, arg)) for arg in case.args]
    env = {**os.environ, "FLAWFORGE_BLOB_DIR": str(folder / "blobs"), "FLAWFORGE_API_TOKENS": "t:tok",
           "FLAWFORGE_HTTP_PORT": "1",  # a service that starts by mistake cannot bind
           "FLAWFORGE_PROGRESS_LOG_S": "3600",  # a slow case's progress lines are not its answer
           **case.env}
    result = subprocess.run([*FLAWFORGE, *args], capture_output=True, text=True, timeout=180, env=env, cwd=folder,
                            stdin=subprocess.DEVNULL)
    return case, result, paths["OUT"]


def test_every_command_answers_mistakes_with_one_line(shared_data, tmp_path):
    all_cases = cases(shared_data)
    assert len({c.id for c in all_cases}) == len(all_cases)
    own = library_without_tests(tmp_path / "own")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: run_case(c, tmp_path / c.id.replace(" ", "_").replace(":", ""), own),
                                all_cases))
    failures = []
    for case, result, out in results:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        problems = []
        if result.returncode != case.status:
            problems.append(f"status {result.returncode}, expected {case.status}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr")
        elif case.message not in lines[0] or not lines[0].startswith("flawforge: "):
            problems.append(f"message {lines[0]!r} lacks {case.message!r}")
        if "Traceback" in result.stderr:
            problems.append("a traceback")
        if case.leaves_no == "OUT" and out.exists():
            problems.append(f"left {out} behind")
        if problems:
            failures.append(f"{case.id}: {'; '.join(problems)}\n    stderr: {result.stderr[-600:]!r}")
    assert not failures, "\n".join(failures)


def test_ctrl_c_ends_an_embedded_run_promptly_with_one_line_and_no_output(shared_data, tmp_path):
    """Ctrl-C at a terminal signals the whole process group: the command, its worker and sandbox processes."""
    out = tmp_path / "out"
    command = subprocess.Popen([*FLAWFORGE, "run", "math-errors", "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"),
                                "--templates", str(shared_data / "formalization-templates"), "--indices", "0-1999",
                                "--out", str(out)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60

    # Mid-job: the generation processes have answered for their first problems.
    while not list(out.glob(".blobs*/jobs/*/items/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert command.poll() is None, command.communicate()
    interrupted = time.monotonic()
    os.killpg(command.pid, signal.SIGINT)
    _, stderr = command.communicate(timeout=30)
    assert time.monotonic() - interrupted < 10
    assert command.returncode == 130
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.match(r"flawforge: interrupted: job \w+ cancelled; nothing written to ", lines[0]), stderr
    assert not out.exists()


# The command, with a Ctrl-C the moment one module starts to import (argv[1]); the command's arguments follow.
INTERRUPT_ON_IMPORT = '''
import os, signal, sys


class InterruptOnImport:
    def __init__(self, module):
        self.module = module

    def find_spec(self, name, path, target=None):
        if name == self.module:
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, InterruptOnImport(sys.argv[1]))
sys.argv = ["flawforge", *sys.argv[2:]]
from flawforge.cli.entry import main

main()
'''


@pytest.mark.parametrize("module", [
    "typer",  # the command's own modules are importing
    "flawforge.assembly",  # the command has made its output folder and is starting the embedded services
])
def test_ctrl_c_before_the_job_exists_ends_the_command_with_one_line_and_no_output(shared_data, tmp_path, module):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", INTERRUPT_ON_IMPORT, module, "run", "math-errors",
                           "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"),
                           "--templates", str(shared_data / "formalization-templates"), "--indices", "0-9",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "flawforge: interrupted\n")
    assert not out.exists()

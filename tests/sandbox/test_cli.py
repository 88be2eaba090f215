"""`flawforge sandbox exec` as a user runs it: JSON on stdout, exit 0 whatever the program did."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ATTACKS = Path(__file__).parent / "attacks"


def sandbox_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flawforge.cli.entry", "sandbox", *args], capture_output=True,
                          text=True, timeout=60)


def test_exec_traces_a_template(shared_data):
    template = shared_data / "formalization-templates" / "tier1" / "1001" / "google_gemini-2.5-flash.py"
    done = sandbox_cli("exec", str(template), "--call", "solve", "--trace")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "ok" and result["return_value"] == {"type": "int", "value": 1145, "type_name": None}
    assert [s["name"] for s in result["trace"]][-2:] == ["money_left", "answer"]


@pytest.mark.parametrize("attack, outcome, options", [
    ("fork_bomb", "forbidden", []),
    ("surrogate_return", "ok", ["--trace"]),
    ("surrogate_output_and_error", "error", []),
    ("huge_fraction_return", "ok", ["--trace"]),
    ("seccomp_keyctl", "forbidden", []),
    ("infinite_loop", "timeout", ["--timeout", "0.5"]),
    ("memory_bomb", "memory_limit", ["--memory", "64"]),
])
def test_exec_exits_0_whatever_the_program_did(attack, outcome, options):
    done = sandbox_cli("exec", str(ATTACKS / f"{attack}.py"), "--call", "solve", *options)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["outcome"] == outcome


def test_exec_without_call_runs_the_module(tmp_path):
    program = tmp_path / "hello.py"
    program.write_text("print('hello')\nraise ValueError('late')\n")
    result = json.loads(sandbox_cli("exec", str(program)).stdout)
    assert (result["outcome"], result["stdout"], result["error"]["type"], result["error"]["line"]) == \
        ("error", "hello\n", "ValueError", 2)
    assert result["trace"] == []


@pytest.mark.parametrize("args, message", [
    (["exec", "/nonexistent/x.py"], "flawforge: error: cannot read /nonexistent/x.py: No such file or directory"),
    (["exec", str(ATTACKS / "fork_bomb.py"), "--timeout", "0"], "flawforge: error: invalid --timeout: Input should be greater than 0"),
    (["exec", str(ATTACKS / "fork_bomb.py"), "--memory", "1"], "flawforge: error: invalid --memory: Input should be greater than or equal to 16"),
])
def test_user_mistakes_get_one_line(args, message):
    done = sandbox_cli(*args)
    assert done.returncode == 2 and done.stderr.strip() == message and done.stdout == ""


def test_layers():
    done = sandbox_cli("layers")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert "process" in report["active"] and set(report["active"]).isdisjoint(report["missing"])

"""The Python API: exact traces, failures located, test runs, batches, limits, recovery."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction

import pytest
from pydantic import ValidationError

from flawforge.proto.sandbox import LAYERS
from flawforge.proto.values import TypedValue
from flawforge.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from tests.sandbox import canary

TYPED = '''\
from fractions import Fraction


def solve():
    count = 3
    price = 2.5
    share = Fraction(2, 3)
    label = "total"
    ready = count > 2
    nothing = None
    total = count * price + share
    huge = 7 ** 20000
    answer = total
    return answer
'''


def test_trace_keeps_exact_values_and_types(sandbox):
    result = sandbox.trace_call(TYPED)
    assert result.outcome == "ok" and result.detail == ""
    assert [(s.name, s.line, s.value.type) for s in result.trace] == [
        ("count", 5, "int"), ("price", 6, "float"), ("share", 7, "fraction"), ("label", 8, "str"),
        ("ready", 9, "bool"), ("nothing", 10, "none"), ("total", 11, "float"), ("huge", 12, "int"),
        ("answer", 13, "float")]
    values = result.final_values()
    assert values["share"] == Fraction(2, 3) and type(values["share"]) is Fraction
    assert values["huge"] == 7 ** 20000
    assert values["total"] == 3 * 2.5 + Fraction(2, 3) and values["ready"] is True
    assert result.return_value == TypedValue.of(3 * 2.5 + Fraction(2, 3))
    assert result.usage.cpu_s > 0 and result.usage.wall_s > 0 and result.usage.max_rss_kb > 0


def test_failure_keeps_the_trace_up_to_it_and_says_where(sandbox):
    result = sandbox.trace_call("def solve():\n    a = 4\n    b = a - 4\n    c = a / b\n    return c\n")
    assert result.outcome == "error"
    assert [(s.name, s.value.to_python()) for s in result.trace] == [("a", 4), ("b", 0)]
    assert (result.error.type, result.error.line, result.error.file) == ("ZeroDivisionError", 4, "program.py")
    assert result.error.message == "division by zero"
    assert 'File "program.py", line 4, in solve' in result.error.traceback
    assert "c = a / b" in result.error.traceback
    assert "ZeroDivisionError at line 4" in result.detail


def test_syntax_error(sandbox):
    result = sandbox.trace_call("def solve():\n    x = = 2\n")
    assert result.outcome == "syntax_error"
    assert result.error.type == "SyntaxError" and result.error.line == 2
    null_byte = sandbox.trace_call("x = 1\0\n")
    assert null_byte.outcome == "syntax_error" and "null bytes" in null_byte.error.message


def test_missing_function_is_an_error(sandbox):
    result = sandbox.trace_call("x = 1\n", "solve")
    assert result.outcome == "error" and result.error.type == "NameError"
    assert "no function 'solve'" in result.error.message


def test_every_binding_form_is_traced_in_order(sandbox):
    source = '''\
def solve():
    a, (b, *c) = 1, (2, 3, 4)
    a += 10
    d: int = a
    for i in range(2):
        e = i
    with open("f.txt", "w") as handle:
        pass
    if (w := a * 2) > 0:
        f = w
    return f
'''
    result = sandbox.trace_call(source)
    assert result.outcome == "ok", result.detail
    assert [(s.name, s.line) for s in result.trace] == [
        ("a", 2), ("b", 2), ("c", 2), ("a", 3), ("d", 4), ("i", 5), ("e", 6), ("i", 5), ("e", 6),
        ("handle", 7), ("w", 9), ("f", 10)]
    assert result.trace[2].value == TypedValue(type="other", value="[3, 4]", type_name="list")
    assert result.return_value.to_python() == 22


def test_module_run_without_a_call_traces_the_top_level(sandbox):
    result = sandbox.execute("x = 2\ny = x ** 10\nprint(y)\n", trace=True)
    assert result.outcome == "ok" and result.return_value is None
    assert [(s.name, s.value.to_python()) for s in result.trace] == [("x", 2), ("y", 1024)]
    assert result.stdout == "1024\n"
    untraced = sandbox.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\n")
    assert (untraced.trace, untraced.stdout, untraced.stderr) == ([], "out\n", "err\n")


def test_exit_status_of_a_module_run(sandbox):
    assert sandbox.execute("import sys\nsys.exit(0)\n").outcome == "ok"
    failed = sandbox.execute("import sys\nsys.exit(3)\n")
    assert failed.outcome == "error" and failed.error.type == "SystemExit"


def test_output_is_capped(sandbox):
    limits = sandbox.limits.model_copy(update={"output_bytes": 100})
    result = sandbox.execute("print('a' * 1000)\n", limits=limits)
    assert result.outcome == "output_limit" and len(result.stdout) == 100
    assert "stdout exceeded 100 bytes" in result.detail


def test_batch_results_in_order_with_the_original_first(sandbox):
    template = "def solve():\n    x = {}\n    answer = x * 2\n    return answer\n"
    variants = [template.format(i) for i in range(1, 12)] + ["def solve(:\n", "def solve():\n    return 1/0\n"]
    results = sandbox.trace_batch(template.format(0), variants)
    assert [r.return_value.to_python() for r in results[:12]] == [2 * i for i in range(12)]
    assert [r.outcome for r in results[12:]] == ["syntax_error", "error"]


def test_units_do_not_share_state(sandbox):
    writer = "import fractions\nfractions.Fraction = float\nopen('left.txt', 'w').write('x')\n"
    reader = "import fractions, os\ndef solve():\n    return (fractions.Fraction.__name__, os.listdir('.'))\n"
    results = sandbox.trace_batch(writer + "def solve():\n    return 1\n", [reader])
    assert results[1].return_value.value == "('Fraction', [])"


def test_run_tests_reports_each_test_from_the_runner(sandbox):
    module = "def add(a, b):\n    return a + b\n"
    tests = '''\
import unittest
from calc import add


class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)

    def test_wrong(self):
        self.assertEqual(add(1, 2), 4)

    def test_broken(self):
        raise RuntimeError("boom")

    @unittest.skip("not today")
    def test_skipped(self):
        pass

    def test_subtests(self):
        for n in range(3):
            with self.subTest(n=n):
                self.assertLess(n, 2)


def test_plain_function():
    assert add(2, 2) == 4
'''
    result = sandbox.run_tests(module, tests, "calc")
    assert result.outcome == "ok", result.detail
    outcomes = {t.name: t.outcome for t in result.tests}
    assert outcomes == {"test_calc.TestAdd.test_small": "passed", "test_calc.TestAdd.test_wrong": "failed",
                        "test_calc.TestAdd.test_broken": "error", "test_calc.TestAdd.test_skipped": "skipped",
                        "test_calc.TestAdd.test_subtests": "failed", "test_calc.test_plain_function": "passed"}
    assert (result.passed, result.failed, result.errors, result.skipped) == (2, 2, 1, 1)
    messages = {t.name: t.message for t in result.tests}
    assert "AssertionError: 3 != 4" in messages["test_calc.TestAdd.test_wrong"]
    assert "RuntimeError: boom" in messages["test_calc.TestAdd.test_broken"]
    assert "(n=2)" in messages["test_calc.TestAdd.test_subtests"]
    assert messages["test_calc.TestAdd.test_skipped"] == "not today"
    assert not result.all_passed


def test_run_tests_when_the_module_does_not_load(sandbox):
    broken = sandbox.run_tests("import nowhere_to_be_found\n", "def test_x():\n    pass\n", "calc")
    assert broken.outcome == "error" and broken.tests == []
    assert broken.error.type == "ModuleNotFoundError" and broken.error.line == 1
    syntax = sandbox.run_tests("X = 1\n", "def test_x(:\n    pass\n", "calc")
    assert syntax.outcome == "syntax_error" and (syntax.error.file, syntax.error.line) == ("test_calc.py", 1)
    failing_import = sandbox.run_tests("def f():\n    return 1\nraise KeyError('k')\n", "def test_x():\n    pass\n", "calc")
    assert (failing_import.error.type, failing_import.error.file, failing_import.error.line) == ("KeyError", "calc.py", 3)
    passing = sandbox.run_tests("X = 1\n", "from calc import X\n\ndef test_x():\n    assert X == 1\n", "calc")
    assert passing.all_passed and passing.passed == 1


def test_a_timeout_keeps_what_was_reported(sandbox):
    limits = sandbox.limits.model_copy(update={"timeout_s": 0.3})
    result = sandbox.run_tests("", "import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    time.sleep(5)\n",
                               "calc", limits=limits)
    assert result.outcome == "timeout"
    assert {t.name: t.outcome for t in result.tests} == {"test_calc.test_a": "passed", "test_calc.test_b": "error"}
    assert 0.3 <= result.usage.wall_s < 2


def test_calls_from_many_threads(sandbox):
    results = {}

    def call(n):
        results[n] = sandbox.trace_call(f"def solve():\n    answer = {n} * 3\n    return answer\n")

    threads = [threading.Thread(target=call, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: r.return_value.to_python() for n, r in results.items()} == {n: 3 * n for n in range(16)}


def test_layers_are_reported_and_required_ones_checked(sandbox):
    report = sandbox.layer_report()
    assert {"process", "rlimits", "wall_timeout", "empty_env", "workdir", "audit", "seccomp"} <= set(report.active)
    assert set(report.active) | set(report.missing) == set(LAYERS)
    with pytest.raises(SandboxUnavailable, match="unknown isolation layer"):
        Sandbox.from_settings(required_layers=["moat"])
    with pytest.raises(SandboxUnavailable, match="required isolation layer.*audit"):
        Sandbox.from_settings(audit=False, required_layers=["audit"])


def test_a_sandbox_that_cannot_start_its_server_is_unavailable():
    """Out of file descriptors (a real limit, in a process of its own): SandboxUnavailable, not a bare OSError."""
    script = (
        "import os, resource\n"
        "from flawforge.sandbox import Sandbox, SandboxUnavailable\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        "held = []\n"
        "try:\n"
        "    while True:\n"
        "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError:\n"
        "    pass\n"
        "try:\n"
        "    Sandbox.from_settings()\n"
        "except SandboxUnavailable as exc:\n"
        "    print('unavailable:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unavailable: the sandbox did not start:"), done.stdout


def test_a_dead_zygote_is_replaced(shared_data):
    with Sandbox.from_settings(limits=SandboxLimits(timeout_s=5), workers=2) as sb:
        slow = threading.Thread(target=lambda: results.append(
            sb.execute("import time\ntime.sleep(3)\n", limits=SandboxLimits(timeout_s=5))))
        results: list = []
        slow.start()
        time.sleep(0.5)
        os.killpg(sb.zygote_pid(), signal.SIGKILL)
        slow.join()
        assert results[0].outcome == "crashed" and "zygote" in results[0].detail
        canary.check(sb)


def test_limits_are_validated():
    with pytest.raises(ValidationError):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValidationError):
        SandboxLimits(memory_mb=1)


@pytest.mark.skipif(os.geteuid() != 0 or sys.platform != "linux", reason="namespaces and setuid need root on Linux")
def test_every_layer_is_active_as_root_on_linux(sandbox):
    assert sandbox.layer_report().missing == {}


FALLBACK_ATTACKS = ["write_outside_workdir", "read_etc_passwd", "socket_rabbitmq", "fork_bomb", "output_flood",
                    "huge_file", "symlink_climb_out", "poison_builtins", "infinite_loop"]


def test_without_namespaces_work_dirs_and_audit_still_hold(shared_data):
    """Where the kernel refuses namespaces: a host temp dir per unit, and the audit layer stops escapes."""
    from tests.sandbox.test_attacks import ATTACKS, header, run_attack

    with Sandbox.from_settings(limits=SandboxLimits(timeout_s=5, workdir_mb=16, file_size_mb=4, output_bytes=16384),
                               workers=2, namespaces=False) as sb:
        report = sb.layer_report()
        assert {"netns", "mountns", "pidns"} <= set(report.missing) and "audit" in report.active
        for name in FALLBACK_ATTACKS:
            run_attack(sb, ATTACKS / f"{name}.py", header(ATTACKS / f"{name}.py")["expect"])
        first = sb.execute("open('left.txt', 'w').write('x')\n")
        second = sb.execute("import os\nprint(os.listdir('.'))\n")
        assert first.outcome == "ok" and second.stdout == "[]\n"


def test_a_stray_process_is_killed_when_nothing_else_stops_it():
    """No uid layer (its process limit would forbid the fork) and no audit: the zygote still kills leftovers."""
    with Sandbox.from_settings(limits=SandboxLimits(timeout_s=5), workers=1, audit=False, namespaces=False,
                                 required_layers=()) as sb:
        result = sb.execute("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
                            "    os._exit(0)\nprint('left a child behind')\n")
        assert result.outcome == "ok" and result.stdout == "left a child behind\n"
        zygote = sb.zygote_pid()
        time.sleep(0.1)
        with open(f"/proc/{zygote}/task/{zygote}/children") as f:
            assert f.read().split() == []


def test_a_read_path_under_tmp_is_seen_by_units(tmp_path):
    """The units' root is a tmpfs mounted over /tmp in the sandbox's own mount namespace; a read path below /tmp
    (a checkout there, with its .venv and pytest) is bound from a descriptor opened before, so units still see it."""
    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "data.txt").write_text("seen\n")
    tmp_path.chmod(0o755)  # units run as other users
    (tmp_path / "data.txt").chmod(0o644)
    with Sandbox.from_settings(read_paths=[str(tmp_path)]) as sb:
        result = sb.execute(f"text = open({str(tmp_path / 'data.txt')!r}).read()\n", trace=True)
    assert result.outcome == "ok", result.detail
    assert result.trace[-1].value.to_python() == "seen\n"

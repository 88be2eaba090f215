"""The sandbox's suite unit on a small project built here: per-test outcomes, coverage, overlays, collection
errors, timeouts, and a denied module that looks absent."""
from __future__ import annotations

import io
import tarfile

import pytest

from flawforge.proto.sandbox import SandboxLimits

PROJECT = {
    "demo-1.0/pkg/__init__.py": "",
    "demo-1.0/pkg/calc.py": ("def add(a, b):\n    return a + b\n\n\ndef halve(x):\n    return x / 2\n\n\n"
                             "def unused():\n    return 0\n"),
    "demo-1.0/tests/test_calc.py": ("from pkg.calc import add, halve\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                                    "def test_halve():\n    assert halve(8) == 4\n\n\n"
                                    "def test_broken():\n    assert add(1, 1) == 3\n"),
    "demo-1.0/tests/test_optional.py": ("try:\n    import _tkinter\nexcept ImportError:\n    _tkinter = None\n\n\n"
                                        "def test_without_tk():\n    assert _tkinter is None\n"),
}
LIMITS = SandboxLimits(timeout_s=60, memory_mb=1024, workdir_mb=16, open_files=256, output_bytes=1 << 20)


def archive(files: dict[str, str] = PROJECT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def sandbox():
    from flawforge.pipelines.debug_conversations import suite_sandbox

    return suite_sandbox()


def outcomes(run) -> dict[str, str]:
    return {t.name: t.outcome for t in run.tests}


def test_clean_run_reports_each_test_and_its_coverage(sandbox):
    run = sandbox.run_suite(archive(), args=["tests"], coverage_files=["pkg/calc.py"], limits=LIMITS)
    assert outcomes(run) == {"tests/test_calc.py::test_add": "passed", "tests/test_calc.py::test_halve": "passed",
                             "tests/test_calc.py::test_broken": "failed",
                             "tests/test_optional.py::test_without_tk": "passed"}
    assert "assert 2 == 3" in next(t.message for t in run.tests if t.name.endswith("test_broken"))
    assert run.coverage["tests/test_calc.py::test_add"] == ["pkg/calc.py::add"]
    assert run.coverage["tests/test_calc.py::test_halve"] == ["pkg/calc.py::halve"]
    assert not any("unused" in key for keys in run.coverage.values() for key in keys)


def test_overlay_changes_one_file_and_selected_files_run(sandbox):
    buggy = PROJECT["demo-1.0/pkg/calc.py"].replace("x / 2", "x / 3")
    run = sandbox.run_suite(archive(), {"pkg/calc.py": buggy}, args=["tests/test_calc.py"], limits=LIMITS)
    assert outcomes(run)["tests/test_calc.py::test_halve"] == "failed"
    assert outcomes(run)["tests/test_calc.py::test_add"] == "passed"
    assert not any(name.startswith("tests/test_optional.py") for name in outcomes(run))


def test_collection_errors_and_timeouts_are_reported(sandbox):
    broken = sandbox.run_suite(archive(), {"pkg/calc.py": "def add(a, b)\n"}, args=["tests"], limits=LIMITS)
    assert list(broken.collection_errors) == ["tests/test_calc.py"]
    assert "SyntaxError" in broken.collection_errors["tests/test_calc.py"]
    looping = PROJECT["demo-1.0/pkg/calc.py"].replace("return a + b", "while True:\n        pass")
    slow = sandbox.run_suite(archive(), {"pkg/calc.py": looping}, args=["tests"],
                             limits=LIMITS.model_copy(update={"timeout_s": 5}))
    assert slow.outcome == "timeout"


# A library with state between tests: a module-level memo, a functools cache, an object's attribute, a parameter that
# works once (an iterator) and one that contextlib can make again.
STATEFUL = {
    "lib-1.0/lib/__init__.py": "",
    "lib-1.0/lib/core.py": ("import functools\n\n_MEMO = {}\n\n\ndef double(x):\n    if x not in _MEMO:\n"
                            "        _MEMO[x] = x * 2\n    return _MEMO[x]\n\n\n@functools.lru_cache(maxsize=None)\n"
                            "def square(x):\n    return x * x\n\n\ndef add(a, b):\n    return a + b\n\n\n"
                            "class Box:\n    def size(self):\n        return 1\n\n    def __secret(self):\n"
                            "        return 2\n\n    def reveal(self):\n        return self.__secret()\n\n\n"
                            "class Settings:\n    def __init__(self):\n        self.scale = 1\n\n\n"
                            "SETTINGS = Settings()\n\n\ndef scaled(x):\n    return x * SETTINGS.scale\n\n\n"
                            "def quadruple(x):\n    return double(x) + double(x) + 0\n"),
    "lib-1.0/tests/test_core.py": ("import contextlib\n\nimport pytest\n\nfrom lib.core import Box, add, double, quadruple, scaled, square\n\n\n"
                                   "@contextlib.contextmanager\ndef once():\n    yield\n\n\n"
                                   "def test_double():\n    assert double(3) == 6\n\n\n"
                                   "def test_square():\n    assert square(4) == 16\n\n\n"
                                   "@pytest.mark.parametrize('context', [once()])\n"
                                   "def test_add_in_context(context):\n    with context:\n        assert add(2, 2) == 4\n\n\n"
                                   "@pytest.mark.parametrize('numbers', [iter([2, 2])])\n"
                                   "def test_add_once(numbers):\n    assert add(next(numbers), next(numbers)) == 4\n\n\n"
                                   "def test_box():\n    assert Box().size() == 1 and Box().reveal() == 2\n\n\n"
                                   "def test_scaled():\n    assert scaled(2) == 2\n\n\n"
                                   "def test_quadruple():\n    assert quadruple(1) == 4\n"),
}
CORE = STATEFUL["lib-1.0/lib/core.py"]
STATEFUL_TESTS = [f"tests/test_core.py::{name}" for name in ("test_double", "test_square", "test_add_in_context[context0]",
                                                               "test_add_once[numbers0]", "test_box", "test_scaled",
                                                               "test_quadruple")]


def stateful_archive() -> bytes:
    return archive(STATEFUL)


def change(qualname: str, old: str, new: str, tests=("tests/test_core.py",)):
    from flawforge.proto.sandbox import SuiteChange

    assert old in CORE
    return SuiteChange(path="lib/core.py", qualname=qualname, source=CORE.replace(old, new), tests=list(tests))


def batch(sandbox, changes, timeout_s: float = 60):
    return sandbox.run_suite_batch(stateful_archive(), changes, args=["tests"], modules=["lib/core.py"],
                                   baseline=STATEFUL_TESTS, limits=LIMITS.model_copy(update={"timeout_s": timeout_s}))


def test_each_change_of_a_suite_batch_gets_what_a_unit_of_its_own_gets(sandbox):
    """Outcomes and failure texts as in a unit of its own: tracebacks quote the changed file's lines, also in
    functions below a change that made the file shorter (quadruple, after double lost two lines)."""
    from flawforge.debugging.verdict import normalized

    shorter = change("double", "    if x not in _MEMO:\n        _MEMO[x] = x * 2\n    return _MEMO[x]\n",
                     "    return str(x)\n", ["tests/test_core.py::test_quadruple"])
    changes = [shorter, change("double", "x * 2", "x * 3", ["tests/test_core.py::test_double"]),
               change("square", "x * x", "x + x", ["tests/test_core.py::test_square", "tests/test_core.py::test_box"]),
               change("Box.size", "return 1", "return 1 // 0", ["tests/test_core.py::test_box"]),
               change("Box.__secret", "return 2", "return 3", ["tests/test_core.py::test_box"])]
    results = batch(sandbox, changes)
    for one, result in zip(changes, results):
        alone = sandbox.run_suite(stateful_archive(), {one.path: one.source}, args=one.tests, limits=LIMITS)
        assert result is not None and outcomes(result) == outcomes(alone), one.qualname
        assert [normalized(t.message) for t in result.tests] == [normalized(t.message) for t in alone.tests]
    assert 'lib/core.py", line 43, in quadruple\n    return double(x) + double(x) + 0\n' in results[0].tests[0].message
    assert outcomes(results[1]) == {"tests/test_core.py::test_double": "failed"}
    assert "assert 9 == 6" in results[1].tests[0].message
    assert 'lib/core.py", line 23, in size\n    return 1 // 0\n' in results[3].tests[0].message
    assert outcomes(results[2]) == {"tests/test_core.py::test_square": "failed", "tests/test_core.py::test_box": "passed"}


def test_a_batch_puts_the_librarys_caches_back_between_changes(sandbox):
    """The first change fills the module's memo and the functools cache with wrong values; the second change's
    tests see them as a unit of its own would (empty), and a wrong change is not hidden by a cached right value."""
    changes = [change("double", "_MEMO[x] = x * 2", "_MEMO[x] = x * 5"),
               change("square", "x * x", "x * x + 1", ["tests/test_core.py::test_square"]),
               change("add", "a + b", "a - b", ["tests/test_core.py::test_double", "tests/test_core.py::test_square"]),
               change("square", "x * x", "x * x - 1", ["tests/test_core.py::test_square"])]
    first, second, third, fourth = batch(sandbox, changes)
    assert outcomes(first)["tests/test_core.py::test_double"] == "failed"
    assert outcomes(second) == {"tests/test_core.py::test_square": "failed"}
    assert outcomes(third) == {"tests/test_core.py::test_double": "passed", "tests/test_core.py::test_square": "passed"}
    assert outcomes(fourth) == {"tests/test_core.py::test_square": "failed"}


def test_changes_a_batch_cannot_vouch_for_are_handed_back(sandbox):
    """Handed back to run alone: a change the unit cannot make; one that fails test_add_once, whose parameter works
    once (the failure cannot be checked by a second run), and a later one that selects that test; the batch goes
    on, and test_add_in_context, whose context manager is made again for each run, runs in every change. A change whose failure stays after it is taken back (it left SETTINGS.scale at 3, an object's attribute the
    namespaces do not show) is handed back and ends the batch: the later ones are not reached. A change that loops
    is a timeout and ends the batch."""
    once, in_context = ["tests/test_core.py::test_add_once"], ["tests/test_core.py::test_add_in_context"]
    unreachable = change("missing", "return 1", "return 5", ["tests/test_core.py::test_box"])
    breaks_add = change("add", "a + b", "a * b + 1", once + in_context)
    after = change("double", "x * 2", "x * 3", ["tests/test_core.py::test_double"])
    keeps_add = change("add", "a + b", "b + a", once)
    breaks_add_again = change("add", "a + b", "a * b + 2", in_context)
    first = batch(sandbox, [unreachable, breaks_add, after, keeps_add, breaks_add_again])
    assert first[:2] == [None, None] and first[3] is None
    assert outcomes(first[2]) == {"tests/test_core.py::test_double": "failed"}
    assert outcomes(first[4]) == {"tests/test_core.py::test_add_in_context[context0]": "failed"}
    leaves_state = change("scaled", "return x * SETTINGS.scale", "SETTINGS.scale = 3\n    return x * SETTINGS.scale",
                          ["tests/test_core.py::test_scaled"])
    assert batch(sandbox, [leaves_state, after]) == [None]  # the second was not reached
    loops = change("square", "return x * x", "while True:\n        pass", ["tests/test_core.py::test_square"])
    made, looped = batch(sandbox, [after, loops, after], timeout_s=3)
    assert outcomes(made) == {"tests/test_core.py::test_double": "failed"}
    assert looped.outcome == "timeout"


WHO_RUNS = {
    "who-1.0/who.py": "def read(path):\n    with open(path) as f:\n        return f.read()\n",
    "who-1.0/tests/test_who.py": (
        "import os\nimport sys\nimport unittest\n\nimport pytest\n\nfrom who import read\n\n\n"
        "@pytest.mark.skipif(os.geteuid() == 0, reason='root reads any file')\n"
        "def test_refused_unless_root(tmp_path):\n    path = tmp_path / 'f'\n    path.write_text('x')\n"
        "    path.chmod(0)\n    with pytest.raises(PermissionError):\n        read(path)\n\n\n"
        "def test_unreadable_file(tmp_path):\n    path = tmp_path / 'f'\n    path.write_text('x')\n    path.chmod(0)\n"
        "    with pytest.raises(PermissionError):\n        read(path)\n\n\n"
        "def test_readable_file(tmp_path):\n    path = tmp_path / 'f'\n    path.write_text('x')\n"
        "    assert read(path) == 'x'\n\n\n"
        "def test_subtests(subtests):\n    for n in range(3):\n        with subtests.test(n=n):\n"
        "            assert n != 1\n\n\n"
        "class TestCase(unittest.TestCase):\n    def test_failing_subtest(self):\n        for n in range(3):\n"
        "            with self.subTest(n=n):\n                self.assertNotEqual(n, 1)\n\n"
        "    def test_passing_subtests(self):\n        for n in range(3):\n            with self.subTest(n=n):\n"
        "                self.assertGreaterEqual(n, 0)\n"),
}


def test_a_test_that_depends_on_its_user_reads_differently_as_the_other_user(sandbox):
    """A run as the other user (root here, where units are not) skips the test that skips for root and fails the
    one that expects a file it made unreadable to refuse it; the others keep their outcomes."""
    project = archive(WHO_RUNS)
    own = outcomes(sandbox.run_suite(project, args=["tests"], limits=LIMITS))
    other = outcomes(sandbox.run_suite(project, args=["tests"], limits=LIMITS, other_user=True))
    user_dependent = {"tests/test_who.py::test_refused_unless_root", "tests/test_who.py::test_unreadable_file"}
    assert {test for test in own if own[test] != other[test]} == user_dependent
    assert own["tests/test_who.py::test_readable_file"] == other["tests/test_who.py::test_readable_file"] == "passed"


def test_a_test_with_a_failing_subtest_is_failing(sandbox):
    """pytest reports a unittest test whose subtest failed as PASSED beside SUBFAILED (-rA): the unit reads it as
    failed, as it does a pytest test with a failing subtest; a test whose subtests all pass passes."""
    run = outcomes(sandbox.run_suite(archive(WHO_RUNS), args=["tests"], limits=LIMITS))
    assert run["tests/test_who.py::test_subtests"] == "failed"
    assert run["tests/test_who.py::TestCase::test_failing_subtest"] == "failed"
    assert run["tests/test_who.py::TestCase::test_passing_subtests"] == "passed"


FIXTURES = {
    "fx-1.0/pkg/__init__.py": "",
    "fx-1.0/pkg/calc.py": "def make():\n    return 2\n\n\ndef double(x):\n    return 2 * x\n",
    "fx-1.0/tests/test_fx.py": (
        "import unittest\n\nimport pytest\n\nfrom pkg.calc import double, make\n\n\n"
        "@pytest.fixture(scope='class')\ndef made():\n    return make()\n\n\n"
        "class TestWithFixture:\n    def test_first(self, made):\n        assert made == 2\n\n"
        "    def test_second(self, made):\n        assert double(made) == 4\n\n\n"
        "class TestWithout:\n    def test_double(self):\n        assert double(1) == 2\n\n\n"
        "class TestUnittest(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        cls.made = make()\n\n"
        "    def test_made(self):\n        self.assertEqual(self.made, 2)\n"),
}


def test_what_a_wide_fixture_runs_reaches_every_test_that_uses_it(sandbox):
    """make() runs once, in the setup of a class-scoped fixture (and of a unittest setUpClass): its coverage is the
    fixture's, the tests of its class name the fixture, and a change to make() selects them, not the other class."""
    from flawforge.debugging.verdict import tests_to_run

    run = sandbox.run_suite(archive(FIXTURES), args=["tests"], coverage_files=["pkg/calc.py"], limits=LIMITS)
    tests = [t.name for t in run.tests]
    assert {t.outcome for t in run.tests} == {"passed"}
    assert run.coverage["<fixture>tests/test_fx.py::TestWithFixture::made"] == ["pkg/calc.py::make"]
    assert "pkg/calc.py::make" not in run.coverage["tests/test_fx.py::TestWithFixture::test_second"]
    assert tests_to_run(run.coverage, tests, "pkg/calc.py", "make") == [
        "tests/test_fx.py::TestWithFixture::test_first", "tests/test_fx.py::TestWithFixture::test_second",
        "tests/test_fx.py::TestUnittest::test_made"]
    assert "tests/test_fx.py::TestWithout::test_double" in tests_to_run(run.coverage, tests, "pkg/calc.py", "double")

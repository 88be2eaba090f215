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
    from flawforge.sandbox.suites import suite_sandbox

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


def test_a_library_module_pytest_rewrites_itself_is_still_covered(sandbox):
    """`python_files = *.py` makes pytest's assertion rewriter import every module, the library's too, before the
    probes' importer can: the profiler covers them, as it covered everything before the probes."""
    project = {**PROJECT, "demo-1.0/pytest.ini": "[pytest]\npython_files = *.py\ntestpaths = tests\n"}
    run = sandbox.run_suite(archive(project), args=["tests"], coverage_files=["pkg/calc.py"], limits=LIMITS)
    assert outcomes(run)["tests/test_calc.py::test_add"] == "passed"
    assert run.coverage["tests/test_calc.py::test_add"] == ["pkg/calc.py::add"]
    assert run.coverage["tests/test_calc.py::test_halve"] == ["pkg/calc.py::halve"]


def test_each_test_reports_how_long_it_took(sandbox):
    """Setup, call and teardown together: a fixture's sleep counts as its test's time."""
    timed = {"demo-1.0/tests/test_timed.py": "import time\n\nimport pytest\n\n\n@pytest.fixture\ndef nap():\n"
                                     "    time.sleep(0.2)\n\n\ndef test_slow(nap):\n    pass\n\n\n"
                                     "def test_quick():\n    pass\n"}
    run = sandbox.run_suite(archive(timed), args=["tests/test_timed.py"], limits=LIMITS)
    seconds = {t.name.rpartition("::")[2]: t.seconds for t in run.tests}
    assert 0.2 <= seconds["test_slow"] < 5 and 0 <= seconds["test_quick"] < 0.05


def test_each_test_file_reports_what_collecting_it_took(sandbox):
    """A file's import and the building of its tests, its classes' included, in CPU seconds: what selecting any of
    its tests costs a run (verdict.cheapest_files)."""
    costly = {**PROJECT, "demo-1.0/tests/test_costly.py": (
        "import time\n\nstarted = time.process_time()\nwhile time.process_time() - started < 0.3:\n    pass\n\n\n"
        "class TestMany:\n    def test_one(self):\n        pass\n")}
    run = sandbox.run_suite(archive(costly), args=["tests"], limits=LIMITS)
    assert outcomes(run)["tests/test_costly.py::TestMany::test_one"] == "passed"
    assert sorted(run.collection_seconds) == ["tests/test_calc.py", "tests/test_costly.py", "tests/test_optional.py"]
    assert 0.3 <= run.collection_seconds["tests/test_costly.py"] < 5
    assert all(0 <= run.collection_seconds[file] < 0.1 for file in ("tests/test_calc.py", "tests/test_optional.py"))


def test_overlay_changes_one_file_and_selected_files_run(sandbox):
    buggy = PROJECT["demo-1.0/pkg/calc.py"].replace("x / 2", "x / 3")
    run = sandbox.run_suite(archive(), {"pkg/calc.py": buggy}, args=["tests/test_calc.py"], limits=LIMITS)
    assert outcomes(run)["tests/test_calc.py::test_halve"] == "failed"
    assert outcomes(run)["tests/test_calc.py::test_add"] == "passed"
    assert not any(name.startswith("tests/test_optional.py") for name in outcomes(run))


def test_a_test_marked_as_an_expected_failure_counts_as_neither_passing_nor_failing(sandbox):
    """XPASS (an xfail test that passed) and XFAIL alike are skipped: the mark says the test may fail in any run; a
    strict xfail that passes fails, as pytest says."""
    marked = {**PROJECT, "demo-1.0/tests/test_marked.py": (
        "import pytest\n\nfrom pkg.calc import add\n\n\n@pytest.mark.xfail(reason='known issue')\n"
        "def test_xpass():\n    assert add(1, 1) == 2\n\n\n@pytest.mark.xfail(reason='known issue')\n"
        "def test_xfail():\n    assert add(1, 1) == 3\n\n\n@pytest.mark.xfail(reason='known issue', strict=True)\n"
        "def test_strict_xpass():\n    assert add(1, 1) == 2\n")}
    run = sandbox.run_suite(archive(marked), args=["tests/test_marked.py"], limits=LIMITS)
    assert outcomes(run) == {"tests/test_marked.py::test_xpass": "skipped", "tests/test_marked.py::test_xfail": "skipped",
                             "tests/test_marked.py::test_strict_xpass": "failed"}
    assert "XPASS known issue" in next(t.message for t in run.tests if t.name.endswith("::test_xpass"))


def test_collection_errors_and_timeouts_are_reported(sandbox):
    broken = sandbox.run_suite(archive(), {"pkg/calc.py": "def add(a, b)\n"}, args=["tests"], limits=LIMITS)
    assert list(broken.collection_errors) == ["tests/test_calc.py"]
    assert "SyntaxError" in broken.collection_errors["tests/test_calc.py"]
    looping = PROJECT["demo-1.0/pkg/calc.py"].replace("return a + b", "while True:\n        pass")
    slow = sandbox.run_suite(archive(), {"pkg/calc.py": looping}, args=["tests"],
                             limits=LIMITS.model_copy(update={"timeout_s": 5}))
    assert slow.outcome == "timeout"


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
    from flawforge.debugging.verdict import Noticing

    run = sandbox.run_suite(archive(FIXTURES), args=["tests"], coverage_files=["pkg/calc.py"], limits=LIMITS)
    tests = [t.name for t in run.tests]
    assert {t.outcome for t in run.tests} == {"passed"}
    assert run.coverage["<fixture>tests/test_fx.py::TestWithFixture::made"] == ["pkg/calc.py::make"]
    assert "pkg/calc.py::make" not in run.coverage["tests/test_fx.py::TestWithFixture::test_second"]
    noticing = Noticing(run.coverage, tests)
    assert noticing.tests("pkg/calc.py", "make") == [
        "tests/test_fx.py::TestWithFixture::test_first", "tests/test_fx.py::TestWithFixture::test_second",
        "tests/test_fx.py::TestUnittest::test_made"]
    assert "tests/test_fx.py::TestWithout::test_double" in noticing.tests("pkg/calc.py", "double")

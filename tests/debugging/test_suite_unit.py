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


def archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in PROJECT.items():
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

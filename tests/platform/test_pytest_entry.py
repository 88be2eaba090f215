"""Plain `pytest` from the checkout root collects what `python -m pytest` does (the latter adds the current
folder to sys.path; the `pytest` script does not)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_pytest_script_imports_the_tests_package():
    # -I keeps the current folder off sys.path, as the installed `pytest` script runs.
    result = subprocess.run([sys.executable, "-I", "-c", "import sys, pytest; sys.exit(pytest.console_main())",
                             "tests/sandbox/test_batch.py", "--collect-only", "-q", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "tests collected" in result.stdout

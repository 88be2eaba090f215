"""The bytecode the host adds to a library's archive (debugging.rewrites): a unit imports the library from it, and
a changed module is compiled from the change, never taken from the clean module's bytecode."""
from __future__ import annotations

import importlib.util
import io
import tarfile

from flawforge.debugging.layout import ProjectLayout, read_archive
from flawforge.debugging import rewrites
from flawforge.debugging.rewrites import bytecode_name, compiled, prepared_archive, with_rewritten_tests
from flawforge.proto.sandbox import SandboxLimits

CORE = "def answer():\n    return 42\n"
PROJECT = {
    "toy-1.0/lib/__init__.py": "",
    "toy-1.0/lib/core.py": CORE,
    "toy-1.0/tests/test_core.py": (
        "import os\n\nimport lib.core\nfrom lib.core import answer\n\n\n"
        "def test_answer():\n    assert answer() == 42\n\n\n"
        "def test_bytecode_beside_the_module():\n"
        "    folder = os.path.join(os.path.dirname(lib.core.__file__), '__pycache__')\n"
        "    assert any(name.startswith('core.') and name.endswith('.pyc') for name in os.listdir(folder))\n"),
}
LAYOUT = ProjectLayout("toy", "1.0", ("",), ("tests",), ("lib/__init__.py", "lib/core.py"))
LIMITS = SandboxLimits(timeout_s=60, memory_mb=1024, workdir_mb=16, open_files=256, output_bytes=1 << 20)


def archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in PROJECT.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


def test_library_bytecode_is_a_pyc_checked_by_the_source_hash():
    made = compiled(CORE.encode(), "lib/core.py")
    assert made[:4] == importlib.util.MAGIC_NUMBER and made[4:8] == b"\x03\x00\x00\x00"
    assert made[8:16] == importlib.util.source_hash(CORE.encode())
    assert compiled(b"def broken(:\n", "lib/core.py") is None
    assert bytecode_name("lib/core.py").startswith("lib/__pycache__/core.cpython-")


def test_units_import_the_bytecode_and_compile_a_changed_module_again():
    from flawforge.sandbox.suites import suite_sandbox

    data = archive()
    files = read_archive(data)
    with_bytecode = with_rewritten_tests(data, files, LAYOUT)
    assert bytecode_name("lib/core.py") in read_archive(with_bytecode)
    sandbox = suite_sandbox()
    clean = sandbox.run_suite(with_bytecode, args=["tests"], limits=LIMITS)
    assert {t.name: t.outcome for t in clean.tests} == {"tests/test_core.py::test_answer": "passed",
                                                        "tests/test_core.py::test_bytecode_beside_the_module": "passed"}
    changed = sandbox.run_suite(with_bytecode, {"lib/core.py": CORE.replace("42", "41")}, args=["tests"],
                                limits=LIMITS)
    outcomes = {t.name: t.outcome for t in changed.tests}
    assert outcomes["tests/test_core.py::test_answer"] == "failed"
    assert "assert 41 == 42" in next(t.message for t in changed.tests if t.name.endswith("test_answer"))


def test_a_unit_runs_the_hosts_bytecode_rather_than_compiling_the_module_again():
    """Bytecode with the clean source's header but other code: the unit runs that code, so import takes the host's
    pyc as made (a header it refused would be compiled over silently, and the test above would still pass)."""
    import marshal

    from flawforge.sandbox.suites import suite_sandbox

    files = dict(read_archive(with_rewritten_tests(archive(), read_archive(archive()), LAYOUT)))
    header = compiled(CORE.encode(), "lib/core.py")[:16]
    files[bytecode_name("lib/core.py")] = header + marshal.dumps(compile(CORE.replace("42", "43"), "lib/core.py",
                                                                         "exec", dont_inherit=True))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"toy-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    run = suite_sandbox().run_suite(buffer.getvalue(), args=["tests/test_core.py::test_answer"], limits=LIMITS)
    assert [(t.name, t.outcome) for t in run.tests] == [("tests/test_core.py::test_answer", "failed")]
    assert "assert 43 == 42" in run.tests[0].message


def test_a_prepared_archive_is_made_once_and_read_back_while_what_makes_it_is_the_same(tmp_path, monkeypatch):
    data = archive()
    made = prepared_archive(data, read_archive(data), LAYOUT, str(tmp_path))
    assert made == with_rewritten_tests(data, read_archive(data), LAYOUT)
    (kept,) = (tmp_path / "prepared").iterdir()
    assert kept.name.endswith(".tar.gz") and kept.read_bytes() == made
    calls = []
    monkeypatch.setattr(rewrites, "with_rewritten_tests", lambda *args: calls.append(args) or b"made again")
    assert prepared_archive(data, read_archive(data), LAYOUT, str(tmp_path)) == made and not calls
    other = ProjectLayout("toy", "1.0", ("",), ("tests",), ("lib/core.py",))
    assert prepared_archive(data, read_archive(data), other, str(tmp_path)) == b"made again" and len(calls) == 1
    assert prepared_archive(data, read_archive(data), LAYOUT, None) == b"made again" and len(calls) == 2
    assert len(list((tmp_path / "prepared").iterdir())) == 2

"""A `suite` unit: a project's pytest suite, run inside the sandbox with a report per test.

The project arrives as a tar.gz (its single top folder stripped) plus an overlay of changed
files; both are written into the unit's work dir, which becomes the project root. pytest is
imported from `python_path` (a read-only path of the host) with plugin autoloading off, and
reports through an in-process plugin: ["ts", id] when a test starts, ["tr", id, outcome,
message] when it ends, ["ce", id, message] for a file that fails to collect. With
`coverage`, ["cv", id, [keys]] names the project functions each test executed ("path::qualname";
id "" holds what ran outside any test, e.g. at import; "<shared fixtures>" marks a test that uses a
fixture wider than itself), for choosing the tests a change can affect.
"""
import base64
import builtins
import io
import os
import sys
import tarfile

from flawforge.sandbox.runtime import policy

MESSAGE_CHARS = 20000
SHARED_FIXTURES = "<shared fixtures>"  # a coverage key: the test uses a fixture wider than itself
BASE_ARGS = ["-q", "--tb=native", "-p", "no:cacheprovider", "-p", "no:faulthandler", "-o", "addopts=",
             "--continue-on-collection-errors", "--color=no"]


def _extract(archive: bytes, root: str) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        tops = {m.name.split("/", 1)[0] for m in members}
        strip = len(tops) == 1 and any("/" in m.name for m in members)
        for member in members:
            name = member.name.partition("/")[2] if strip else member.name
            if not name or name.startswith("/") or ".." in name.split("/"):
                continue
            target = os.path.join(root, name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target) or root, exist_ok=True)
            with tar.extractfile(member) as source, open(target, "wb") as out:
                out.write(source.read())


def _write_overlay(overlay: dict, root: str) -> None:
    for name, text in overlay.items():
        if name.startswith("/") or ".." in name.split("/"):
            continue
        target = os.path.join(root, name)
        os.makedirs(os.path.dirname(target) or root, exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)


class Coverage:
    """Which project functions run while each test runs: the C profiler, enabled per test (a trace function in
    Python cost the suites 3 to 4 times their run time; this costs a fraction)."""

    def __init__(self, root: str, files: list):
        import _lsprof

        self.prefix = root.rstrip("/") + "/"
        self.files = set(files)
        self.keys = {}
        self.profiler = _lsprof.Profiler()
        self.by_test = {}
        self.current = ""
        self.profiler.enable(subcalls=False, builtins=False)

    def key(self, code):
        key = self.keys.get(code, 0)
        if key == 0:
            filename = getattr(code, "co_filename", "")
            path = filename[len(self.prefix):] if filename.startswith(self.prefix) else None
            key = f"{path}::{code.co_qualname}" if path in self.files else None
            self.keys[code] = key
        return key

    def _collect(self) -> None:
        self.profiler.disable()
        found = self.by_test.setdefault(self.current, set())
        for entry in self.profiler.getstats():
            if not isinstance(entry.code, str):
                key = self.key(entry.code)
                if key is not None:
                    found.add(key)
        self.profiler.clear()

    def start(self, test_id: str) -> None:
        self._collect()
        self.current = test_id
        self.profiler.enable(subcalls=False, builtins=False)

    def stop(self) -> None:
        self._collect()
        self.current = ""
        self.profiler.enable(subcalls=False, builtins=False)

    def finish(self) -> None:
        self._collect()


class Reporter:
    """The pytest plugin: one outcome per test, from its setup, call and teardown reports."""

    def __init__(self, send, coverage):
        self.send, self.coverage = send, coverage
        self.outcomes = {}

    def pytest_runtest_logstart(self, nodeid, location):
        self.outcomes[nodeid] = ("passed", "")
        self.send(["ts", nodeid], True)
        if self.coverage is not None:
            self.coverage.start(nodeid)

    def pytest_runtest_logreport(self, report):
        outcome, message = self.outcomes.get(report.nodeid, ("passed", ""))
        if report.failed:
            kind = "failed" if report.when == "call" else "error"
            if outcome == "passed" or outcome == "skipped":
                outcome, message = kind, report.longreprtext[-MESSAGE_CHARS:]
        elif report.skipped and outcome == "passed":
            outcome = "skipped"
            message = str(getattr(report, "wasxfail", "") or report.longreprtext)[-MESSAGE_CHARS:]
        self.outcomes[report.nodeid] = (outcome, message)

    def pytest_runtest_logfinish(self, nodeid, location):
        if self.coverage is not None:
            self.coverage.stop()
        outcome, message = self.outcomes.get(nodeid, ("error", "the test ended without a result"))
        self.send(["tr", nodeid, outcome, message], True)

    def pytest_collection_modifyitems(self, session, config, items):
        """With coverage, marks the tests that use a fixture wider than the test (module, class, session,
        setUpClass, setup_module): what such a fixture computed in an earlier test reaches them too."""
        if self.coverage is None:
            return
        for item in items:
            info = getattr(item, "_fixtureinfo", None)
            definitions = info.name2fixturedefs.values() if info is not None else ()
            if any(getattr(d, "scope", "function") != "function" for defs in definitions for d in defs):
                self.coverage.by_test.setdefault(item.nodeid, set()).add(SHARED_FIXTURES)

    def pytest_collectreport(self, report):
        if report.failed:
            self.send(["ce", report.nodeid, report.longreprtext[-MESSAGE_CHARS:]], True)


def import_pytest(request: dict) -> None:
    """pytest from the host's `python_path`, without the plugins it would find installed there. Modules the
    audit hook forbids look absent to a plain import, so a test that imports one under `try/except ImportError`
    sees what it would see on a host without them (a convenience, not a layer: the hook still judges any
    import that gets past it)."""
    sys.path.extend(request.get("python_path", []))
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # Without them, the home folder and the user name come from the C library's user database, which may ask
    # a daemon over a socket: a call the seccomp layer kills the unit for.
    os.environ["HOME"] = os.getcwd()
    os.environ["USER"] = os.environ["LOGNAME"] = "sandbox"
    import pytest  # noqa: F401

    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:  # imported with pytest in the zygote, before there was a work dir
        tempfile.tempdir = os.getcwd()
    builtins.__import__ = _absent(policy.DENIED_MODULES, builtins.__import__)


def _absent(names, real_import):
    def guarded_import(name, *args, **kwargs):
        if name.partition(".")[0] in names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    return guarded_import


def run_suite(request: dict, send) -> None:
    """Runs in the unit's work dir (the current directory); `send(frame, flush)` reports."""
    import pytest

    root = os.getcwd()
    _extract(base64.b64decode(request["archive"]), root)
    _write_overlay(request.get("overlay") or {}, root)
    sys.path[:0] = [os.path.join(root, p) if p else root for p in request.get("source_roots", [""])]

    coverage = Coverage(root, request.get("coverage_files", [])) if request.get("coverage") else None
    reporter = Reporter(send, coverage)
    try:
        pytest.main(BASE_ARGS + ["--rootdir", root] + list(request.get("args", [])), plugins=[reporter])
    finally:
        if coverage is not None:
            coverage.finish()
    if coverage is not None:
        for test_id, keys in sorted(coverage.by_test.items()):
            send(["cv", test_id, sorted(keys)], False)

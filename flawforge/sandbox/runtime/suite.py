"""A `suite` unit: a project's pytest suite, run inside the sandbox with a report per test.

The project arrives as a tar.gz (its single top folder stripped) plus an overlay of changed
files; both are written into the unit's work dir, which becomes the project root. pytest is
imported from `python_path` (a read-only path of the host) with plugin autoloading off, and
reports through an in-process plugin: ["ts", id] when a test starts, ["tr", id, outcome,
message, seconds] when it ends (seconds: its setup, call and teardown as pytest timed them),
["ce", id, message] for a file that fails to collect, ["cf", {file: seconds}] with the CPU seconds collecting each
test file took (its import and the building of its tests; the first to import the library pays for that too) once
collection ends, ["px", status] with pytest's
exit status at the end. With
`coverage`, ["cv", id, [keys]] names the project functions each test executed ("path::qualname";
id "" holds what ran outside any test, e.g. at import), for choosing the tests a change can affect. A
fixture wider than a test (class, module, package or session scope; unittest's setUpClass) is set up
once for the tests that share it: what its setup ran is kept under its own id,
"<fixture><scope's node id>::<name>" ("" for package and session scope), and each test's keys name the
wide fixtures it uses, so a change to what a fixture ran reaches every test that uses it.
"""
import base64
import builtins
import os
import resource
import sys
import time

from flawforge.sandbox.runtime import policy, probes
from flawforge.sandbox.runtime.archive import MAX_MEMBER_BYTES, project_members

MESSAGE_CHARS = 20000
FIXTURE = "<fixture>"  # the start of a wide fixture's coverage id, and of its key in the keys of a test using it
BASE_ARGS = ["-q", "--tb=native", "-p", "no:cacheprovider", "-p", "no:faulthandler", "-o", "addopts=",
             "--continue-on-collection-errors", "--color=no"]


def _extract(archive: bytes, root: str) -> None:
    # Read as the host reads it (archive.py); a file over the unit's own file size limit is refused unread.
    file_limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    largest = MAX_MEMBER_BYTES if file_limit == resource.RLIM_INFINITY else min(MAX_MEMBER_BYTES, file_limit)
    for name, content in project_members(archive, max_member_bytes=largest):
        target = os.path.join(root, name)
        os.makedirs(os.path.dirname(target) or root, exist_ok=True)
        with open(target, "wb") as out:
            out.write(content)


def _write_overlay(overlay: dict, root: str) -> None:
    for name, text in overlay.items():
        if name.startswith("/") or ".." in name.split("/"):
            continue
        target = os.path.join(root, name)
        os.makedirs(os.path.dirname(target) or root, exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)


class Coverage:
    """Which project functions run while each test runs. The probes compiled into the project's modules (probes.py) add
    their keys to one set, which each test boundary hands to what was running. A module that reached Python without
    them (pytest's assertion rewriter takes what its `python_files` or a plugin's name claims, before any other
    importer) has the C profiler instead: on while pytest collects, then only once such a module is found among those
    imported (looked for at a test boundary where there are more than before). The profiler's hook on every call cost
    the clean run with coverage as much again as the run without; the probes about a tenth."""

    def __init__(self, root: str, files: list, source_roots: list):
        import _lsprof

        self.keys = set()
        self.by_test = {}
        self.current = ""
        self.code_keys = {}
        self.modules_seen = 0
        self.unprobed = False
        setattr(builtins, probes.PROBE, self.keys.add)
        self.finder = probes.ProbingFinder(root, files, source_roots)
        sys.meta_path.insert(0, self.finder)
        self.profiler = _lsprof.Profiler()
        self.profiling = True
        self.profiler.enable(subcalls=False, builtins=False)

    def _key(self, code):
        key = self.code_keys.get(code, 0)
        if key == 0:
            path = self.finder.covered(getattr(code, "co_filename", None))
            key = f"{path}::{code.co_qualname}" if path is not None else None
            self.code_keys[code] = key
        return key

    def _collect(self) -> None:
        found = self.by_test.setdefault(self.current, set())
        found.update(self.keys)
        self.keys.clear()
        if self.profiling:
            self.profiler.disable()
            for entry in self.profiler.getstats():
                if not isinstance(entry.code, str):
                    key = self._key(entry.code)
                    if key is not None:
                        found.add(key)
            self.profiler.clear()
        if len(sys.modules) != self.modules_seen:
            self.modules_seen = len(sys.modules)
            self.unprobed = self.unprobed or any(map(self._unprobed, list(sys.modules.values())))
            self.profiling = self.profiling or self.unprobed
        if self.profiling:
            self.profiler.enable(subcalls=False, builtins=False)

    def _unprobed(self, module) -> bool:
        try:  # the module's own dict: an attribute of a lazily loaded module would load it
            namespace = object.__getattribute__(module, "__dict__")
        except AttributeError:
            return False
        return self.finder.covered(namespace.get("__file__")) is not None \
            and not isinstance(namespace.get("__loader__"), probes.ProbedLoader)

    def collected(self) -> None:
        """Collection is over: the profiler stays on only if a project module was imported without probes."""
        self._collect()
        if not self.unprobed:
            self.profiler.disable()
            self.profiling = False

    def start(self, test_id: str) -> None:
        self._collect()
        self.current = test_id

    def enter(self, key: str) -> str:
        """What runs from now on is `key`'s (a wide fixture's setup); returns whose it was before."""
        before = self.current
        self.start(key)
        return before

    def stop(self) -> None:
        self._collect()
        self.current = ""

    def finish(self) -> None:
        self._collect()
        self.profiler.disable()


class Reporter:
    """The pytest plugin: one outcome per test, from its setup, call and teardown reports."""

    def __init__(self, send, coverage):
        self.send, self.coverage = send, coverage
        self.outcomes = {}
        self.seconds = {}
        self.collect_started = {}
        self.collect_seconds = {}

    def pytest_runtest_logstart(self, nodeid, location):
        self.outcomes[nodeid] = ("passed", "")
        self.send(["ts", nodeid], True)
        if self.coverage is not None:
            self.coverage.start(nodeid)

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        outcome, message = self.outcomes.get(report.nodeid, ("passed", ""))
        if report.failed:
            kind = "failed" if report.when == "call" else "error"
            if outcome == "passed" or outcome == "skipped":
                outcome, message = kind, report.longreprtext[-MESSAGE_CHARS:]
        elif report.skipped and outcome == "passed":
            outcome = "skipped"
            message = str(getattr(report, "wasxfail", "") or report.longreprtext)[-MESSAGE_CHARS:]
        elif hasattr(report, "wasxfail") and outcome == "passed":
            # A test marked as an expected failure that passed (XPASS) says nothing either way: its mark says it
            # may fail in any run, so it is neither a passing test to keep passing nor a failure a bug made.
            outcome, message = "skipped", f"XPASS {report.wasxfail}"[-MESSAGE_CHARS:]
        self.outcomes[report.nodeid] = (outcome, message)

    def pytest_runtest_logfinish(self, nodeid, location):
        if self.coverage is not None:
            self.coverage.stop()
        outcome, message = self.outcomes.get(nodeid, ("error", "the test ended without a result"))
        self.send(["tr", nodeid, outcome, message, round(self.seconds.pop(nodeid, 0.0), 6)], True)

    def pytest_collection_finish(self, session):
        self.send(["cf", {file: round(seconds, 6) for file, seconds in sorted(self.collect_seconds.items())}], False)
        if self.coverage is not None:
            self.coverage.collected()

    def pytest_collection_modifyitems(self, session, config, items):
        """With coverage, adds to each test's keys the wide fixtures it uses (module, class, package, session,
        setUpClass, setup_module), each as fixture_key names the instance the test gets."""
        if self.coverage is None:
            return
        import pytest

        for item in items:
            info = getattr(item, "_fixtureinfo", None)
            for name, definitions in (info.name2fixturedefs.items() if info is not None else ()):
                scope = getattr(definitions[-1], "scope", "function") if definitions else "function"
                if scope in ("class", "module"):
                    node = item.getparent(pytest.Class if scope == "class" else pytest.Module)
                    self.coverage.by_test.setdefault(item.nodeid, set()).add(
                        fixture_key(node.nodeid if node is not None else "", name))
                elif scope != "function":
                    self.coverage.by_test.setdefault(item.nodeid, set()).add(fixture_key("", name))


    def pytest_collectstart(self, collector):
        """Names the file being collected: what its import does (a forbidden operation) is laid at its door."""
        if collector.nodeid.endswith(".py"):
            self.collect_started[collector.nodeid] = time.process_time()
            self.send(["cs", collector.nodeid], False)

    def pytest_collectreport(self, report):
        # A module's report comes after its classes are collected, so its time holds theirs. (A run given node ids
        # starts some modules' collection without reporting it: the run of whole files times every file.)
        started = self.collect_started.pop(report.nodeid, None)
        if started is not None:
            self.collect_seconds[report.nodeid] = time.process_time() - started
        if report.failed:
            self.send(["ce", report.nodeid, report.longreprtext[-MESSAGE_CHARS:]], True)


def fixture_coverage(coverage: Coverage):
    """The pytest plugin that keeps what a wide fixture's setup runs under the fixture's own key."""
    import pytest

    class FixtureCoverage:
        @pytest.hookimpl(wrapper=True)
        def pytest_fixture_setup(self, fixturedef, request):
            scope = getattr(fixturedef, "scope", "function")
            if scope == "function":
                return (yield)
            node = request.node.nodeid if scope in ("class", "module") else ""
            before = coverage.enter(fixture_key(node, fixturedef.argname))
            try:
                return (yield)
            finally:
                coverage.start(before)

    return FixtureCoverage()


def fixture_key(scope_node: str, name: str) -> str:
    """The coverage id of a wide fixture's instance: its scope's node (a class or module; "" for package and
    session scope, taken as one) and its name."""
    return f"{FIXTURE}{scope_node}::{name}"


def import_pytest(request: dict, standard_path: list) -> None:
    """pytest from the host's `python_path`, without the plugins it would find installed there; or, with an
    `environment` (a read-only folder of installed wheels holding the same pytest and what it requires as the
    host's), sys.path is the standard library and that folder alone, and pytest loads the plugins installed in
    it, as in a plain venv of those packages (the project's roots go first, in run_suite). Modules the audit hook
    forbids look absent to a plain import, so a test that imports one under `try/except ImportError` sees what
    it would see on a host without them (a convenience, not a layer: the hook still judges any import that gets
    past it)."""
    environment = request.get("environment")
    if environment:
        sys.path[:] = [*standard_path, environment]
    else:
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


class OtherUser:
    """The unit as another user than it is, for a clean run that tells the tests whose outcome depends on who runs
    them: root where the unit is not (os.getuid() and its kin say 0, USER and LOGNAME say root, and os.chmod and
    os.fchmod leave the owner read and write, and search on a folder, which no mode takes from root), an
    unprivileged user (65534, nobody) where it is root. A test that skips for root, or expects a file it made
    unreadable to refuse it, then has another outcome than in a run as the unit's own user. (Root's reach beyond its
    own files, and a root unit's own, are not imitated.)"""

    NOBODY = 65534

    def enter(self) -> None:
        import stat

        root = os.geteuid() != 0
        uid, name = (0, "root") if root else (self.NOBODY, "nobody")
        for function in ("getuid", "geteuid", "getgid", "getegid"):
            setattr(os, function, lambda: uid)
        os.getresuid = os.getresgid = lambda: (uid, uid, uid)
        os.getgroups = lambda: [uid]
        os.environ["USER"] = os.environ["LOGNAME"] = name
        if not root:
            return

        def keeping_owner(change):
            def changed(target, mode, *args, **kwargs):
                try:
                    folder = stat.S_ISDIR(os.stat(target).st_mode)
                except (OSError, TypeError, ValueError):
                    folder = False
                return change(target, mode | (0o700 if folder else 0o600), *args, **kwargs)

            return changed

        os.chmod, os.fchmod = keeping_owner(os.chmod), keeping_owner(os.fchmod)


def run_suite(request: dict, send) -> None:
    """Runs in the unit's work dir (the current directory); `send(frame, flush)` reports."""
    import pytest

    root = os.getcwd()
    _extract(base64.b64decode(request["archive"]), root)
    _write_overlay(request.get("overlay") or {}, root)
    sys.path[:0] = [os.path.join(root, p) if p else root for p in request.get("source_roots", [""])]

    coverage = (Coverage(root, request.get("coverage_files", []), request.get("source_roots", [""]))
                if request.get("coverage") else None)
    reporter = Reporter(send, coverage)
    args = list(request.get("args", []))
    if request.get("other_user"):
        OtherUser().enter()
        # pytest's default temporary folder must be owned by the user it sees: a folder of the run's own instead
        args = ["--basetemp", os.path.join(root, ".pytest-other-user"), *args]
    try:
        status = pytest.main(BASE_ARGS + ["--rootdir", root] + args,
                             plugins=[reporter] + ([fixture_coverage(coverage)] if coverage is not None else []))
    finally:
        if coverage is not None:
            coverage.finish()
    # pytest's own verdict on the session: a run it ended early (2, interrupted: a KeyboardInterrupt or
    # pytest.exit in a test; 3, internal error) reports only the tests before the stop.
    send(["px", int(status)], True)
    if coverage is not None:
        for test_id, keys in sorted(coverage.by_test.items()):
            send(["cv", test_id, sorted(keys)], False)

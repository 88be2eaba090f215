"""A `suite` unit: a project's pytest suite, run inside the sandbox with a report per test.

The project arrives as a tar.gz (its single top folder stripped) plus an overlay of changed
files; both are written into the unit's work dir, which becomes the project root. pytest is
imported from `python_path` (a read-only path of the host) with plugin autoloading off, and
reports through an in-process plugin: ["ts", id] when a test starts, ["tr", id, outcome,
message] when it ends, ["ce", id, message] for a file that fails to collect, ["px", status] with pytest's
exit status at the end. With
`coverage`, ["cv", id, [keys]] names the project functions each test executed ("path::qualname";
id "" holds what ran outside any test, e.g. at import), for choosing the tests a change can affect. A
fixture wider than a test (class, module, package or session scope; unittest's setUpClass) is set up
once for the tests that share it: what its setup ran is kept under its own id,
"<fixture><scope's node id>::<name>" ("" for package and session scope), and each test's keys name the
wide fixtures it uses, so a change to what a fixture ran reaches every test that uses it.

A `suite_batch` unit collects the suite once, then runs each of several changes to one function in
turn (see run_suite_batch): pytest's start and the collection are paid once per batch, not once
per change.
"""
import base64
import builtins
import collections.abc
import contextlib
import functools
import os
import resource
import sys
import time
import types

from flawforge.sandbox.runtime import policy
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

    def enter(self, key: str) -> str:
        """What runs from now on is `key`'s (a wide fixture's setup); returns whose it was before."""
        before = self.current
        self.start(key)
        return before

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
            self.send(["cs", collector.nodeid], False)

    def pytest_collectreport(self, report):
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

    coverage = Coverage(root, request.get("coverage_files", [])) if request.get("coverage") else None
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


# Attributes that lead from what a module or class holds to the function it wraps.
WRAPPED = ("__wrapped__", "__func__", "fget", "fset", "fdel", "func")


def _wrapped(obj) -> list:
    """What `obj` wraps, read without running the library's code (no properties, no __getattr__): the slots of
    staticmethod, classmethod, property and partial, else only the object's own __dict__."""
    if isinstance(obj, (staticmethod, classmethod)):
        return [obj.__func__]
    if isinstance(obj, property):
        return [obj.fget, obj.fset, obj.fdel]
    if isinstance(obj, functools.partial):
        return [obj.func]
    own = getattr(obj, "__dict__", None) if not isinstance(obj, (types.ModuleType, type)) else None
    return [own.get(name) for name in WRAPPED] if isinstance(own, dict) else []


class CodeSwap:
    """One change to one function, made to the collected library in place: the function object's code is
    replaced (every reference to the function sees it, as after importing the changed file), or for a removal
    the method is deleted from its class; the changed file is on disk meanwhile, and the module's functions below
    the change get the line numbers they have in it, so tracebacks quote the lines a unit of its own would. The
    host sends only changes whose file differs from the clean one in that function's body alone, or in not
    defining that method (flawforge.debugging.candidates)."""

    def __init__(self, root: str, change: dict):
        self.path = os.path.join(root, change["path"])
        self.qualname, self.source = change["qualname"], change["source"]
        self.removal = change.get("removal", False)
        self.function = self.owner = None
        self.moved: list = []  # (function, its code before the change's lines moved it)

    def apply(self):
        """None when the change is made, else why it cannot be made in this unit."""
        module = next((m for m in list(sys.modules.values())
                       if isinstance(getattr(m, "__file__", None), str) and m.__file__ == self.path), None)
        if module is None:
            return f"{self.path} was not imported by the collected tests"
        if self.removal:
            return self._remove(module)
        self.function = _function_in(module, self.qualname, self.path)
        if self.function is None:
            return f"{self.qualname} is not reachable from its module"
        try:
            code = compile(self.source, self.path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            return f"the changed file does not compile: {exc}"
        found = [c for c in _code_objects(code) if c.co_qualname == self.qualname]
        if len(found) != 1 or found[0].co_freevars != self.function.__code__.co_freevars:
            return f"the changed {self.qualname} does not fit the live function"
        self.clean_code, self.clean_text = self.function.__code__, _read(self.path)
        self._take_file(module)
        self.function.__code__ = found[0]
        return None

    def _take_file(self, module) -> None:
        """The changed file on disk, and the line numbers of the functions below the change moved to match it."""
        delta = self.source.count("\n") - self.clean_text.count("\n")
        if delta:
            prefix = len(os.path.commonprefix([self.clean_text, self.source]))
            suffix = len(os.path.commonprefix([self.clean_text[prefix:][::-1], self.source[prefix:][::-1]]))
            last_changed = self.clean_text.count("\n", 0, len(self.clean_text) - suffix) + 1
            moved_codes: dict = {}
            for function in _functions_of(module, self.path):
                if function is not self.function and function.__code__.co_firstlineno > last_changed:
                    self.moved.append((function, function.__code__))
                    function.__code__ = _moved(function.__code__, delta, moved_codes)
        _write(self.path, self.source)

    def _remove(self, module):
        import abc

        *owner_names, name = self.qualname.split(".")
        owner = _member(module, owner_names)
        if not isinstance(owner, type) or type(owner) not in (type, abc.ABCMeta):
            return f"{'.'.join(owner_names)} is not a plain class"
        name = _stored_name(owner, name)
        if name not in vars(owner) or any(getattr(vars(k).get(name), "__isabstractmethod__", False)
                                          for k in owner.__mro__):
            return f"{self.qualname} is not a concrete method of its class"
        self.owner, self.name, self.member = owner, name, vars(owner)[name]
        self.clean_text = _read(self.path)
        self._take_file(module)
        delattr(owner, name)
        return None

    def restore(self) -> None:
        if self.owner is not None:
            setattr(self.owner, self.name, self.member)
        else:
            self.function.__code__ = self.clean_code
        for function, code in self.moved:
            function.__code__ = code
        _write(self.path, self.clean_text)


def _functions_of(module, path: str) -> list:
    """The functions of `path` reachable from its module: in its namespace and its classes', and what their
    decorators wrap."""
    return list(_reachable_functions(list(vars(module).values()), path, module.__name__, 8))


def _reachable_functions(roots: list, path: str, classes_of: str | None, depth: int):
    """The functions of `path` among `roots` and what they wrap (and, for classes of module `classes_of`, what
    the class holds), `depth` steps deep, each once."""
    seen, frontier = set(), roots
    for _ in range(depth):
        following = []
        for obj in frontier:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, types.FunctionType):
                if obj.__code__.co_filename == path:
                    yield obj
            elif isinstance(obj, type) and obj.__module__ == classes_of:
                following += list(vars(obj).values())
            following += _wrapped(obj)
        frontier = [obj for obj in following if obj is not None]


def _moved(code: types.CodeType, delta: int, done: dict) -> types.CodeType:
    """`code` (and the code nested in it) `delta` lines further down; a code object shared by several functions
    stays shared."""
    if id(code) not in done:
        done[id(code)] = code.replace(co_firstlineno=code.co_firstlineno + delta, co_consts=tuple(
            _moved(const, delta, done) if isinstance(const, types.CodeType) else const for const in code.co_consts))
    return done[id(code)]


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as source:
        return source.read()


def _write(path: str, text: str) -> None:
    import linecache

    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    linecache.cache.pop(path, None)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _function_in(module, qualname: str, path: str):
    """The live function `qualname` of `module`: through the namespaces the qualname names, then through what
    decorators wrap (functools.wraps, staticmethod, classmethod, property, partial-like objects)."""
    holder = _member(module, qualname.split("."))
    return next((function for function in _reachable_functions([holder] if holder is not None else [], path, None, 4)
                 if function.__code__.co_qualname == qualname), None)


def _member(module, names: list):
    """What the namespaces of a module and its classes hold under a qualname's parts, or None."""
    holder = module
    for part in names:
        try:
            holder = vars(holder)[_stored_name(holder, part)]
        except (KeyError, TypeError):
            return None
    return holder


def _stored_name(holder, name: str) -> str:
    """A private method's name as its class stores it."""
    if isinstance(holder, type) and name.startswith("__") and not name.endswith("__"):
        return f"_{holder.__name__.lstrip('_')}{name}"
    return name


def library_modules(root: str, paths: list) -> list:
    """The library's imported modules: those of its files, and the modules it made itself under its packages'
    names (six.moves and its lazy submodules are objects of six's classes, with no file)."""
    files = {os.path.join(root, path) for path in paths}
    modules = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) in files]
    tops = {m.__name__.partition(".")[0] for m in modules}
    made = [m for name, m in list(sys.modules.items())
            if name.partition(".")[0] in tops and isinstance(m, types.ModuleType) and m not in modules
            and getattr(m, "__file__", None) is None]
    return modules + made


def clear_caches(modules: list) -> None:
    """functools caches of the library's functions and methods: a result cached from one change's code must not
    answer the next change's tests."""
    for module in modules:
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if isinstance(value, type) else []
            for member in [value, *members]:
                if isinstance(member, functools._lru_cache_wrapper):
                    member.cache_clear()


# What the interpreter keeps in a module or class on its own account (the warnings filter's record, copyreg's
# cache of slot names): not the library's state.
BOOKKEEPING = frozenset({"__warningregistry__", "__slotnames__"})
_MISSING = object()


class LibraryState:
    """The library's module and class namespaces as they were after collection, which is where a unit of its own
    starts its tests from, put back after each change: rebound names get their object back, added names go (but
    submodules, which an import adds), and the containers they hold (caches, registries) their collected
    contents; modules of the library's packages first imported by a test leave sys.modules. An object's own
    attributes and nested containers are not put back: the batch's other check is that the tests a change failed
    pass again once it is taken back."""

    def __init__(self, modules: list):
        self.namespaces = []  # (module or class, {name: the object it held})
        self.containers = {}  # id -> (container, its contents): each once, however many names hold it
        self.packages = {m.__name__.partition(".")[0] for m in modules}
        self.imported = {name for name in sys.modules if name.partition(".")[0] in self.packages}
        for module in modules:
            self._save(module)
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == module.__name__:
                    self._save(value)

    def _save(self, owner) -> None:
        names = {name: value for name, value in list(vars(owner).items()) if name not in BOOKKEEPING}
        self.namespaces.append((owner, names))
        for value in names.values():
            contents = _contents(value) if id(value) not in self.containers else None
            if contents is not None:
                self.containers[id(value)] = (value, contents)

    def restore(self) -> None:
        for name in [n for n in list(sys.modules) if n.partition(".")[0] in self.packages and n not in self.imported]:
            del sys.modules[name]  # imported by a test: the next import runs the library's own import code again
        for owner, names in self.namespaces:
            current = vars(owner)
            for name in [n for n, v in list(current.items())
                         if n not in names and n not in BOOKKEEPING and not isinstance(v, types.ModuleType)]:
                delattr(owner, name)
            for name, value in names.items():
                if current.get(name, _MISSING) is not value:
                    setattr(owner, name, value)
        for container, contents in self.containers.values():
            _put_back(container, contents)


def _contents(value):
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (list, set)):
        return type(value).__mro__[-2](value)  # list or set, whatever the subclass
    return None


def _put_back(container, contents) -> None:
    if isinstance(container, list):
        container[:] = contents
    else:
        container.clear()
        container.update(contents)


TIMERS = ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")


class ProcessState:
    """The process's state outside the library, as it was after collection, put back after each change: what a
    test (or a change that skips its library's clean-up) leaves there reaches the next change's tests, where a unit
    of its own would not have it. Pending alarms and interval timers are cancelled; signal handlers, os.environ,
    the working directory, the umask, sys.path and sys.meta_path, the sys.modules entries and the stdlib modules'
    attributes (by identity) get their collected values back; files and folders made under the work dir and HOME
    go. `restore` says why when something cannot be put back: a thread still running, a project file changed or
    removed, a folder that cannot be entered or emptied."""

    def __init__(self, root: str, tmp_path_factory=None):
        import signal
        import threading

        self.signal, self.threading, self.tmp_path_factory = signal, threading, tmp_path_factory
        self.handlers = {number: signal.getsignal(number) for number in signal.valid_signals()}
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.umask = os.umask(0)
        os.umask(self.umask)
        self.lists = [(listed, list(listed)) for listed in (sys.path, sys.meta_path, sys.path_hooks)]
        self.modules = dict(sys.modules)
        self.stdlib = [(module, dict(vars(module))) for name, module in self.modules.items()
                       if name.partition(".")[0] in sys.stdlib_module_names and isinstance(module, types.ModuleType)]
        self.threads = set(threading.enumerate())
        self.roots = sorted({os.path.realpath(root), os.path.realpath(os.environ.get("HOME", root))})
        self.files = self._files()

    def _files(self) -> dict[str, tuple]:
        """Each file and folder under the roots: (is a folder, size, mtime_ns)."""
        found = {}
        for top in self.roots:
            for folder, folders, files in os.walk(top):
                for name in folders + files:
                    path = os.path.join(folder, name)
                    try:
                        st = os.lstat(path)
                    except OSError:
                        continue
                    found[path] = (name in folders, st.st_size, st.st_mtime_ns)
        return found

    def restore(self, changed_path: str) -> str | None:
        """Puts the collected state back; why not, if some could not be (`changed_path`, the file a change wrote and
        took back, is not compared)."""
        signal = self.signal
        signal.alarm(0)
        for timer in TIMERS:
            signal.setitimer(getattr(signal, timer), 0)
        for number, handler in self.handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        os.umask(self.umask)
        for listed, contents in self.lists:
            if listed != contents:
                listed[:] = contents
        for name in [n for n, m in list(sys.modules.items()) if n not in self.modules and not _imported(n, m)]:
            del sys.modules[name]  # put there by hand (a fake), not by an import
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        for module, names in self.stdlib:
            current = vars(module)
            for name in [n for n, v in list(current.items()) if n not in names and not isinstance(v, types.ModuleType)]:
                delattr(module, name)
            for name, value in names.items():
                if current.get(name, _MISSING) is not value:
                    setattr(module, name, value)
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            return f"the work dir cannot be entered again: {exc.strerror}"
        running = [t.name for t in self.threading.enumerate() if t not in self.threads and t.is_alive()]
        if running:
            return f"a thread the tests started is still running ({running[0]})"
        return self._restore_files(os.path.realpath(changed_path))

    def _restore_files(self, changed_path: str) -> str | None:
        now = self._files()
        removed = sorted(set(self.files) - set(now))
        if removed:
            return f"{os.path.relpath(removed[0], self.roots[0])} was removed"
        for path, (folder, size, mtime) in now.items():
            before = self.files.get(path)
            if before is not None and before != (folder, size, mtime) and path != changed_path and not folder:
                return f"{os.path.relpath(path, self.roots[0])} was changed"
        made = sorted((path for path in now if path not in self.files), reverse=True)  # a folder's files first
        try:
            for path in made:
                if now[path][0] and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)
        except OSError as exc:
            return f"a file the tests made cannot be removed: {exc.strerror}"
        factory = self.tmp_path_factory
        if factory is not None and getattr(factory, "_basetemp", None) is not None \
                and not os.path.exists(factory._basetemp):
            factory._basetemp = None  # its folder was one of them: the next tmp_path makes it again, as alone
        return None


def _imported(name: str, module) -> bool:
    """The import system put `module` in sys.modules under `name`."""
    return isinstance(module, types.ModuleType) and getattr(getattr(module, "__spec__", None), "name", None) == name


# Parameter values that work once: a second run of the test in the same process fails where a unit of its own
# would not (a generator, an iterator). A context manager made by contextlib.contextmanager works once too, but
# can be made again from what made it (as contextlib's own decorators do): each run gets a fresh one.
SINGLE_USE = (types.GeneratorType, collections.abc.Iterator)


def _runs_once(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(value, SINGLE_USE) for value in callspec.params.values())


class ParameterMakers:
    """How to make each collected test's contextmanager parameters again, read before any test ran (entering one
    drops what made it)."""

    def __init__(self, items):
        self.makers = {}
        for item in items:
            callspec = getattr(item, "callspec", None)
            for name, value in (callspec.params.items() if callspec is not None else ()):
                if isinstance(value, contextlib._GeneratorContextManager) and hasattr(value, "func"):
                    self.makers[item.nodeid, name] = (type(value), value.func, value.args, value.kwds)

    def refresh(self, item) -> None:
        callspec = getattr(item, "callspec", None)
        for name in list(callspec.params) if callspec is not None else ():
            maker = self.makers.get((item.nodeid, name))
            if maker is not None:
                kind, func, args, kwds = maker
                callspec.params[name] = kind(func, args, kwds)


def _in_argument_order(items: list, tests: list) -> list:
    """The collected tests `tests` select, in the order pytest runs them when given `tests` as arguments: by the
    first argument that selects each, then in collection order. (The order is part of the outcome: what a test
    leaves behind, and even a traceback's line, since CPython 3.11 attributes an UnboundLocalError to the line
    before once the function has run often enough to be specialised.)"""
    order: dict[str, tuple[int, int]] = {}
    for position, test in enumerate(tests):
        for index, item in enumerate(items):
            if item.nodeid not in order and _selected(item.nodeid, {test}):
                order[item.nodeid] = (position, index)
    return sorted((item for item in items if item.nodeid in order), key=lambda item: order[item.nodeid])


def _selected(nodeid: str, tests: set) -> bool:
    """The test is one of `tests`, a parametrization of one, or in a file, class or folder they name (what pytest
    runs when given them)."""
    return nodeid in tests or any(nodeid.startswith((test + "::", test + "[", test.rstrip("/") + "/"))
                                  for test in tests)


class ChangeLoop:
    """The pytest plugin of a suite batch: after collection, each change in turn, as a section of the report:
    ["b", index]; the selected tests, reported as in a suite unit; ["o", "", 0, "", 0, cpu_s, wall_s,
    max_rss_kb] and ["d"]. ["a", why] instead when the change cannot be made here. After its tests the change is
    taken back, the library's namespaces (LibraryState) and the process's state outside them (ProcessState) are put
    back and the baseline tests the change failed run again: each must pass, or its failure may have come from an
    earlier run rather than the change (state the namespaces do not show). Then ["p", why] ends the section before
    its ["o"] and the batch with it: that change and the later ones run in units of their own; so does state
    ProcessState cannot put back. A test whose parameters work once (SINGLE_USE) cannot run
    again: a change it fails ends its section with ["a", why], and a later change that selects it gets ["a", why]
    before it is made; both run alone, and the batch goes on."""

    def __init__(self, channel, reporter: Reporter, root: str, request: dict):
        self.channel, self.reporter, self.root, self.request = channel, reporter, root, request

    def pytest_runtestloop(self, session):
        from _pytest.runner import runtestprotocol

        baseline = set(self.request.get("baseline", []))
        modules = library_modules(self.root, self.request.get("modules", []))
        collected = LibraryState(modules)
        process = ProcessState(self.root, getattr(session.config, "_tmp_path_factory", None))
        used_up: set[str] = set()  # tests whose parameters work once, after their one run
        makers = ParameterMakers(session.items)
        for index, change in enumerate(self.request["changes"]):
            self.channel.section = 0
            self.channel.send(["b", index], flush=True)
            started, usage = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
            items = _in_argument_order(session.items, change["tests"])
            spent = next((item.nodeid for item in items if item.nodeid in used_up), None)
            swap = CodeSwap(self.root, change)
            why = f"{spent} works once and has run" if spent is not None else swap.apply()
            if why is not None:
                self.channel.send(["a", why])
                continue
            clear_caches(modules)
            self.reporter.outcomes.clear()
            for position, item in enumerate(items):
                following = items[position + 1] if position + 1 < len(items) else None
                makers.refresh(item)
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
            failed = {test for test, (outcome, _) in self.reporter.outcomes.items()
                      if outcome in ("failed", "error") and test in baseline}
            swap.restore()
            collected.restore()
            clear_caches(modules)
            lost = process.restore(swap.path)
            once = {item.nodeid for item in items if _runs_once(item)}
            used_up |= once
            rerun = [item for item in items if item.nodeid in failed - once]
            leak = None
            for position, item in enumerate(rerun):
                following = rerun[position + 1] if position + 1 < len(rerun) else None
                makers.refresh(item)
                if any(report.failed for report in runtestprotocol(item, log=False, nextitem=following)):
                    leak = leak or f"{item.nodeid} still fails after the change was taken back"
            collected.restore()
            clear_caches(modules)
            lost = lost or process.restore(swap.path)
            if leak is None and lost is not None:  # the next changes would see it: this one and they run alone
                leak = f"the tests left state that cannot be put back: {lost}"
            if leak is not None:  # the change's failures cannot be told from what earlier runs left: it runs alone
                self.channel.send(["p", leak], flush=True)
                break
            if failed & once:  # a failure that cannot be checked by running the test again: it runs alone
                self.channel.send(["a", f"{min(failed & once)} failed and works once"])
                continue
            # Every test of the change ran to its end (an interrupt would have ended the batch): as pytest would say.
            self.channel.send(["px", 1 if any(outcome in ("failed", "error") for outcome, _ in
                                              self.reporter.outcomes.values()) else 0])
            now = resource.getrusage(resource.RUSAGE_SELF)
            self.channel.send(["o", "", 0, "", 0, now.ru_utime + now.ru_stime - usage.ru_utime - usage.ru_stime,
                               time.monotonic() - started, now.ru_maxrss])
            self.channel.send(["d"], flush=True)
        return True


def run_suite_batch(request: dict, channel) -> None:
    """Runs in the unit's work dir: the project, its suite collected once (`args`), then each change of
    `changes` ({path, qualname, source, tests}) as ChangeLoop describes."""
    import pytest

    root = os.getcwd()
    _extract(base64.b64decode(request["archive"]), root)
    sys.path[:0] = [os.path.join(root, p) if p else root for p in request.get("source_roots", [""])]
    reporter = Reporter(lambda frame, flush: channel.send(frame, flush=flush), None)
    loop = ChangeLoop(channel, reporter, root, request)
    pytest.main(BASE_ARGS + ["--no-summary", "--rootdir", root] + list(request.get("args", [])),
                plugins=[reporter, loop])

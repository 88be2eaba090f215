"""What one unit process runs after the zygote forked it and dropped its privileges.

It resets the interpreter state inherited from the zygote, installs the audit policy,
runs the program, the programs of a batch one after another, or the module and its
tests, and reports JSON lines on the result pipe. It ends with os._exit, so atexit
handlers and buffered tricks never run after the report.
"""
import ast
import builtins
import importlib.machinery
import io
import linecache
import os
import resource
import sys
import time
import traceback
import types
import unittest

from json import dumps

from flawforge.sandbox.runtime import policy, suite, wire
from flawforge.sandbox.runtime.instrument import NeedsTree, instrument, instrument_source
from flawforge.sandbox.runtime.sharing import SharedState, reason_to_run_alone

RESULT_FD = 3
PROGRAM_FILE = "program.py"
RECORDER = "__flawforge_record__"
FLUSH_BYTES = 32 * 1024
MESSAGE_CHARS = 4000
TRACEBACK_CHARS = 20000
# Modules of the zygote a program has no business finding in sys.modules.
HIDDEN_MODULES = ("flawforge", "ctypes", "_ctypes", "__main__")


class Channel:
    """Buffered JSON lines on the result pipe; `flush` makes them survive a later kill.

    With `section_cap`, a batch program whose report outgrows it ends the unit on the spot
    (that program then runs alone, where the zygote caps its report as for any unit)."""

    def __init__(self, fd: int, section_cap: int | None = None):
        self.fd = fd
        self.lines: list[str] = []
        self.size = 0
        self.section_cap = section_cap
        self.section = 0

    def send(self, frame: list, *, flush: bool = False) -> None:
        line = dumps(frame, separators=(",", ":")) + "\n"
        if self.section_cap is not None:
            self.section += len(line)
            if self.section > self.section_cap:
                os._exit(wire.RUNNER_FAILED)
        self.lines.append(line)
        self.size += len(line)
        if flush or self.size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        data = memoryview("".join(self.lines).encode("ascii"))
        self.lines.clear()
        self.size = 0
        while data:
            data = data[os.write(self.fd, data):]


def _text(obj, limit: int) -> str:
    try:
        return str(obj)[:limit]
    except Exception:
        return f"<unprintable {type(obj).__name__}>"


def _program_traceback(exc: BaseException, files: set[str]) -> tuple[str | None, int | None, str]:
    """The file and line of the innermost program frame, and the traceback without the runner's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in files:
        tb = tb.tb_next
    file = line = None
    for frame in traceback.extract_tb(tb):
        if frame.filename in files:
            file, line = frame.filename, frame.lineno
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:
        text = f"{type(exc).__name__}: {_text(exc, MESSAGE_CHARS)}\n"
    return file, line, text[-TRACEBACK_CHARS:]


def _error_frame(exc: BaseException, files: set[str]) -> list:
    if isinstance(exc, MemoryError):  # let go of the program's locals before formatting needs memory
        traceback.clear_frames(exc.__traceback__)
    file, line, text = _program_traceback(exc, files)
    code = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else None
    return ["e", type(exc).__name__, _text(exc, MESSAGE_CHARS), line, text, code, file]


# What parsing or compiling raises for a source it cannot take: besides syntax errors, null
# bytes (ValueError) and absurd nesting.
NOT_COMPILABLE = (SyntaxError, ValueError, RecursionError, MemoryError)


def _not_compiled(exc: BaseException, filename: str, channel: Channel) -> None:
    if isinstance(exc, SyntaxError):
        channel.send(["x", type(exc).__name__, _text(exc.msg, MESSAGE_CHARS), exc.lineno, filename])
    else:
        channel.send(["x", type(exc).__name__, _text(exc, MESSAGE_CHARS), None, filename])


def _parse(source: str, channel: Channel) -> ast.Module | None:
    """The program's tree, or None after reporting why it does not parse."""
    try:
        return ast.parse(source, PROGRAM_FILE)
    except NOT_COMPILABLE as exc:
        _not_compiled(exc, PROGRAM_FILE, channel)
        return None


def _compile(source: str, filename: str, channel: Channel, func: str | None = None, trace: bool = False,
             tree: ast.Module | None = None):
    """Compiled code, or None after reporting why the source does not compile."""
    try:
        tree = tree or ast.parse(source, filename)
        code = None
        if trace:
            try:
                code = compile(instrument_source(source, tree, func, RECORDER), filename, "exec")
            except (NeedsTree, SyntaxError):
                code = compile(instrument(tree, func, RECORDER, walrus=":=" in source), filename, "exec")
        else:
            code = compile(source, filename, "exec")
    except NOT_COMPILABLE as exc:
        _not_compiled(exc, filename, channel)
        return None
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return code


def hidden_modules() -> list[str]:
    """Names to drop from sys.modules in each unit (listed once in the zygote: walking
    sys.modules in every unit would touch, and so copy, hundreds of shared pages)."""
    return [name for name in sys.modules if name.partition(".")[0] in HIDDEN_MODULES]


def standard_streams() -> tuple:
    """stdin, stdout, stderr on fds 0-2, made once in the zygote; each unit's fds are dup'ed onto them."""
    return (io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"),
            io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                             line_buffering=True))


class Interpreter:
    """What the unit resets before running untrusted code. `standard_path`: the standard library's part of
    `library_path` (without the sandbox's preloaded folders)."""

    def __init__(self, library_path: list[str], hidden: list[str], streams: tuple, standard_path: list[str]):
        self.library_path, self.hidden, self.streams = library_path, hidden, streams
        self.standard_path = standard_path

    def reset(self) -> None:
        os.environ.clear()
        sys.argv = [PROGRAM_FILE]
        sys.path[:] = self.library_path
        for name in self.hidden:
            sys.modules.pop(name, None)
        sys.stdin, sys.stdout, sys.stderr = self.streams
        sys.dont_write_bytecode = True
        sys.meta_path.insert(0, TempfileInWorkdir(os.getcwd()))


class TempfileInWorkdir:
    """Import hook: sets tempfile.tempdir to the work dir when the program imports tempfile, so it
    never probes /tmp. (tempfile is not imported ahead: it imports random, whose fork hook would
    reseed in every unit.)"""

    def __init__(self, workdir: str):
        self.workdir = workdir

    def find_spec(self, name, path=None, target=None):
        if name != "tempfile":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is not None:
            run_module, workdir = spec.loader.exec_module, self.workdir

            def exec_module(module):
                run_module(module)
                module.tempdir = workdir

            spec.loader.exec_module = exec_module
        return spec


def run_program(source: str, call: str | None, trace: bool, channel: Channel, builtins_namespace,
                tree: ast.Module | None = None) -> None:
    code = _compile(source, PROGRAM_FILE, channel, call, trace, tree)
    if code is None:
        return

    def record(line, name, value):
        channel.send(["s", line, name, wire.encode(value)])
        return value

    main = types.ModuleType("__main__" if call is None else "program")
    main.__file__ = PROGRAM_FILE
    main.__builtins__ = builtins_namespace
    if trace:
        setattr(main, RECORDER, record)
    sys.modules[main.__name__] = main
    try:
        exec(code, main.__dict__)
        if call is not None:
            function = main.__dict__.get(call)
            if not callable(function):
                raise NameError(f"the program defines no function {call!r}")
            channel.send(["r", wire.encode(function())])
    except SystemExit as exc:
        if call is not None or exc.code not in (None, 0):
            channel.send(_error_frame(exc, {PROGRAM_FILE}))
    except BaseException as exc:
        channel.send(_error_frame(exc, {PROGRAM_FILE}))


def _take_output(fd: int, cap: int) -> tuple[str, int]:
    """What a batch program wrote to stdout or stderr (kept as the zygote keeps a unit's), then an
    empty file again for the next program."""
    size = os.fstat(fd).st_size
    text = os.pread(fd, min(size, cap), 0).decode("utf-8", "replace")
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return text, size


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def run_programs(request: dict, channel: Channel, forbidden: list) -> None:
    """One program, or each program of a batch in turn.

    Both call run_program from this same frame, so a program recurses exactly as deep either way.
    Each batch program's report is a section: ["b", index] first (the zygote restarts the wall
    clock on it), then the program's own lines, then ["o", stdout, stdout_bytes, stderr,
    stderr_bytes, cpu_s, wall_s, max_rss_kb] and ["d"]. A program that may not share the unit
    reports ["a", why] instead, and is not run. After a program that changed what the next
    would see (or did something forbidden), ["p", why] ends the batch.
    """
    call, trace = request.get("call"), request.get("trace", False)
    if request["unit"] == wire.EXEC:
        run_program(request["source"], call, trace, channel, builtins)
        return
    output_cap = request["limits"]["output_bytes"]
    shared = SharedState()
    pristine_builtins = dict(builtins.__dict__)
    for index, source in enumerate(request["sources"]):
        channel.section = 0
        channel.send(["b", index], flush=True)
        started, usage = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        linecache.cache.pop(PROGRAM_FILE, None)  # a warning must not quote the previous program
        tree = _parse(source, channel)
        if tree is not None:
            alone = reason_to_run_alone(tree)
            if alone is not None:
                channel.send(["a", alone])
                continue
            run_program(source, call, trace, channel, dict(pristine_builtins), tree)
            for name in ("__main__", "program"):
                sys.modules.pop(name, None)
        _flush_streams()
        stdout, stdout_bytes = _take_output(1, output_cap)
        stderr, stderr_bytes = _take_output(2, output_cap)
        now = resource.getrusage(resource.RUSAGE_SELF)
        channel.send(["o", stdout, stdout_bytes, stderr, stderr_bytes,
                      now.ru_utime + now.ru_stime - usage.ru_utime - usage.ru_stime, time.monotonic() - started,
                      now.ru_maxrss])
        channel.send(["d"])
        if forbidden:
            channel.send(["p", "the program attempted a forbidden operation"])
            return
        if shared.changed():
            channel.send(["p", "the program changed what the next program would see"])
            return


class ReportingResult(unittest.TestResult):
    """unittest's own result object, reporting each test as it starts and ends."""

    def __init__(self, channel: Channel):
        super().__init__()
        self.channel = channel
        self.subtest_failures: list[str] = []
        self.reported = False

    def name(self, test) -> str:
        if isinstance(test, unittest.FunctionTestCase):
            function = test._testFunc
            return f"{function.__module__}.{function.__name__}"
        return test.id()

    def report(self, test, outcome: str, message: str = "") -> None:
        self.reported = True
        self.channel.send(["tr", self.name(test), outcome, message[-TRACEBACK_CHARS:]], flush=True)

    def startTest(self, test):
        super().startTest(test)
        self.subtest_failures, self.reported = [], False
        self.channel.send(["ts", self.name(test)], flush=True)

    def stopTest(self, test):
        super().stopTest(test)
        if not self.reported:
            self.report(test, "failed" if self.subtest_failures else "error",
                        "\n".join(self.subtest_failures) or "the test ended without a result")

    def addSuccess(self, test):
        super().addSuccess(test)
        if self.subtest_failures:
            self.report(test, "failed", "\n".join(self.subtest_failures))
        else:
            self.report(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.report(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self.report(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.report(test, "skipped", _text(reason, MESSAGE_CHARS))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.report(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.report(test, "failed", "unexpected success of a test marked expectedFailure")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.subtest_failures.append(f"{subtest}: {self._exc_info_to_string(err, test)}")


def _test_suite(tests: types.ModuleType) -> unittest.TestSuite:
    """TestCase classes, plus plain test_* functions as pytest would collect them."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    for name, obj in list(vars(tests).items()):
        if name.startswith("test") and isinstance(obj, types.FunctionType) and obj.__module__ == tests.__name__:
            suite.addTest(unittest.FunctionTestCase(obj))
    return suite


def run_tests(request: dict, channel: Channel) -> None:
    module_name = request["module_name"]
    module_file, tests_name = f"{module_name}.py", f"test_{module_name}"
    tests_file = f"{tests_name}.py"
    module_code = _compile(request["module_source"], module_file, channel)
    tests_code = module_code and _compile(request["test_source"], tests_file, channel)
    if tests_code is None:
        return
    module, tests = types.ModuleType(module_name), types.ModuleType(tests_name)
    module.__file__, tests.__file__ = module_file, tests_file
    sys.modules[module_name], sys.modules[tests_name] = module, tests
    try:
        exec(module_code, module.__dict__)
        exec(tests_code, tests.__dict__)
        suite = _test_suite(tests)
    except BaseException as exc:
        channel.send(_error_frame(exc, {module_file, tests_file}))
        return
    suite.run(ReportingResult(channel))


def run(request: dict, interpreter: Interpreter, read_roots: list[str], audit: bool) -> None:
    """The unit's whole life after the fork; never returns. read_roots and the work dir (the
    current directory) are real paths."""
    status = 0
    batch = wire.sections_of(request) > 0
    channel = Channel(RESULT_FD, request["limits"]["result_bytes"] if batch else None)
    suite_unit = request["unit"] == wire.SUITE
    forbidden: list[str] = []

    def report(event: str, reason: str) -> None:
        forbidden.append(event)
        channel.send(["f", event, reason], flush=True)

    try:
        interpreter.reset()
        if suite_unit:  # pytest is ours: imported before the audit hook judges the project
            suite.import_pytest(request, interpreter.standard_path)
        if audit:
            inherited = policy.open_descriptors(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            policy.install(policy.Paths(os.getcwd(), read_roots, inherited), report)
        if request["unit"] == wire.TESTS:
            run_tests(request, channel)
        elif request["unit"] == wire.SUITE:
            suite.run_suite(request, lambda frame, flush: channel.send(frame, flush=flush))
        else:
            run_programs(request, channel, forbidden)
        _flush_streams()
        if not batch:
            channel.send(["d"])
        channel.flush()
    except BaseException:
        status = wire.RUNNER_FAILED  # the runner itself failed (e.g. out of memory while reporting)
    os._exit(status)

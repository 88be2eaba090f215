"""Turns what the zygote reports about a unit (exit status, usage, report lines) into a typed result.

Pure logic: no processes here. The report lines come from the untrusted unit, so each
is parsed defensively; anything malformed makes the unit `crashed`, never the service.
Every text taken from them is made fit for JSON (a lone surrogate becomes its escape), so
a result always serialises and parses back.
A batch unit's report is split into its programs' sections; a program gets its result
from the batch only where that result cannot depend on having shared the unit.
"""
from __future__ import annotations

import errno
import json
import signal
from dataclasses import dataclass, field

from flawforge.proto.sandbox import (ExecutionResult, ProgramError, ResourceUsage, SuiteRunResult, TestCaseResult,
                                     TestRunResult)
from flawforge.proto.values import TraceStep, TypedValue, as_text
from flawforge.sandbox.runtime import wire

CPU_SIGNALS = (signal.SIGXCPU,)
CRASH_SIGNALS = {signal.SIGSEGV: "segmentation fault", signal.SIGBUS: "bus error", signal.SIGABRT: "abort",
                 signal.SIGILL: "illegal instruction", signal.SIGFPE: "floating-point exception"}


def typed(item: list) -> TypedValue:
    value, type_name = wire.decode(item)
    if type_name is not None:
        return TypedValue(type="other", value=as_text(value), type_name=as_text(type_name))
    return TypedValue.of(value)


def _text(value) -> str:
    return as_text(str(value))


@dataclass
class Report:
    """The unit's report lines, parsed."""

    steps: list[TraceStep] = field(default_factory=list)
    return_value: TypedValue | None = None
    error: ProgramError | None = None
    syntax_error: ProgramError | None = None
    error_errno: int | None = None
    forbidden: str | None = None
    forbidden_test: str | None = None  # the test running (else the file collecting) at the first forbidden operation
    collecting: str | None = None
    tests: dict[str, TestCaseResult] = field(default_factory=dict)
    running_test: str | None = None
    collection_errors: dict[str, str] = field(default_factory=dict)
    collection_seconds: dict[str, float] = field(default_factory=dict)
    coverage: dict[str, list[str]] = field(default_factory=dict)
    pytest_status: int | None = None
    done: bool = False
    malformed: str | None = None

    @classmethod
    def parse(cls, data: bytes) -> "Report":
        return cls.of_lines(data.splitlines())

    @classmethod
    def of_lines(cls, lines: list[bytes]) -> "Report":
        report = cls()
        # All lines in one decoder call; line by line only to name a malformed one. (Lines that only parse
        # joined can come only from the program itself, which garbles no report but its own.)
        try:
            frames = json.loads(b"[" + b",".join(lines) + b"]")
        except (ValueError, RecursionError):
            frames = None
        if frames is not None and len(frames) == len(lines):
            lines = frames
        else:
            frames = None
        for number, raw in enumerate(lines, 1):
            if report.done:
                report.malformed = "report lines after the runner finished"
                break
            try:
                report._take(raw if frames is not None else json.loads(raw))
            except (ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:
                report.malformed = f"unreadable report line {number}: {type(exc).__name__}"
                break
        return report

    def _take(self, frame: list) -> None:
        tag = frame[0]
        if tag == "s":
            self.steps.append(TraceStep(line=int(frame[1]), name=_text(frame[2]), value=typed(frame[3])))
        elif tag == "r":
            self.return_value = typed(frame[1])
        elif tag == "e":
            self.error = ProgramError(type=_text(frame[1]), message=_text(frame[2]), line=_optional_int(frame[3]),
                                      traceback=_text(frame[4]), file=_optional_str(frame[6]))
            self.error_errno = _optional_int(frame[5])
        elif tag == "x":
            self.syntax_error = ProgramError(type=_text(frame[1]), message=_text(frame[2]),
                                             line=_optional_int(frame[3]), file=_optional_str(frame[4]))
        elif tag == "f":
            if self.forbidden is None:
                self.forbidden = f"{_text(frame[2])} ({_text(frame[1])})"
                self.forbidden_test = self.running_test or self.collecting
        elif tag == "ts":
            self.running_test = _text(frame[1])
        elif tag == "tr":
            name = _text(frame[1])
            self.tests[name] = TestCaseResult(name=name, outcome=frame[2], message=_text(frame[3]),
                                              seconds=float(frame[4]) if len(frame) > 4 else None)
            self.running_test = None
        elif tag == "ce":
            self.collection_errors[_text(frame[1])] = _text(frame[2])
        elif tag == "cs":
            self.collecting = _text(frame[1])
        elif tag == "cf":
            self.collection_seconds = {_text(file): float(seconds) for file, seconds in frame[1].items()}
        elif tag == "px":
            self.pytest_status = int(frame[1])
        elif tag == "cv":
            self.coverage[_text(frame[1])] = [_text(key) for key in frame[2]]
        elif tag == "d":
            self.done = True
        else:
            raise ValueError(f"unknown tag {tag!r}")


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


def _optional_str(value) -> str | None:
    return None if value is None else _text(value)


def usage_of(header: dict) -> ResourceUsage:
    return ResourceUsage(cpu_s=round(header.get("cpu_s", 0.0), 6), wall_s=round(header.get("wall_s", 0.0), 6),
                         max_rss_kb=int(header.get("max_rss_kb", 0)))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(header: dict, report: Report, limits) -> tuple[str, str]:
    """The outcome and its explanation; the most telling cause wins."""
    exit_code = header.get("exit", 0)
    signal_number = -exit_code if exit_code < 0 else 0
    if header.get("failed"):
        return "crashed", f"the sandbox could not run the unit: {header['failed']}"
    if report.forbidden:
        return "forbidden", f"the code {report.forbidden}"
    if signal_number == signal.SIGSYS:
        return "forbidden", ("made a system call the seccomp filter denies (namespaces, mounts, keyrings, ptrace, "
                             "kernel interfaces, ...): killed by SIGSYS")
    if header.get("timed_out"):
        return "timeout", f"wall-clock limit of {limits.timeout_s:g} s reached"
    if signal_number in CPU_SIGNALS or (signal_number == signal.SIGKILL
                                        and header.get("cpu_s", 0) >= header.get("cpu_limit_s", 1e9) - 0.05):
        return "timeout", f"CPU limit of {header.get('cpu_limit_s')} s reached"
    if header.get("result_overflow"):
        return "output_limit", f"the trace or test report exceeded {limits.result_bytes} bytes"
    for stream in ("stdout", "stderr"):
        if header.get(f"{stream}_bytes", 0) > limits.output_bytes:
            return "output_limit", f"{stream} exceeded {limits.output_bytes} bytes ({header[f'{stream}_bytes']} written)"
    if signal_number == signal.SIGXFSZ or report.error_errno == errno.EFBIG:
        return "output_limit", f"a file exceeded the {limits.file_size_mb} MiB file size limit"
    if header.get("workdir_full") or report.error_errno == errno.ENOSPC:
        return "output_limit", f"the {limits.workdir_mb} MiB work dir is full"
    failure = report.error
    if failure is not None and failure.type == "MemoryError":
        return "memory_limit", f"the program ran out of its {limits.memory_mb} MiB of memory"
    if report.malformed:
        return "crashed", f"the unit's report is malformed: {report.malformed}"
    if not report.done:
        if signal_number:
            why = CRASH_SIGNALS.get(signal_number, _signal_name(signal_number))
            return "crashed", f"killed by {_signal_name(signal_number)} ({why})" if signal_number in CRASH_SIGNALS \
                else f"killed by {why}"
        if exit_code == wire.RUNNER_FAILED:
            return "crashed", "the in-sandbox runner failed (out of memory while reporting?)"
        return "crashed", f"exited with status {exit_code} before the runner reported"
    if report.syntax_error is not None:
        return "syntax_error", f"{report.syntax_error.type}: {report.syntax_error.message}"
    if failure is not None:
        where = f" at line {failure.line}" if failure.line else ""
        return "error", f"{failure.type}{where}: {failure.message}"
    return "ok", ""


def _report(header: dict, data: bytes) -> Report:
    """The unit's report lines, parsed; none of a report that overflowed its cap: the outcome is output_limit, and
    parsing a cap's worth of flood (a trace step per line) would cost the service fifty times its size."""
    return Report() if header.get("result_overflow") else Report.parse(data)


def execution_result(header: dict, data: bytes, limits) -> ExecutionResult:
    report = _report(header, data)
    outcome, detail = classify(header, report, limits)
    return ExecutionResult(outcome=outcome, detail=detail, trace=report.steps, return_value=report.return_value,
                           error=report.syntax_error or report.error, stdout=header.get("stdout", ""),
                           stderr=header.get("stderr", ""), usage=usage_of(header))


def suite_result(header: dict, data: bytes, limits, report: Report | None = None) -> TestRunResult:
    report = report or _report(header, data)
    outcome, detail = classify(header, report, limits)
    tests = list(report.tests.values())
    if report.running_test is not None and report.running_test not in report.tests:
        tests.append(TestCaseResult(name=report.running_test, outcome="error",
                                    message=f"the unit ended during this test: {detail or 'no result reported'}"))
    return TestRunResult(outcome=outcome, detail=detail, tests=tests, error=report.syntax_error or report.error,
                         stdout=header.get("stdout", ""), stderr=header.get("stderr", ""), usage=usage_of(header))


# Outcomes a batch program may keep: its own doing, whatever ran before it in the unit. Anything
# else (a limit, a forbidden operation, a crash) the program gets by running alone.
BATCH_OUTCOMES = ("ok", "error", "syntax_error")


def _sections(data: bytes) -> list[list[bytes]]:
    """The report split at each program's marker line, markers included."""
    sections: list[list[bytes]] = []
    for line in data.splitlines():
        if line.startswith(wire.PROGRAM_MARKER):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return sections


def sections_reached(data: bytes) -> int:
    """How many programs' sections a batch report began (counted without splitting it into lines)."""
    return data.count(b"\n" + wire.PROGRAM_MARKER) + data.startswith(wire.PROGRAM_MARKER)


def _before_overflow(header: dict, data: bytes) -> bytes:
    """A batch report that overflowed its cap, cut after the marker of its last section: the section that filled it
    (then handed back to run alone) is never split into lines or parsed."""
    if not header.get("result_overflow"):
        return data
    start = data.rfind(b"\n" + wire.PROGRAM_MARKER) + 1 or (0 if data.startswith(wire.PROGRAM_MARKER) else -1)
    if start < 0:
        return b""
    end = data.find(b"\n", start)
    return data if end < 0 else data[:end]


def _frame(line: bytes) -> list:
    try:
        frame = json.loads(line)
    except ValueError:
        return []
    return frame if isinstance(frame, list) else []


def _program_header(output: list, cpu_limit: float) -> dict:
    """What the zygote would have said about the program alone, from its ["o", ...] frame."""
    _, stdout, stdout_bytes, stderr, stderr_bytes, cpu_s, wall_s, max_rss_kb = output
    return {"exit": 0, "cpu_s": float(cpu_s), "wall_s": float(wall_s), "max_rss_kb": int(max_rss_kb),
            "stdout": _text(stdout), "stdout_bytes": int(stdout_bytes), "stderr": _text(stderr),
            "stderr_bytes": int(stderr_bytes), "cpu_limit_s": cpu_limit}


@dataclass
class _BatchSection:
    """One program's part of a batch report, from its ["b", index] marker on."""

    handed_back: bool = False  # ["a", why]: not run in the batch
    ended: bool = False        # ["p", why] at its end: the batch stops here
    malformed: bool = False    # its ["o"] frame does not read
    header: dict | None = None  # what the zygote would have said of it alone, when complete (["o"], then ["d"])
    report: bytes = b""        # its own report lines, without the marker, ["o"] and ["p"]


def _batch_sections(data: bytes, count: int, cpu_limit: float):
    """(index, section, whether it is the report's last) for each section in order, up to `count`, while the
    markers count 0, 1, 2, ..."""
    sections = _sections(data)
    for index, lines in enumerate(sections[:count]):
        if _frame(lines[0]) != ["b", index]:
            return
        yield index, _section(lines, cpu_limit), index == len(sections) - 1


def _section(lines: list[bytes], cpu_limit: float) -> _BatchSection:
    body, last = lines[1:], _frame(lines[-1])
    if last[:1] == ["a"]:
        return _BatchSection(handed_back=True)
    ended = last[:1] == ["p"]
    if ended:
        body = body[:-1]
        last = _frame(body[-1]) if body else []
    output = _frame(body[-2]) if len(body) >= 2 else []
    if last == ["d"] and output[:1] == ["o"]:
        try:
            header = _program_header(output, cpu_limit)
        except (ValueError, TypeError):
            return _BatchSection(ended=ended, malformed=True)
        return _BatchSection(ended=ended, header=header, report=b"\n".join(body[:-2] + body[-1:]))
    return _BatchSection(ended=ended, report=b"\n".join(body))


def batch_results(header: dict, data: bytes, limits, count: int) -> list[ExecutionResult | None]:
    """Each program's result from a batch unit's report, in order; None where it must run alone.

    A program keeps its batch result when its section is complete and the outcome is its own
    (BATCH_OUTCOMES), or when the wall clock stopped it. After a program that changed the
    unit's shared state, and from where the report breaks off, all are None (also the program the batch's whole
    wall-clock cap stopped: `expired`)."""
    results: list[ExecutionResult | None] = [None] * count
    if header.get("failed"):
        return results
    data = _before_overflow(header, data)
    spent_cpu = spent_wall = 0.0
    for index, section, final in _batch_sections(data, count, header.get("cpu_limit_s", 1e9)):  # each program's
        if section.handed_back:  # may not share the unit: not run
            continue
        if section.malformed:
            break
        if section.header is not None:
            result = execution_result(section.header, section.report, limits)
            spent_cpu, spent_wall = spent_cpu + result.usage.cpu_s, spent_wall + result.usage.wall_s
            if result.outcome in BATCH_OUTCOMES:
                results[index] = result
            if section.ended:
                break
            continue
        if final and header.get("timed_out") and not header.get("expired"):
            program_header = {**header, "cpu_s": max(0.0, header.get("cpu_s", 0.0) - spent_cpu),
                              "wall_s": max(0.0, header.get("wall_s", 0.0) - spent_wall)}
            result = execution_result(program_header, section.report, limits)
            if result.outcome == "timeout":
                results[index] = result
        break
    return results


def project_suite_result(header: dict, data: bytes, limits) -> SuiteRunResult:
    """A suite unit's result: the test run, plus the files that failed to collect and, if asked, coverage."""
    report = _report(header, data)
    result = suite_result(header, data, limits, report)
    unfinished = report.running_test if report.running_test not in report.tests else None
    return SuiteRunResult(**result.model_dump(exclude={"passed", "failed", "errors", "skipped"}),
                          collection_errors=report.collection_errors,
                          collection_seconds=report.collection_seconds, coverage=report.coverage,
                          pytest_status=report.pytest_status, unfinished=unfinished,
                          forbidden_in=report.forbidden_test)

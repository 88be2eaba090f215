"""Trace-executor: what a sandboxed unit is asked to do and what it reports back.

A unit is one process forked from the sandbox's warm parent: a program (optionally
calling one function, optionally tracing its assignments) or a module with its unit
tests. Results are typed: the outcome says how the unit ended, never just an exit code.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Base64Bytes, Field, model_validator

from flawforge.proto.base import BlobRef, Message, Model
from flawforge.proto.values import TraceStep, TypedValue
from flawforge.sandbox.runtime import wire

Outcome = Literal["ok", "error", "timeout", "memory_limit", "output_limit", "crashed", "syntax_error", "forbidden"]
OUTCOMES: tuple[str, ...] = Outcome.__args__



class UnitKind(StrEnum):
    """What a unit runs: one program, a batch of programs, a module with its tests, or a project's pytest suite
    (the runtime's names)."""

    EXEC = wire.EXEC
    BATCH = wire.BATCH
    TESTS = wire.TESTS
    SUITE = wire.SUITE


TestOutcome = Literal["passed", "failed", "error", "skipped"]

# Layers of isolation the sandbox can put around a unit; each is either active or missing.
Layer = Literal["process", "rlimits", "wall_timeout", "empty_env", "workdir", "netns", "pidns", "mountns",
                "uid", "audit", "seccomp"]
LAYERS: tuple[str, ...] = Layer.__args__


class SandboxLimits(Model):
    """Resources one unit may use. CPU time follows the timeout."""

    timeout_s: float = Field(5.0, gt=0, le=600, description="Wall-clock limit; the unit's process group is killed after it.")
    memory_mb: int = Field(512, ge=16, le=65536, description="Address space the program may add to the warm interpreter, MiB.")
    file_size_mb: int = Field(8, ge=1, le=4096, description="Largest file the unit may write, MiB (stdout and stderr included).")
    workdir_mb: int = Field(32, ge=1, le=4096, description="Size of the unit's throwaway working directory, MiB.")
    open_files: int = Field(64, ge=8, le=4096, description="Open file descriptors.")
    output_bytes: int = Field(64 * 1024, ge=0, le=16 << 20, description="stdout and stderr kept, bytes each; more is an output_limit.")
    result_bytes: int = Field(8 << 20, ge=1024, le=256 << 20, description="Size of the trace and test report; more is an output_limit.")


class ResourceUsage(Model):
    cpu_s: float = Field(description="User plus system CPU seconds.")
    wall_s: float = Field(description="Seconds from fork to exit.")
    max_rss_kb: int = Field(description="Peak resident set size, KiB (shared pages of the warm parent included).")


class ProgramError(Model):
    """Where and how the program failed."""

    type: str = Field(description="Exception type, e.g. ZeroDivisionError, SyntaxError.")
    message: str
    line: int | None = Field(None, description="Line of the program where it was raised (innermost frame in the program).")
    file: str | None = Field(None, description="Which source: program.py, or <module>.py / test_<module>.py of a test run.")
    traceback: str = ""


class ExecutionResult(Model):
    outcome: Outcome
    detail: str = Field("", description="Why the outcome, in words: the forbidden operation, the signal, the limit hit.")
    trace: list[TraceStep] = Field(default_factory=list, description="Assignments in execution order, up to the end or failure.")
    return_value: TypedValue | None = None
    error: ProgramError | None = None
    stdout: str = ""
    stderr: str = ""
    usage: ResourceUsage

    def final_values(self) -> dict[str, Any]:
        """The variables as the program left them: {name: python value}, last assignment wins."""
        return {step.name: step.value.to_python() for step in self.trace}


class TestCaseResult(Model):
    __test__ = False  # a model, not a pytest test class
    name: str = Field(description="unittest id, e.g. test_mod.TestX.test_y or test_mod.test_function.")
    outcome: TestOutcome
    message: str = Field("", description="Failure or error traceback, or the skip reason.")
    seconds: float | None = Field(None, description="Wall-clock seconds of the test's setup, call and teardown, as "
                                                    "pytest timed them (suite runs only).")


class TestRunResult(Model):
    __test__ = False
    outcome: Outcome = Field(description="How the run ended; ok means the runner reported every test.")
    detail: str = ""
    tests: list[TestCaseResult] = Field(default_factory=list)
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    error: ProgramError | None = Field(None, description="Why the module or the tests could not be loaded.")
    stdout: str = ""
    stderr: str = ""
    usage: ResourceUsage

    @model_validator(mode="after")
    def _count(self) -> "TestRunResult":
        counts = {o: sum(t.outcome == o for t in self.tests) for o in ("passed", "failed", "error", "skipped")}
        self.passed, self.failed, self.errors, self.skipped = (counts["passed"], counts["failed"],
                                                               counts["error"], counts["skipped"])
        return self

    @property
    def all_passed(self) -> bool:
        return self.outcome == "ok" and bool(self.tests) and self.passed + self.skipped == len(self.tests)


# --- API requests ----------------------------------------------------------------------------

class ExecRequest(Model):
    source: str = Field(description="Python module source (at most FLAWFORGE_SANDBOX_MAX_SOURCE_BYTES).")
    call: str | None = Field(None, description="Function to call after the module ran; none: just run the module.")
    trace: bool = Field(True, description="Record every assignment in the called function (or at module level).")
    limits: SandboxLimits | None = None


class BatchRequest(Model):
    original: str
    variants: list[str] = Field(description="Variants of the original, e.g. its mutants (at most "
                                            "FLAWFORGE_SANDBOX_MAX_BATCH_VARIANTS).")
    call: str = "solve"
    limits: SandboxLimits | None = None


class BatchResult(Model):
    results: list[ExecutionResult] = Field(description="The original's result first, then each variant's, in order.")


class TestRunRequest(Model):
    __test__ = False
    module_source: str
    test_source: str = Field(description="unittest TestCases and/or plain test_* functions.")
    module_name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100,
                             description="Name the tests import the module by.")
    limits: SandboxLimits | None = None


ENVIRONMENT_DESCRIPTION = ("The folder of an installed environment (a library's wheels, built by the debugging "
                           "pipeline under FLAWFORGE_DEBUG_ENVIRONMENTS, which the service mounts at the same path): "
                           "the project then sees the standard library and it, not the service's site-packages.")


class SuiteOptions(Model):
    """How a project's pytest suite is run: changed files, import roots, pytest arguments, coverage, limits."""

    overlay: dict[str, str] = Field(default_factory=dict, description="Project-relative path -> new text.")
    source_roots: list[str] = Field([""], description="Project folders put on sys.path ('' is the root, e.g. 'src').")
    args: list[str] = Field(default_factory=list, max_length=10_000,
                            description="pytest arguments: test paths or node ids; none: the project's own.")
    coverage: bool = Field(False, description="Report the project functions each test executes.")
    coverage_files: list[str] = Field(default_factory=list, description="The project files coverage looks at.")
    limits: SandboxLimits | None = None
    environment: str | None = Field(None, description=ENVIRONMENT_DESCRIPTION)
    other_user: bool = Field(False, description="The tests see another user than the unit's: root where the unit is "
                                                "not (os.getuid() is 0, os.chmod cannot take the owner's read and write "
                                                "bits), an unprivileged one where it is; for telling the tests whose "
                                                "outcome depends on who runs them.")


class SuiteExecRequest(SuiteOptions):
    """A project's pytest suite over HTTP (POST /sandbox/suite): the project inline, as base64 of its tar.gz."""

    archive: Base64Bytes = Field(description="The project, a tar.gz, base64-encoded; a single top folder is stripped.")


class SuiteRunResult(TestRunResult):
    """A suite unit's result: each test by its pytest node id."""

    collection_errors: dict[str, str] = Field(default_factory=dict, description="Collector id -> why it failed.")
    collection_seconds: dict[str, float] = Field(default_factory=dict,
                                                 description="Test file -> the CPU seconds collecting it took (its "
                                                             "import and the building of its tests), for the files "
                                                             "given whole or in a folder.")
    coverage: dict[str, list[str]] = Field(default_factory=dict, description="Test id -> 'path::qualname' of each "
                                                                           "project function it executed; '' holds "
                                                                           "what ran outside any test.")
    pytest_status: int | None = Field(None, description="pytest's exit status (0 all passed, 1 some failed, 2 "
                                                         "interrupted, 3 internal error, 4 usage error, 5 nothing "
                                                         "collected); None when pytest did not finish.")
    unfinished: str | None = Field(None, description="The test that was running when the run stopped, without a "
                                                     "result of its own (listed among the tests as an error).")
    forbidden_in: str | None = Field(None, description="The test that was running when the first forbidden operation "
                                                       "was attempted, else the test file being collected (None: "
                                                       "none was, or outside both).")

    @property
    def refused_outside_tests(self) -> str | None:
        """What the sandbox refused while no test ran (a module probing for git or the host name at import, which
        carries on without it), or None."""
        outside = self.forbidden_in is None or "::" not in self.forbidden_in
        return self.detail if self.outcome == "forbidden" and outside else None

    def whole(self, standing: str | None = None) -> bool:
        """pytest ran the session to its end and every test it started reported: the outcomes can be trusted. A
        refusal outside any test that every run of the project meets (`standing`) does not spoil a run."""
        ended_well = self.outcome == "ok" or (standing is not None and self.refused_outside_tests == standing)
        return ended_well and self.pytest_status in (0, 1) and self.unfinished is None

    @property
    def complete(self) -> bool:
        return self.whole()


class LayerReport(Model):
    active: list[Layer]
    missing: dict[str, str] = Field(description="Layer -> why it is not active here.")
    required: list[Layer]


# --- bus -----------------------------------------------------------------------------------

EXECUTE_QUEUE = "sandbox.execute"  # SandboxRequested


class SandboxRequested(Message):
    """Run one unit; the request (an ExecRequest, BatchRequest or TestRunRequest, per `unit`) is a blob.

    The worker stores the result (ExecutionResult, BatchResult or TestRunResult) as JSON at
    `result_key`.
    """

    kind = "sandbox.requested"
    unit: UnitKind
    request: BlobRef
    result_key: str = Field(min_length=1)

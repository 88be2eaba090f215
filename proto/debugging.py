"""Debugging-conversation pipeline (seed 002): work items, task instances, rejects, conversations."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from flawforge.proto.base import BlobRef, Message, Model, WorkUnit

FAILING_OUTPUT_BYTES = 8 * 1024
# Of the tests that can notice a candidate, at most this many run it, spread over them (debugging.verdict.spread).
TESTS_PER_CANDIDATE = 64
# Every run of a suite hashes strings with this seed: pytest ids of tests parametrized over a set depend on it.
SUITE_HASH_SEED = 0


class LibraryWorkItem(Message):
    """One library's source distribution, to turn into validated bugs."""

    kind = "debugging.library"
    job_id: str
    archive: BlobRef = Field(description="The library's sdist, a tar.gz.")
    archive_name: str = Field(description="e.g. toolz-1.2.0.tar.gz: names the library and its version.")
    per_library: int = Field(ge=1, description="Candidates to validate.")
    tests_per_candidate: int = Field(TESTS_PER_CANDIDATE, ge=1, description="At most this many of the tests that "
                                                                            "can notice a candidate run it.")
    modifiers: list[str] = Field(min_length=1)
    seed: int
    item_name: str = Field(description="Where the result goes, under the job's items.")
    model: str | None = Field(None, description="The model the lm_rewrite modifier asks through the gateway (none: "
                                                "no LM-rewritten bugs).")


class Baseline(Model):
    """The clean suite, run twice."""

    tests: int = Field(description="Tests the clean suite reported.")
    passing: list[str] = Field(description="Tests that passed in both clean runs: the baseline.")
    flaky: list[str] = Field(default_factory=list, description="Tests whose outcome differed between the runs: flaky, "
                                                               "or depending on who runs them (the second run is "
                                                               "as another user).")
    collection_errors: list[str] = Field(default_factory=list)
    standing_refusal: str | None = Field(None, description="What the sandbox refused outside any test in both clean "
                                                           "runs (the project carried on without it).")
    wall_s: float = Field(description="The first clean run's wall time.")


class Environment(Model):
    """What a library's tests run against: a plain venv of this Python with exactly these packages (wheels)
    reproduces it. Two environments with the same packages and Python are one (content-addressed by `key`)."""

    python: str = Field(description="The interpreter's version, e.g. 3.11.7.")
    packages: list[str] = Field(description="Every installed distribution as name==version, sorted by name.")
    hash_seed: int = Field(SUITE_HASH_SEED, description="The PYTHONHASHSEED the tests ran with.")
    address_randomisation: bool = Field(False, description=(
        "Whether the tests ran with address-space randomisation. The sandbox runs them without: on Python 3.11 "
        "hash(None) is an address, so test ids built from it (a set of parameters holding None) are the recorded "
        "ones only without it (Linux: `setarch -R`; a task's run_tests.py turns it off itself)."))

    @property
    def key(self) -> str:
        import hashlib

        text = "\n".join([f"python=={self.python}", *self.packages])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Exclusion(Model):
    """Something of a library left out of its runs, and why (a requirement with no wheel, a test that needs a
    compiled extension or a missing dependency)."""

    kind: str = Field(description="'requirement' or 'test'.")
    name: str
    reason: str


class ScenarioBrief(Model):
    """What the model wrote about a catalog scenario besides its code: the task, and the solution's steps."""

    problem_statement: str
    outline: list[str]


class Difficulty(Model):
    """What makes an instance hard to fix, and an estimate from it."""

    lines_changed: int = Field(description="Lines the bug's patch removes or adds.")
    functions_touched: int = Field(description="Functions (or classes) the bug is in.")
    fail_to_pass: int = Field(description="Tests that fail with the bug.")
    frame_distance: int | None = Field(description="Lines between the deepest frame of the first failure's "
                                                   "traceback in the buggy file and the nearest line the fix changes; "
                                                   "None where the traceback never enters that file.")
    modifier: str
    estimate: float = Field(description="0-10, a hand-weighted sum of the features (not fitted to solve rates).")


class SolverResult(Model):
    """A solver model's tries at an instance's task (solver.py)."""

    model: str = Field(description="The model that tried, as the llm-gateway serves it.")
    tries: int = Field(ge=1)
    solved: int = Field(ge=0, description="Tries after which FAIL_TO_PASS and PASS_TO_PASS all passed.")
    solve_rate: float = Field(ge=0.0, le=1.0, description="solved / tries.")


class Instance(Model):
    """A validated bug: the clean code passes FAIL_TO_PASS, the buggy code fails them and passes PASS_TO_PASS."""

    schema_version: int = 2
    instance_id: str = Field(description="<source>.<version>.<modifier>__<hash8>")
    source: str = Field(description="The library's name, or the scenario's catalog entry.")
    version: str
    modifier: str
    path: str = Field(description="The buggy file, relative to the project.")
    qualname: str = Field(description="The function or class the bug is in.")
    description: str = Field(description="What the change does, in words.")
    patch: str = Field(description="The bug: a unified diff that applies to the clean code.")
    fix_patch: str = Field(description="The fix: the reverse diff.")
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    pytest_arguments: list[str] = Field(default_factory=list, description=(
        "pytest's arguments that run exactly FAIL_TO_PASS and PASS_TO_PASS, in the order the final gate ran them: "
        "a test file where every test of it is listed, else node ids (empty in records made before: the lists)."))
    failing_output: str = Field(description="The failing tests' output, at most 8 KiB.")
    source_roots: list[str] = Field(description="Project folders on sys.path when the tests run.")
    test_paths: list[str] = Field(description="The project's test folders and files.")
    environment: Environment = Field(description="The packages the tests ran against.")
    scenario: ScenarioBrief | None = Field(None, description="A catalog scenario's task and outline, as the model "
                                                             "wrote them.")
    problem_statement: str = Field("", description="The bug as a user reports it (what was run, what came back, "
                                                   "what was expected), naming neither the buggy line nor the fix.")
    parts: list[str] = Field(default_factory=list, description="A combined bug's parts: the instance ids of the "
                                                                "single bugs it puts together.")
    difficulty: Difficulty | None = Field(None, description="Features of how hard the bug is to fix, and an "
                                                            "estimate from them (difficulty.py).")
    solver: SolverResult | None = Field(None, description="How often a model solved the task (solver.py): only in a "
                                                          "run given a solver model.")

    @property
    def arguments(self) -> list[str]:
        """What runs the instance's tests: pytest_arguments, or for a record without them, the lists."""
        return self.pytest_arguments or self.FAIL_TO_PASS + self.PASS_TO_PASS


class BugReject(Model):
    schema_version: int = 1
    source: str
    version: str
    modifier: str | None = None
    path: str | None = None
    qualname: str | None = None
    hash8: str | None = None
    reason: str = Field(description="survived, timeout, collection_error, no_pass_to_pass, crashed, no_baseline, "
                                    "no_candidates, answer_elsewhere (refused untried: another file of the "
                                    "project holds the clean code the bug changes), ...")
    detail: str = ""


class LibraryResult(Model):
    """What one library produced, stored at the job's item key."""

    source: str
    version: str
    baseline: Baseline | None = None
    tried: int = 0
    tried_by_modifier: dict[str, int] = Field(default_factory=dict)
    instances: list[Instance] = Field(default_factory=list)
    rejects: list[BugReject] = Field(default_factory=list)
    candidates_total: int = Field(0, description="Distinct candidates the modifiers made before the choice.")
    gate_checked: int = Field(0, description="Valid candidates the final gate re-ran; those it kept are the "
                                             "instances, the rest are gate_* rejects.")
    environment: Environment | None = None
    excluded: list[Exclusion] = Field(default_factory=list, description="Requirements and tests left out.")


# The mutator takes one library a work item: baseline, candidates, validation.
LIBRARIES = WorkUnit(queue="debugging.libraries", message=LibraryWorkItem, result=LibraryResult)


class ChatMessage(Model):
    role: str
    content: str


class Conversation(Model):
    """A debugging conversation grounded in one instance."""

    schema_version: int = 2
    instance_id: str
    problem_statement: str
    code_path: str = Field(description="The buggy file, relative to the task folder.")
    fix_lines: list[int] = Field(description="Lines of the buggy file the fix changes; for a fix that only adds "
                                             "lines, the two it goes between.")
    failing_output: str
    fix_patch: str
    messages: list[ChatMessage]
    writer: str = Field(description="'deterministic', or the model that wrote the turns.")


class ConversationReply(Model):
    """What a model writes of a conversation (the gateway's structured output schema): the assistant's two turns in
    prose; the code excerpt and the fix's diff are added from the facts, never written by the model."""

    diagnosis: str = Field(min_length=1, max_length=4000, description="From the failing tests to the bug.")
    fix_explanation: str = Field(min_length=1, max_length=2000, description="What the fix changes and why.")


class RewriteReply(Model):
    """What a model writes for the lm_rewrite modifier (the gateway's structured output schema)."""

    code: str = Field(min_length=1, max_length=12000, description="The whole function, rewritten with one bug.")
    explanation: str = Field(min_length=1, max_length=500, description="What was changed, in one sentence.")


class StatementReply(Model):
    """What a model writes of a problem statement (the gateway's structured output schema): a user's bug report."""

    title: str = Field(min_length=1, max_length=200, description="The issue's title, one line.")
    body: str = Field(min_length=1, max_length=4000, description="What was run, what came back, what was expected.")


# --- scenarios: a catalog entry, written up by a model ------------------------------------------

class CatalogEntry(Model):
    domain: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    subtopic: str = Field(min_length=1)


class BuggyVariant(Model):
    description: str = Field(description="What is wrong in this variant, in one sentence.")
    module_code: str = Field(description="The whole module with the bug in it.")


class ScenarioReply(Model):
    """What the model writes for a catalog entry (the gateway's structured output schema)."""

    problem_statement: str = Field(min_length=1)
    outline: list[str] = Field(min_length=1, description="The solution's steps.")
    # The bound inside the pattern too: constrained decoding enforces a pattern, not a length beside it.
    module_name: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,59}$", max_length=60)
    module_code: str = Field(min_length=1, description="Several cooperating functions with input validation.")
    test_code: str = Field(min_length=1, description="pytest tests importing the module by its name.")
    buggy_variants: list[BuggyVariant] = Field(default_factory=list, max_length=5)


# --- trajectories: an agent's tool calls on a task folder, with what the tools returned ----------

class FunctionCall(Model):
    name: str
    arguments: str = Field(description="The call's arguments, a JSON object as text (OpenAI's format).")


class ToolCall(Model):
    id: str
    type: str = "function"
    function: FunctionCall


class TrajectoryMessage(Model):
    """One message in OpenAI's chat format with tool calls: an assistant's text and calls, or a tool's result."""

    role: str = Field(description="system, user, assistant or tool.")
    content: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, exclude_if=lambda calls: calls is None)
    tool_call_id: str | None = Field(None, exclude_if=lambda call: call is None)


class Trajectory(Model):
    """An agent fixing one task: its calls of run_tests, read_file, search and edit_file, each tool result being
    what the tool returned for that call on the task folder (tools.TaskTools)."""

    schema_version: int = 1
    instance_id: str
    task_id: str = Field(description="The task folder the calls ran on (tasks/<task_id>/).")
    tools: list[dict] = Field(description="The tools' definitions, as OpenAI's `tools` parameter takes them.")
    messages: list[TrajectoryMessage]
    resolved: bool = Field(description="The last run_tests call passed every listed test.")
    writer: str = Field(description="'deterministic', or the model that wrote the reasoning.")


class SolverAttempt(Model):
    """One try of a solver model at a task: its trajectory (every tool result what the tool returned on the task
    folder), how it ended and whether the task's tests passed after it."""

    schema_version: int = 1
    instance_id: str
    model: str
    try_number: int = Field(ge=0)
    temperature: float
    seed: int
    ended: Literal["done", "turns", "context_length"] = Field(
        description="done: the model replied without a tool call; turns: it ran out of turns; context_length: the "
                    "conversation outgrew the model's context.")
    detail: str = Field("", description="Why an attempt ended early, in the gateway's words.")
    solved: bool = Field(description="Every FAIL_TO_PASS and PASS_TO_PASS test passed in the sandbox with the "
                                     "attempt's edits of the library (its edits of test files left out).")
    trajectory: Trajectory

"""A model solving a task with the trajectories' tools (tools.TaskTools) on a fresh copy of its task folder; the
share of its tries after which the task's tests pass is the instance's solve rate.

The model gets the task's problem statement and the folder's file names, with the tools as OpenAI function tools
(the trajectories' definitions, tools.TOOLS), and answers each turn through the gateway with the API's own tool
calls: its text (what it makes of what it has seen) and the calls it makes next, or no call once it is done. Each call
is made on the folder as a trajectory's is, in order, and its result goes back as the `tool` message answering it, so
the conversation is the trajectory itself (OpenAI's tool-call format, every tool result what the tool returned). A
call whose arguments are not JSON, do not fit its tool, or that names no tool there is, is answered with what is
wrong, as an agent's tools answer it.

After at most `turns` replies (or a reply without a call, or a conversation longer than the model's context), the
task's tests run once more in the sandbox with the attempt's edits of the library's own modules and everything else as
handed over: a model that edits the tests or the configuration does not solve the task. Every try samples at
TEMPERATURE with a seed of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from flawforge.debugging.conversation import SYSTEM, TESTS_FILE, is_test_file, problem_statement
from flawforge.debugging.patches import task_id
from flawforge.debugging.tools import ALL_PASS, TOOLS, TaskTools
from flawforge.debugging.trajectories import Session
from flawforge.errors import FlawforgeError
from flawforge.proto.debugging import Instance, SolverAttempt, SolverResult, Trajectory, TrajectoryMessage
from flawforge.proto.inference import Tool
from flawforge.proto.llm import ChatMessage, ChatRequest, ChatResult

# The model's own failure, by the gateway's error code: it ends a try (how it ended), where any other failure of the
# call (the provider's, a replay without a recording) is raised.
ENDED_BY = {"context_length_exceeded": "context_length"}
TEMPERATURE = 0.7
MAX_TOKENS = 4096  # an edit_file call holds the old and the new text
LISTED_FILES = 200  # of the task folder, named in the first user turn
INSTRUCTIONS = (
    "You work on a task folder through the tools you are given. Before each call, say briefly what you make of what "
    "you have seen; each call's result comes back as the tool's message. Once the tests pass, or you can do no more, "
    "reply without a tool call.")
FUNCTION_TOOLS = [Tool.model_validate(tool) for tool in TOOLS]


@dataclass(frozen=True)
class Solver:
    """A run's solver: the model, its tries at each task, the replies each try may take, the run's seed."""

    model: str
    tries: int
    turns: int
    seed: int = 0


def system_prompt() -> str:
    return f"{SYSTEM}\n\n{INSTRUCTIONS}"


def task_message(instance: Instance, files: dict[str, bytes]) -> str:
    names = sorted(files)
    listed = "\n".join(names[:LISTED_FILES]) + (f"\n... and {len(names) - LISTED_FILES} more"
                                                if len(names) > LISTED_FILES else "")
    return (f"{problem_statement(instance)}\n\nThe task folder holds the project; `{TESTS_FILE}` lists the tests "
            f"that must pass. Fix the library, not the tests. Its files:\n{listed}")


def chat_messages(messages: list[TrajectoryMessage]) -> list[ChatMessage]:
    """The trajectory so far as the model reads it: the same turns, its tool calls and the tools' results."""
    return [ChatMessage.model_validate({**message.model_dump(), "content": message.content or ""})
            for message in messages]


def try_seed(seed: int, try_number: int) -> int:
    """The sampling seed of a try (providers take 32-bit seeds)."""
    return (seed * 1000 + try_number) % (1 << 31)


def step_request(model: str, messages: list[TrajectoryMessage], seed: int) -> ChatRequest:
    return ChatRequest(model=model, messages=chat_messages(messages), tools=FUNCTION_TOOLS, max_tokens=MAX_TOKENS,
                       temperature=TEMPERATURE, seed=seed)


def checked_files(instance: Instance, original: dict[str, bytes], edited: dict[str, bytes]) -> dict[str, bytes]:
    """The folder the solve check runs on: the attempt's edits of the library's own Python modules, everything else
    as handed over. Tests, conftests, configuration (pyproject.toml, setup.cfg, pytest.ini...) and files the attempt
    added could make the tests pass without a fix, so they do not count."""
    def counts(path: str) -> bool:
        return path in original and path.endswith(".py") and not is_test_file(instance, path)

    return {path: edited[path] if counts(path) and path in edited else data for path, data in original.items()}


def passes(instance: Instance, run) -> bool:
    """The run finished and every FAIL_TO_PASS and PASS_TO_PASS test in it passed."""
    outcomes = {test.name: test.outcome for test in run.tests}
    return run.whole() and all(outcomes.get(t) == "passed" for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS)


def last_run_passed(messages: list[TrajectoryMessage]) -> bool:
    """The trajectory's last run_tests call passed every test it ran (Trajectory.resolved)."""
    runs = {call.id for m in messages for call in m.tool_calls or [] if call.function.name == "run_tests"}
    results = [m.content or "" for m in messages if m.role == "tool" and m.tool_call_id in runs]
    return bool(results) and results[-1].endswith(ALL_PASS)


def attempt(instance: Instance, tools: TaskTools, ask: Callable[[ChatRequest], ChatResult], solver: Solver,
            try_number: int) -> SolverAttempt:
    """One try at the instance's task on `tools` (a fresh task folder); `ask(request)` is the model's reply (the
    gateway's chat). A conversation longer than the model's context ends the try; any other failure of the call (the
    provider's) is raised."""
    seed = try_seed(solver.seed, try_number)
    session = Session(tools)
    session.say("system", system_prompt())
    session.say("user", task_message(instance, tools.files))
    ended, detail = "turns", ""
    for _ in range(solver.turns):
        try:
            reply = ask(step_request(solver.model, session.messages, seed))
        except FlawforgeError as exc:  # the gateway's errors carry their code
            if exc.code not in ENDED_BY:
                raise
            ended, detail = ENDED_BY[exc.code], str(exc)[:1000]
            break
        if not reply.tool_calls:
            session.say("assistant", reply.content)
            ended = "done"
            break
        session.calls_as_written(reply.content, [(call.function.name, call.function.arguments)
                                                 for call in reply.tool_calls])
    check = TaskTools(instance, tools.original, tools.runner, tools.environment_path, tools.limits)
    check.files = checked_files(instance, tools.original, tools.files)
    trajectory = Trajectory(instance_id=instance.instance_id, task_id=task_id(instance.instance_id), tools=TOOLS,
                            messages=session.messages, resolved=last_run_passed(session.messages), writer=solver.model)
    return SolverAttempt(instance_id=instance.instance_id, model=solver.model, try_number=try_number,
                         temperature=TEMPERATURE, seed=seed, ended=ended, detail=detail,
                         solved=passes(instance, check.suite_run()), trajectory=trajectory)


def solver_result(model: str, attempts: list[SolverAttempt]) -> SolverResult:
    if not attempts:
        raise ValueError("a solve rate needs at least one attempt")
    solved = sum(a.solved for a in attempts)
    return SolverResult(model=model, tries=len(attempts), solved=solved, solve_rate=round(solved / len(attempts), 4))

"""The solver on a small real instance, its replies (the API's own tool calls) recorded here and replayed through the
gateway: a try that reads the file, makes the real fix and runs the tests solves the task (solve rate 1.0); tries that
edit nothing useful, make calls that cannot be made, or edit the tests instead of the library, do not (0.0). Every tool
result is what the sandbox returned; the exports carry the solve rate beside the difficulty."""
from __future__ import annotations

import gzip
import json

import pytest

from flawforge.debugging.conversation import deterministic_tar, task_files
from flawforge.debugging.solver import Solver, attempt, checked_files, solver_result
from flawforge.debugging.tools import TOOLS, TaskTools

from .test_outputs import CORE, TESTS

MODEL = "solver-model"
# The small library of test_outputs, with an upper bound made inclusive and one taken off it.
PROJECT = {"shapes/__init__.py": b"", "shapes/core.py": CORE.encode(), "tests/test_core.py": TESTS.encode()}
BUGGY = CORE.replace("    if value > high:\n        return high\n", "    if value >= high:\n        return high - 1\n")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A validated instance of the small project (clean suite twice, the candidate, the final gate), its task
    folder, and settings with a blob store of its own and the gateway in replay mode (their suite sandbox, which the
    pipeline's solver runs in, is the one every run here uses)."""
    from flawforge.debugging.candidates import Candidate, digest_of
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import validate_scenario
    from flawforge.sandbox.suites import suite_sandbox
    from flawforge.settings import Settings

    blobs = tmp_path_factory.mktemp("solver") / "blobs"
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(blobs), llm_replay=True)
    archive = gzip.compress(deterministic_tar({f"shapes/{p}": d for p, d in PROJECT.items()}), mtime=0)
    built = EnvironmentBuilder.from_settings().for_library(PROJECT, "shapes")
    instance, rejects, _ = validate_scenario(
        suite_sandbox(settings.model_dump_json()), archive, "shapes", "shapes/core.py",
        [Candidate("op_change", "shapes/core.py", "clamp", "a bound made inclusive", BUGGY,
                   digest_of("shapes/core.py", BUGGY))],
        environment=built.environment, environment_path=built.path)
    assert instance is not None, rejects
    assert instance.FAIL_TO_PASS == ["tests/test_core.py::test_clamp_high"]
    return instance, task_files(instance, PROJECT), settings


def fresh_tools(task) -> TaskTools:
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.sandbox.suites import suite_sandbox

    instance, folder, settings = task
    return TaskTools(instance, folder, suite_sandbox(settings.model_dump_json()),
                     EnvironmentBuilder.from_settings(settings).install(instance.environment), SUITE_LIMITS)


def record(task, solver: Solver, scripts: list[list[dict]]) -> list:
    """Each try of `solver` on a fresh task folder, its replies taken from its script and stored in the gateway's
    cache as the answers to the requests the solver made: what a model's replies leave behind."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.llm.cache import ResponseCache, fingerprint
    from flawforge.proto.llm import ChatResult

    instance, _, settings = task
    cache = ResponseCache(LocalBlobStore(settings.blob_dir))
    attempts = []
    for number, script in enumerate(scripts):
        replies = iter(script)

        def ask(request):
            return cache.put(ChatResult(fingerprint=fingerprint(request), provider="recorded", model=MODEL,
                                        **next(replies)))

        attempts.append(attempt(instance, fresh_tools(task), ask, solver, number))
        assert next(replies, None) is None, "the try ended before its script"
    return attempts


def replayed(task, solver: Solver) -> tuple[list, list]:
    """Each try of `solver` on a fresh task folder, the model asked through the gateway's chat in replay mode, with
    the requests the tries sent."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.llm.gateway import Gateway

    instance, _, settings = task
    gateway = Gateway.from_settings(LocalBlobStore(settings.blob_dir), settings)
    requests = []

    def ask(request):
        requests.append(request)
        return gateway.chat(request)

    try:
        return [attempt(instance, fresh_tools(task), ask, solver, n) for n in range(solver.tries)], requests
    finally:
        gateway.close()


def step(reasoning: str, *calls: tuple[str, dict | str]) -> dict:
    """A reply: its text and its calls (a tool's name and its arguments, an object or the JSON text as written),
    with ids of the provider's own; no call: the model is done."""
    tool_calls = [{"id": f"chatcmpl-tool-{n}", "function": {
        "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
        for n, (name, arguments) in enumerate(calls)]
    return {"content": reasoning, "tool_calls": tool_calls or None,
            "finish_reason": "tool_calls" if tool_calls else "stop"}


def the_fix(instance) -> tuple[str, str]:
    from flawforge.debugging.patches import split_hunks
    from flawforge.debugging.trajectories import unique_edit

    (hunk,) = split_hunks(instance.fix_patch)
    return unique_edit(BUGGY, hunk)


def tool_results(attempt_) -> list[tuple[str, str]]:
    calls = {c.id: c.function.name for m in attempt_.trajectory.messages for c in m.tool_calls or []}
    return [(calls[m.tool_call_id], m.content) for m in attempt_.trajectory.messages if m.role == "tool"]


def test_a_try_that_makes_the_real_fix_solves_the_task(task):
    instance = task[0]
    old, new = the_fix(instance)
    script = [step("Let me run the tests first.", ("run_tests", {})),
              step("clamp(50, 0, 10) gives 9; where is clamp?", ("search", {"pattern": r"def clamp\b"})),
              step("Reading it.", ("read_file", {"path": "shapes/core.py", "start_line": 1, "end_line": 12})),
              step("The upper bound is excluded and one is taken off.",
                   ("edit_file", {"path": "shapes/core.py", "old_str": old, "new_str": new})),
              step("Checking.", ("run_tests", {})),
              step("Fixed: the upper bound is kept as it is.")]
    solver = Solver(MODEL, tries=1, turns=10, seed=0)
    recorded = record(task, solver, [script])
    attempts, requests = replayed(task, solver)
    assert [a.trajectory for a in attempts] == [a.trajectory for a in recorded]
    assert [(a.try_number, a.seed, a.ended, a.solved) for a in attempts] == [(0, 0, "done", True)]
    assert solver_result(MODEL, attempts).model_dump() == {"model": MODEL, "tries": 1, "solved": 1, "solve_rate": 1.0}
    results = tool_results(attempts[0])
    assert [name for name, _ in results] == ["run_tests", "search", "read_file", "edit_file", "run_tests"]
    # What the sandbox and the folder really gave: the failure with its values, the function, the pass after the fix.
    assert "FAILED tests/test_core.py::test_clamp_high" in results[0][1] and "9 == 10" in results[0][1]
    assert results[1][1] == "shapes/core.py:4: def clamp(value, low, high):"
    assert "   9         return high - 1" in results[2][1]
    assert results[3][1].startswith("Edited shapes/core.py") and results[4][1] == "9 passed. All tests pass."
    trajectory = attempts[0].trajectory
    assert trajectory.resolved and trajectory.writer == MODEL and trajectory.messages[-1].role == "assistant"
    assert trajectory.messages[-1].content == "Fixed: the upper bound is kept as it is."
    assert {t["function"]["name"] for t in trajectory.tools} == {"run_tests", "read_file", "search", "edit_file"}
    # Every request carried the trajectories' four tools as function tools, and the conversation so far as the
    # trajectory holds it: the model's calls (numbered by the session, not by the provider) and the tools' results.
    assert len(requests) == 6 and all([t.model_dump(exclude_none=True) for t in r.tools] == TOOLS for r in requests)
    last = requests[-1].messages
    assert [m.role for m in last] == ["system", "user"] + ["assistant", "tool"] * 5
    assert [m.model_dump() for m in last[2:]] == [
        {**m.model_dump(), "content": m.content or ""} for m in trajectory.messages[2:-1]]
    assert (last[2].tool_calls[0].id, last[2].tool_calls[0].function.name, last[3].tool_call_id) == \
        ("call_1", "run_tests", "call_1")
    assert last[3].content.startswith("1 failed") and last[2].content == "Let me run the tests first."


def test_tries_that_change_nothing_useful_make_calls_that_cannot_be_made_or_edit_the_tests_do_not_solve_it(task):
    """Calls of no tool there is, and arguments that are not JSON, are answered with what is wrong, as any tool
    result, and the try goes on; two calls in one reply are made in order."""
    docstring = step("Perhaps the docstring is wrong.", ("edit_file", {
        "path": "shapes/core.py", "old_str": "kept between low and high", "new_str": "kept within [low, high]"}))
    scripts = [[step("", ("read_file", {"path": "shapes/core.py"}), ("delete_file", {"path": "tests/test_core.py"})),
                step("Fix the bound.", ("edit_file", '{"path": "shapes/core.py", "old_str": ')), docstring],
               [step("The test expects 10; make it 9.", ("edit_file", {
                   "path": "tests/test_core.py", "old_str": "clamp(50, 0, 10) == 10",
                   "new_str": "clamp(50, 0, 10) == 9"})),
                step("", ("run_tests", {})), step("The tests pass.")]]
    solver = Solver(MODEL, tries=2, turns=3, seed=1)
    recorded = record(task, solver, scripts)
    attempts, _ = replayed(task, solver)
    assert [a.trajectory for a in attempts] == [a.trajectory for a in recorded]
    assert [(a.try_number, a.seed, a.ended, a.solved) for a in attempts] == [(0, 1000, "turns", False),
                                                                            (1, 1001, "done", False)]
    assert solver_result(MODEL, attempts).solve_rate == 0.0
    failed = tool_results(attempts[0])
    assert [name for name, _ in failed] == ["read_file", "delete_file", "edit_file", "edit_file"]
    assert failed[1][1] == "Error: no tool named 'delete_file'"
    assert failed[2][1] == 'Error: the arguments are not JSON: {"path": "shapes/core.py", "old_str": '
    assert [len(m.tool_calls or []) for m in attempts[0].trajectory.messages if m.role == "assistant"] == [2, 1, 1]
    # The edited test passes in the try's own run, but the solve check runs the tests as they were handed over.
    assert tool_results(attempts[1])[-1] == ("run_tests", "9 passed. All tests pass.")
    assert attempts[1].trajectory.resolved and not attempts[1].solved


def test_a_conversation_past_the_models_context_ends_the_try_and_no_reply_at_all_fails_it(task, tmp_path):
    """The provider (a local OpenAI-compatible server) refuses the conversation as longer than the model's context:
    the try ends there, unsolved, the refusal its detail. In replay mode without a recording the call fails, and so
    does the try."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.llm.config import parse_providers
    from flawforge.llm.errors import ReplayMiss
    from flawforge.llm.gateway import Gateway
    from tests.llm.test_providers import json_server

    too_long = {"error": {"message": "This model's maximum context length is 2048 tokens", "type": "invalid_request",
                          "code": "context_length_exceeded"}}
    with json_server(lambda body, before: (400, too_long)) as (base_url, bodies):
        gateway = Gateway(LocalBlobStore(str(tmp_path)),
                          parse_providers(json.dumps({"remote": {"base_url": base_url, "models": [MODEL]}})))
        ended = attempt(task[0], fresh_tools(task), gateway.chat, Solver(MODEL, tries=1, turns=5), 0)
    assert (ended.ended, ended.solved) == ("context_length", False) and "maximum context length" in ended.detail
    assert [m.role for m in ended.trajectory.messages] == ["system", "user"]
    assert [tool["function"]["name"] for tool in bodies[0]["tools"]] == [t["function"]["name"] for t in TOOLS]
    replay = Gateway.from_settings(LocalBlobStore(str(tmp_path)), task[2])
    try:
        with pytest.raises(ReplayMiss):
            attempt(task[0], fresh_tools(task), replay.chat, Solver(MODEL, tries=1, turns=5, seed=7), 0)
    finally:
        replay.close()


def test_the_solve_check_keeps_the_library_edits_and_the_tests_as_handed_over(task):
    """Only edits of the library's own modules count: tests, configuration and added files (a pytest.ini that
    deselects the failing test, a plugin beside the tests) could make the tests pass without a fix."""
    instance, folder, _ = task
    edited = {**folder, "shapes/core.py": b"edited", "tests/test_core.py": b"edited", "tests.txt": b"edited",
              "pytest.ini": b"[pytest]\naddopts = --deselect tests/test_core.py\n", "sitecustomize.py": b"x = 1"}
    checked = checked_files(instance, folder, edited)
    assert checked == {**folder, "shapes/core.py": b"edited"}
    assert "pytest.ini" not in folder and "sitecustomize.py" not in folder


def test_a_call_whose_arguments_do_not_fit_its_tool_is_answered_with_what_is_wrong(task):
    instance, folder, _ = task
    tools = TaskTools(instance, folder, None, None, None)
    assert tools.call("read_file", json.dumps({"path": 5})) == "Error: read_file's path must be a string"
    assert tools.call("read_file", json.dumps({"path": "shapes/core.py", "start_line": True})) == \
        "Error: read_file's start_line must be an integer"
    assert tools.call("edit_file", json.dumps({"path": "shapes/core.py"})) == "Error: edit_file needs old_str, new_str"
    assert tools.call("search", json.dumps({"pattern": "x", "file": "a"})) == \
        "Error: search takes no argument 'file'; it takes pattern, path"
    assert tools.call("run_tests", json.dumps({"tests": [1]})) == "Error: run_tests's tests must be an array of strings"
    assert tools.call("run_tests", "[]") == "Error: the arguments of run_tests are not a JSON object"
    assert tools.call("run_tests", json.dumps({"tests": ["tests/test_core.py", "--help"]})) == \
        "Error: run_tests takes test ids, not pytest's options (--help)"


def test_the_exports_carry_the_solve_rate_beside_the_difficulty(task, tmp_path):
    from flawforge.cli.debugging import export_debug
    from flawforge.debugging.difficulty import difficulty_of
    from flawforge.proto.debugging import SolverResult

    instance = task[0].model_copy(update={"difficulty": difficulty_of(task[0]),
                                          "solver": SolverResult(model=MODEL, tries=3, solved=2, solve_rate=0.6667)})
    unsolved = instance.model_copy(update={"instance_id": instance.instance_id + "x", "solver": None})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "instances.jsonl").write_text(instance.model_dump_json() + "\n" + unsolved.model_dump_json()
                                                      + "\n")
    (tmp_path / "run" / "conversations.jsonl").write_text("")
    export_debug(tmp_path / "run", "swe-bench", tmp_path / "swe")
    rows = [json.loads(line) for line in (tmp_path / "swe" / "swe-bench.jsonl").read_text().splitlines()]
    assert [(r["solve_rate"], r["solver"], r["solver_tries"]) for r in rows] == [(0.6667, MODEL, 3), (None, None, None)]
    assert rows[0]["difficulty"]["estimate"] == instance.difficulty.estimate
    pyarrow = pytest.importorskip("pyarrow.parquet")
    export_debug(tmp_path / "run", "hf", tmp_path / "hf")
    loaded = pyarrow.read_table(next((tmp_path / "hf" / "data").glob("*.parquet"))).to_pylist()
    card = (tmp_path / "hf" / "README.md").read_text()
    assert f"the share of 3 tries by {MODEL} after which the task's tests passed (mean 0.67 over 1 instances)" in card
    assert [(r["solve_rate"], r["difficulty"]) for r in loaded] == [(0.6667, instance.difficulty.estimate),
                                                                    (None, instance.difficulty.estimate)]


@pytest.mark.slow
def test_a_run_with_a_solver_records_each_instances_solve_rate_and_every_try(tmp_path):
    """The job on a small library without a solver (no solve rate, no solver.jsonl), then with one whose replies
    (run the tests, then give up) are recorded from that run's task folders: every instance has its solve rate,
    solver.jsonl every try with the sandbox's results, summary.json the rates beside the difficulty."""
    import tarfile

    from flawforge.cli.jobs_client import run_embedded
    from flawforge.debugging.patches import task_id
    from flawforge.proto.debugging import Instance, SolverAttempt
    from flawforge.settings import Settings

    from .test_outputs import MODIFIERS, sdist
    from .test_outputs import PROJECT as SDIST_FILES

    (tmp_path / "libraries").mkdir()
    (tmp_path / "libraries" / "shapes-1.0.tar.gz").write_bytes(sdist(SDIST_FILES))
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_replay=True)
    params = {"libraries": str(tmp_path / "libraries"), "per_library": 4, "seed": 1, "modifiers": MODIFIERS,
              "trajectories": False}
    run_embedded("debug-conversations", params, tmp_path / "plain", settings)
    plain = [Instance.model_validate_json(line) for line in (tmp_path / "plain" / "instances.jsonl").read_text()
             .splitlines()]
    assert plain and all(i.solver is None for i in plain) and not (tmp_path / "plain" / "solver.jsonl").exists()
    solver = Solver(MODEL, tries=2, turns=4, seed=1)
    script = [step("Running the tests.", ("run_tests", {})), step("I cannot tell what is wrong.")]
    with tarfile.open(tmp_path / "plain" / "tasks.tar") as tasks:
        members = [m for m in tasks.getmembers() if m.isfile()]
        for instance in plain:
            prefix = f"tasks/{task_id(instance.instance_id)}/"
            folder = {m.name[len(prefix):]: tasks.extractfile(m).read() for m in members if m.name.startswith(prefix)}
            record((instance, folder, settings), solver, [script, script])
    run_embedded("debug-conversations", {**params, "solver": MODEL, "solver_tries": 2, "solver_turns": 4},
                 tmp_path / "solved", settings)
    out = tmp_path / "solved"
    instances = [Instance.model_validate_json(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    assert [i.instance_id for i in instances] == [i.instance_id for i in plain]
    assert all(i.solver.model_dump() == {"model": MODEL, "tries": 2, "solved": 0, "solve_rate": 0.0}
               and i.difficulty is not None for i in instances)
    attempts = [SolverAttempt.model_validate_json(line) for line in (out / "solver.jsonl").read_text().splitlines()]
    assert [(a.instance_id, a.try_number) for a in attempts] == [(i.instance_id, n) for i in instances for n in (0, 1)]
    for instance, tried in zip(instances, attempts[::2]):
        (result,) = [m.content for m in tried.trajectory.messages if m.role == "tool"]
        assert instance.FAIL_TO_PASS[0] in result and not result.endswith("All tests pass.")
        assert tried.ended == "done" and not tried.solved
    summary = json.loads((out / "summary.json").read_text())
    assert summary["solver"]["mean_solve_rate"] == 0.0 and summary["solver"]["ended"] == {"done": 2 * len(instances)}
    assert set(summary["solver"]["mean_solve_rate_by_modifier"]) == set(summary["difficulty"][
        "mean_estimate_by_modifier"])

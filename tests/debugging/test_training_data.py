"""Training data on a real library's run (inflection, every modifier): no kept instance reads as a machine's edit;
problem statements say what was run and what came back, never the buggy line or the fix; no two conversations share
an assistant turn; summary.json reports the variety and each modifier's share; a model's statements through the
gateway (replay mode, on replies this test records) are used when faithful and refused when they leak."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from flawforge.debugging.layout import read_archive
from flawforge.proto.debugging import Conversation, Instance

from .test_realism import mechanical_by_reading

LIBRARY = "inflection-0.5.1.tar.gz"
# Every test that can notice a bug runs it (no sample, verdict.quick_sample): a combined bug's failures are then
# exactly its parts' where the parts do not interact, which a sample can hide (a test that notices part B, run by A's
# sample only).
PARAMS = {"per_library": 10, "seed": 0, "tests_per_candidate": 100_000}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory) -> Path:
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    root = tmp_path_factory.mktemp("training")
    (root / "libraries").mkdir()
    shutil.copy(shared_data / "python-libraries" / LIBRARY, root / "libraries" / LIBRARY)
    run_embedded("debug-conversations", {"libraries": str(root / "libraries"), **PARAMS}, root / "out",
                 Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs")))
    return root


def instances_of(run: Path) -> list[Instance]:
    return [Instance.model_validate_json(line) for line in (run / "out" / "instances.jsonl").read_text().splitlines()]


def library_files(run: Path) -> dict[str, bytes]:
    return read_archive((run / "libraries" / LIBRARY).read_bytes())


def test_kept_instances_read_as_a_persons_change(run):
    instances = instances_of(run)
    files = library_files(run)
    assert len(instances) >= 6
    for instance in instances:
        from flawforge.debugging.candidates import Candidate, digest_of
        from flawforge.debugging.patches import apply_patch

        clean = files[instance.path].decode()
        buggy = apply_patch(clean, instance.patch)
        candidate = Candidate(instance.modifier, instance.path, instance.qualname, "", buggy,
                              digest_of(instance.path, buggy))
        assert not mechanical_by_reading(clean, candidate), instance.instance_id
    summary = json.loads((run / "out" / "summary.json").read_text())
    shares = {name: entry["share"] for name, entry in summary["by_modifier"].items()}
    counted = {name: sum(i.modifier == name for i in instances) / len(instances) for name in shares}
    assert shares == pytest.approx(counted, abs=1e-4) and sum(shares.values()) == pytest.approx(1, abs=1e-3)


def patch_lines(patch: str) -> set[str]:
    return {line[1:].strip() for line in patch.splitlines()
            if re.match(r"^[-+](?![-+]{2})", line) and len(line[1:].strip()) >= 6}


def test_statements_say_what_was_run_and_never_the_buggy_line_or_the_fix(run):
    files = library_files(run)
    for instance in instances_of(run):
        statement = instance.problem_statement
        assert statement.startswith("# ") and "```python" in statement, instance.instance_id
        assert not [line for line in patch_lines(instance.patch) if line in statement], instance.instance_id
        assert instance.description not in statement and instance.modifier not in statement
        assert not re.search(rf"{re.escape(instance.path)}.*line \d+", statement)
        # What was run is a failing test's own code, as its test file has it.
        code = re.search(r"```python\n(.*?)\n```", statement, re.S).group(1)
        sources = [files[t.split("::")[0]].decode() for t in instance.FAIL_TO_PASS]
        assert any(all(line.strip() in source for line in code.splitlines()) for source in sources)
        # What came back: a value or an exception the failing output shows.
        shown = re.findall(r"`([^`\n]+)`", statement)
        assert any(value in instance.failing_output for value in shown if value not in code), instance.instance_id


WORDS = re.compile(r"[A-Za-z_][\w']*|\d+|[^\sA-Za-z_\d]")


def test_no_two_conversations_share_an_assistant_turn(run):
    conversations = [Conversation.model_validate_json(line)
                     for line in (run / "out" / "conversations.jsonl").read_text().splitlines()]
    turns = [m.content for c in conversations for m in c.messages if m.role == "assistant"]
    assert len(turns) == len(set(turns)) and len(turns) >= len(conversations)
    # The shapes and the follow-up questions vary.
    assert len({len(c.messages) for c in conversations}) == 2
    assert "mutmut" not in " ".join(turns)
    pairs = [pair for turn in turns for words in [WORDS.findall(turn.lower())] for pair in zip(words, words[1:])]
    summary = json.loads((run / "out" / "summary.json").read_text())["conversations"]
    assert summary["distinct_bigram_ratio"] == round(len(set(pairs)) / len(pairs), 4)
    assert summary["repeated_assistant_turns"] == 0


def test_a_models_statements_are_used_when_faithful_and_refused_when_they_leak(run, tmp_path):
    """The gateway in replay mode, on replies recorded here for the requests the writer makes: a faithful report is
    the statement; one that quotes the changed line, and one the replay has no reply for, get the deterministic
    writer's, with the reason."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.debugging.statements import changed_lines_of, failures_of, statement_request
    from flawforge.llm.cache import ResponseCache, fingerprint
    from flawforge.pipelines.debug_conversations import problem_statements
    from flawforge.proto.debugging import LibraryResult, StatementReply
    from flawforge.proto.llm import ChatResult
    from flawforge.settings import Settings

    model = "issue-writer"
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_replay=True)
    store = LocalBlobStore(str(tmp_path / "blobs"))
    files = library_files(run)
    instances = [i.model_copy(update={"problem_statement": ""}) for i in instances_of(run)[:3]]
    failures = {i.instance_id: failures_of(i, {t.split("::")[0]: files[t.split("::")[0]].decode()
                                                for t in i.FAIL_TO_PASS}) for i in instances}
    faithful, leaking, unreplied = instances
    schema = {"response_schema": StatementReply.model_json_schema()}

    def record(instance: Instance, title: str, body: str) -> None:
        request = statement_request(instance, failures[instance.instance_id], model).model_copy(update=schema)
        ResponseCache(store).put(ChatResult(fingerprint=fingerprint(request), provider="recorded", model=model,
                                            content=json.dumps({"title": title, "body": body})))

    first = failures[faithful.instance_id][0]
    record(faithful, "Wrong result", f"I ran\n```python\n{first.code}\n```\nand got {first.actual or first.message}.")
    record(leaking, "Bug", f"The line `{changed_lines_of(leaking.patch)[0]}` is wrong.")
    result = LibraryResult(source="inflection", version="0.5.1", instances=instances)
    counts = problem_statements(store, settings, [result], failures, model)
    written = {i.instance_id: i.problem_statement for i in result.instances}
    assert written[faithful.instance_id].startswith("# Wrong result\n\nI ran")
    assert counts["by_model"] == 1 and counts["deterministic"] == 2
    reasons = {f["instance_id"]: f["reason"] for f in counts["fallbacks"]}
    assert "quotes the changed line" in reasons[leaking.instance_id]
    assert "replay" in reasons[unreplied.instance_id].lower()
    assert changed_lines_of(leaking.patch)[0] not in written[leaking.instance_id]


def test_combined_instances_cover_their_parts_failures_and_their_parts_do_not_overlap(run):
    """Each combined instance lists valid single instances of one file as its parts; the lines their fixes change
    lie apart (an unchanged line between any two); its FAIL_TO_PASS holds every part's; re-run here in fresh
    units, independently of the job, its tests fail with the bug and pass without it."""
    from flawforge.debugging.patches import changed_lines, fix_site

    from .test_pipeline import assert_instances_hold

    instances = {i.instance_id: i for i in instances_of(run)}
    combined = [i for i in instances.values() if i.modifier == "combined"]
    assert combined, "no combined instance"
    union_exactly = 0
    for instance in combined:
        parts = [instances[p] for p in instance.parts]
        assert 2 <= len(parts) <= 4 and {p.path for p in parts} == {instance.path}
        assert all(p.modifier != "combined" for p in parts)
        lines = [set(changed_lines(p.patch)) | set(fix_site(p.fix_patch)) for p in parts]
        for n, own in enumerate(lines):
            for other in lines[n + 1:]:
                assert not {line + d for line in own for d in (-1, 0, 1)} & other, instance.instance_id
        failing = set().union(*(p.FAIL_TO_PASS for p in parts))
        assert failing <= set(instance.FAIL_TO_PASS) and instance.PASS_TO_PASS
        union_exactly += failing == set(instance.FAIL_TO_PASS)
    assert union_exactly
    summary = json.loads((run / "out" / "summary.json").read_text())
    assert summary["by_modifier"]["combined"]["valid"] == len(combined)
    assert_instances_hold(combined, run / "libraries")


def test_every_trajectory_tool_result_is_what_a_fresh_rerun_of_that_call_returns(run):
    """Each trajectory is in OpenAI's tool-call format, fails before its edits and passes after them; every call it
    makes is made again here, in order, on a fresh copy of its task folder as tasks.tar holds it (run_tests in the
    sandbox), and returns exactly the recorded result."""
    from flawforge.cli.debugging import unpack_tasks
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.debugging.tools import TaskTools
    from flawforge.sandbox.suites import suite_sandbox
    from flawforge.proto.debugging import Trajectory

    out = run / "out"
    unpack_tasks(out)
    instances = {i.instance_id: i for i in instances_of(run)}
    trajectories = [Trajectory.model_validate_json(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(t.instance_id for t in trajectories) == sorted(instances)
    sandbox, builder = suite_sandbox(), EnvironmentBuilder.from_settings()
    for trajectory in trajectories:
        instance = instances[trajectory.instance_id]
        raw = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
               if json.loads(line)["instance_id"] == instance.instance_id][0]
        assert {t["function"]["name"] for t in raw["tools"]} == {"run_tests", "read_file", "search", "edit_file"}
        assert [m["role"] for m in raw["messages"][:3]] == ["system", "user", "assistant"]
        calls = [(c, m) for m in trajectory.messages for c in m.tool_calls or []]
        assert {c.function.name for c, _ in calls} >= {"run_tests", "read_file", "edit_file"}
        folder = out / "tasks" / trajectory.task_id
        files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        tools = TaskTools(instance, files, sandbox, builder.install(instance.environment), SUITE_LIMITS)
        results = {m.tool_call_id: m.content for m in trajectory.messages if m.role == "tool"}
        runs = []
        for call, _ in calls:
            again = tools.call(call.function.name, call.function.arguments)
            assert again == results[call.id], (trajectory.instance_id, call.id, call.function.name)
            if call.function.name == "run_tests":
                runs.append(again)
        assert all(f"{test}" in runs[0] for test in instance.FAIL_TO_PASS[:20])
        assert runs[-1].endswith("All tests pass.") and trajectory.resolved

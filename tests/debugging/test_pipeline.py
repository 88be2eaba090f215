"""The debug-conversations job on two shared libraries, against the real sandbox: every instance is re-run here,
independently of the job's records; the file-edit tasks re-validate; reruns and a RabbitMQ run are identical."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stack_support import job_through_the_services

from flawforge.debugging.layout import layout_of, name_and_version, read_archive
from flawforge.debugging.patches import apply_patch
from flawforge.proto.debugging import BugReject, Conversation, Instance

LIBRARIES = ("inflection-0.5.1.tar.gz", "isodate-0.7.2.tar.gz")
PARAMS = {"per_library": 6, "seed": 3}
IDENTICAL = ("instances.jsonl", "conversations.jsonl", "trajectories.jsonl", "rejects.jsonl", "tasks.tar",
             "solutions.tar")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def libraries(shared_data, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("libraries")
    for name in LIBRARIES:
        shutil.copy(shared_data / "python-libraries" / name, folder / name)
    return folder


def run_embedded(libraries: Path, root: Path, params: dict = PARAMS) -> Path:
    from flawforge.cli.jobs_client import run_embedded as run
    from flawforge.settings import Settings

    out = root / "out"
    run("debug-conversations", {"libraries": str(libraries), **params}, out,
        Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs")))
    return out


@pytest.fixture(scope="module")
def first_run(libraries, tmp_path_factory) -> Path:
    return run_embedded(libraries, tmp_path_factory.mktemp("run-a"))


def read_jsonl(path: Path, model):
    return [model.model_validate_json(line) for line in path.read_text().splitlines()]


def outcomes(run) -> dict[str, str]:
    return {t.name: t.outcome for t in run.tests}


def assert_instances_hold(instances: list[Instance], libraries: Path) -> None:
    """Re-runs each instance's library suite, clean and with the patch, in fresh units, independently of the
    job's records: FAIL_TO_PASS fail with the bug and pass without it, PASS_TO_PASS pass with it."""
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.sandbox.suites import suite_sandbox

    sandbox = suite_sandbox()
    for name in sorted({f"{i.source}-{i.version}.tar.gz" for i in instances}):
        archive = (libraries / name).read_bytes()
        files = read_archive(archive)
        layout = layout_of(*name_and_version(name), list(files))
        of_library = [i for i in instances if f"{i.source}-{i.version}.tar.gz" == name]
        environment = EnvironmentBuilder.from_settings().install(of_library[0].environment)
        clean = outcomes(sandbox.run_suite(archive, source_roots=layout.source_roots, args=layout.test_paths,
                                           limits=SUITE_LIMITS, environment=environment))
        for instance in of_library:
            assert instance.FAIL_TO_PASS and instance.PASS_TO_PASS
            assert not set(instance.FAIL_TO_PASS) & set(instance.PASS_TO_PASS)
            assert len(instance.failing_output.encode()) <= 8 * 1024
            buggy = apply_patch(files[instance.path].decode(), instance.patch)
            assert apply_patch(buggy, instance.fix_patch) == files[instance.path].decode()
            with_bug = outcomes(sandbox.run_suite(archive, {instance.path: buggy}, source_roots=layout.source_roots,
                                                  args=layout.test_paths, limits=SUITE_LIMITS,
                                                  environment=environment))
            for test in instance.FAIL_TO_PASS:
                assert clean[test] == "passed" and with_bug.get(test) in ("failed", "error"), \
                    (instance.instance_id, test)
            for test in instance.PASS_TO_PASS:
                assert clean[test] == "passed" and with_bug[test] == "passed", (instance.instance_id, test)


def test_instances_fail_with_the_patch_and_pass_without_it(first_run, libraries):
    instances = read_jsonl(first_run / "instances.jsonl", Instance)
    rejects = read_jsonl(first_run / "rejects.jsonl", BugReject)
    summary = json.loads((first_run / "summary.json").read_text())
    combined = summary["by_modifier"].get("combined", {}).get("tried", 0)  # tried beyond per_library
    assert summary["tried"] == len(instances) + len(rejects) == len(LIBRARIES) * PARAMS["per_library"] + combined
    assert summary["valid"] == len(instances) and {i.source for i in instances} == {"inflection", "isodate"}
    assert_instances_hold(instances, libraries)


@pytest.mark.timeout(900)  # three libraries, 20 candidates each, on a busy machine
def test_every_modifier_makes_a_valid_bug_on_a_real_library(shared_data, tmp_path):
    """tinydb's, cachetools' and inflection's classes and functions give every modifier a place (tinydb's one bound
    is in code no test runs, and dropping its one base class that matters changes nothing its tests see); the job's
    seeded round robin tries each of the 18 three or four times; one valid instance of each is re-run independently.
    Reordering a class's methods changes what runs only where a name is defined twice: here, @overload stubs, and a
    stub moved below its implementation is no one's edit (realism.OverloadAfterImplementation), so that modifier has
    no valid instance on these three."""
    from flawforge.debugging.modifiers import REGISTRY

    folder = tmp_path / "libraries"
    folder.mkdir()
    for name in ("tinydb-4.9.0.tar.gz", "cachetools-8.0.1.tar.gz", "inflection-0.5.1.tar.gz"):
        shutil.copy(shared_data / "python-libraries" / name, folder)
    out = run_embedded(folder, tmp_path, {"per_library": 20, "seed": 0, "trajectories": False})
    instances = read_jsonl(out / "instances.jsonl", Instance)
    first_of = {}
    for instance in instances:
        first_of.setdefault(instance.modifier, instance)
    expected = {*REGISTRY, "combined"} - {"class_shuffle_methods"}
    assert set(first_of) == expected, expected - set(first_of)
    assert_instances_hold(list(first_of.values()), folder)


def test_conversations_state_the_facts(first_run):
    instances = {i.instance_id: i for i in read_jsonl(first_run / "instances.jsonl", Instance)}
    conversations = read_jsonl(first_run / "conversations.jsonl", Conversation)
    assert [c.instance_id for c in conversations] == sorted(instances)
    for conversation in conversations:
        instance = instances[conversation.instance_id]
        text = "\n".join(m.content for m in conversation.messages)
        assert [m.role for m in conversation.messages][:3] == ["system", "user", "assistant"]
        assert instance.FAIL_TO_PASS[0] in text and instance.fix_patch in text
        assert all(name in text for name in instance.qualname.split(", "))  # a combined bug's every function
        assert conversation.fix_lines and instance.path in text


def test_file_edit_tasks_fail_before_and_pass_after_the_fix(first_run, tmp_path):
    from flawforge.cli.debugging import unpack_tasks, validate_conversation

    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    unpack_tasks(out)
    instances = read_jsonl(out / "instances.jsonl", Instance)
    folders = sorted((out / "tasks").iterdir())
    assert len(folders) == len(instances)
    for folder in folders:
        assert (folder / "run_tests.py").is_file() and not (folder / "conversation.json").exists()
        report = validate_conversation(out / "solutions" / f"{folder.name}.json", None, tmp_path / "dump")
        assert report["reproduced"], report
    assert len(list((tmp_path / "dump").iterdir())) == len(folders)


def test_two_runs_are_byte_identical(first_run, libraries, tmp_path):
    second = run_embedded(libraries, tmp_path)
    for name in IDENTICAL:
        assert (second / name).read_bytes() == (first_run / name).read_bytes(), name
    one, two = (json.loads((out / "summary.json").read_text()) for out in (first_run, second))
    assert one.pop("elapsed_seconds") >= 0 and two.pop("elapsed_seconds") >= 0 and one == two


@pytest.mark.rabbitmq
@pytest.mark.timeout(900)  # an embedded run, then the same job through the services, on a busy machine
def test_rabbitmq_run_through_the_services_is_identical(first_run, libraries, amqp_url, tmp_path):
    from flawforge.proto.jobs import JobState

    params = {"libraries": str(libraries), **PARAMS}
    with job_through_the_services(amqp_url, tmp_path / "blobs", "debug-conversations", params, 900) as (jobs, status):
        assert status.state == JobState.succeeded, status.error
        for name in IDENTICAL:
            assert jobs.artifact(status.job_id, name) == (first_run / name).read_bytes(), name


def test_bad_input_is_a_clear_error(tmp_path):
    from flawforge.errors import FlawforgeError

    with pytest.raises(FlawforgeError, match="does not exist"):
        run_embedded(tmp_path / "none", tmp_path / "a")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FlawforgeError, match="no \\*.tar.gz"):
        run_embedded(tmp_path / "empty", tmp_path / "b")


def test_model_written_conversations_state_only_facts(shared_data, tmp_path):
    """isodate, run twice on one blob store: the first run's instances give the requests whose replies this test
    records where the gateway's replay finds them. A faithful reply becomes the assistant's turns (writer: the
    model; the excerpt and the real diff beside its text); a reply that names a passing test as failing, one that
    points at another line, and an instance the replay has no reply for get the deterministic writer, with the
    reason in summary.json. The instances are the same either way."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.cli.jobs_client import run_embedded as run
    from flawforge.debugging.conversation import conversation_request
    from flawforge.debugging.patches import changed_lines
    from flawforge.llm.cache import ResponseCache, fingerprint
    from flawforge.proto.debugging import ConversationReply
    from flawforge.proto.llm import ChatResult
    from flawforge.settings import Settings

    model = "conversation-writer"
    folder = tmp_path / "libraries"
    folder.mkdir()
    shutil.copy(shared_data / "python-libraries" / "isodate-0.7.2.tar.gz", folder)
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_replay=True)
    params = {"libraries": str(folder), "per_library": 8, "seed": 3}
    run("debug-conversations", params, tmp_path / "plain", settings)
    instances = read_jsonl(tmp_path / "plain" / "instances.jsonl", Instance)
    assert len(instances) >= 4
    files = read_archive((folder / "isodate-0.7.2.tar.gz").read_bytes())
    schema = {"response_schema": ConversationReply.model_json_schema()}

    def record(instance: Instance, diagnosis: str) -> None:
        request = conversation_request(instance, files[instance.path].decode(), model).model_copy(update=schema)
        content = json.dumps({"diagnosis": diagnosis, "fix_explanation": "Restoring the original code fixes it."})
        ResponseCache(LocalBlobStore(str(tmp_path / "blobs"))).put(
            ChatResult(fingerprint=fingerprint(request), provider="recorded", model=model, content=content))

    def line_of(instance: Instance) -> int:
        return changed_lines(instance.fix_patch)[0]

    def unlike_a_failing_one(instance: Instance) -> str | None:
        """A passing test whose id no failing test's id shares (a parametrized sibling would)."""
        return next((t for t in instance.PASS_TO_PASS
                     if not any(f.split("[")[0] == t.split("[")[0] for f in instance.FAIL_TO_PASS)), None)

    faithful, elsewhere = [i for i in instances if changed_lines(i.fix_patch)][:2]
    passing = next(i for i in instances if i not in (faithful, elsewhere) and unlike_a_failing_one(i))
    unreplied = next(i for i in instances if i not in (faithful, elsewhere, passing))
    function = faithful.qualname.rsplit(".", 1)[-1]
    record(faithful, f"{faithful.FAIL_TO_PASS[0]} fails because `{function}` is wrong at line {line_of(faithful)}.")
    record(passing, f"{unlike_a_failing_one(passing)} fails in {passing.qualname}.")
    record(elsewhere, f"{elsewhere.FAIL_TO_PASS[0]} fails: {elsewhere.qualname} at line {line_of(elsewhere) + 40}.")
    run("debug-conversations", {**params, "model": model}, tmp_path / "written", settings)

    out = tmp_path / "written"
    assert (out / "instances.jsonl").read_bytes() == (tmp_path / "plain" / "instances.jsonl").read_bytes()
    conversations = {c.instance_id: c for c in read_jsonl(out / "conversations.jsonl", Conversation)}
    written = conversations[faithful.instance_id]
    assert written.writer == model and f"is wrong at line {line_of(faithful)}" in written.messages[2].content
    assert written.fix_patch in written.messages[4].content
    summary = json.loads((out / "summary.json").read_text())["conversations"]
    assert summary["by_model"] == 1 and summary["deterministic"] == len(instances) - 1
    reasons = {f["instance_id"]: f["reason"] for f in summary["fallbacks"]}
    assert f"names test {unlike_a_failing_one(passing)} as failing, which passes" in reasons[passing.instance_id]
    assert f"points at line {line_of(elsewhere) + 40}" in reasons[elsewhere.instance_id]
    assert all(conversations[i].writer == "deterministic" for i in reasons)
    assert "replay" in reasons[unreplied.instance_id].lower()

"""The scenario path end to end with the gateway in replay mode, on replies this test records: a scenario whose
model-written bug is kept, one whose bugs all survive (retried, then skipped), and one whose replies break the
schema (a repaired reply, and one rejected with its reason)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flawforge.proto.debugging import BugReject, Conversation, Instance

MODEL = "scenario-writer"
ENTRIES = [{"domain": "orbital mechanics", "topic": "two-body motion", "subtopic": "Kepler's equation solver"},
           {"domain": "geometry", "topic": "circles", "subtopic": "circle area"},
           {"domain": "statistics", "topic": "estimation", "subtopic": "running mean"}]

KEPLER = '''import math


def check_eccentricity(e):
    if not 0 <= e < 1:
        raise ValueError("eccentricity must be in [0, 1)")
    return e


def solve_kepler(mean_anomaly, e, tolerance=1e-12):
    """Eccentric anomaly E with E - e sin E = M, by Newton's method."""
    check_eccentricity(e)
    E = mean_anomaly if e < 0.8 else math.pi
    for _ in range(100):
        step = (E - e * math.sin(E) - mean_anomaly) / (1 - e * math.cos(E))
        E -= step
        if abs(step) < tolerance:
            return E
    raise ValueError("no convergence")


def true_anomaly(mean_anomaly, e):
    E = solve_kepler(mean_anomaly, e)
    return 2 * math.atan2(math.sqrt(1 + e) * math.sin(E / 2), math.sqrt(1 - e) * math.cos(E / 2))
'''
KEPLER_TESTS = '''import math

import pytest

from kepler import check_eccentricity, solve_kepler, true_anomaly


def test_circular_orbit_is_uniform():
    assert solve_kepler(1.0, 0.0) == pytest.approx(1.0)


def test_kepler_equation_holds():
    E = solve_kepler(0.5, 0.3)
    assert E - 0.3 * math.sin(E) == pytest.approx(0.5)


def test_true_anomaly_at_periapsis():
    assert true_anomaly(0.0, 0.5) == pytest.approx(0.0)


def test_bad_eccentricity():
    with pytest.raises(ValueError):
        check_eccentricity(1.5)
'''
AREA = "def area(radius):\n    return 3.14159 * radius * radius\n"
AREA_TESTS = "from circle import area\n\n\ndef test_area_is_a_number():\n    assert isinstance(area(2.0), float)\n"


def reply(module_name, code, tests, variants):
    return {"problem_statement": f"Compute with {module_name}.", "outline": ["define", "validate", "compute"],
            "module_name": module_name, "module_code": code, "test_code": tests,
            "buggy_variants": [{"description": d, "module_code": v} for d, v in variants]}


def record(store, request, content: str) -> None:
    from flawforge.llm.cache import ResponseCache, fingerprint
    from flawforge.proto.llm import ChatResult

    ResponseCache(store).put(ChatResult(fingerprint=fingerprint(request), provider="recorded", model=MODEL,
                                        content=content))


def record_scenarios(store) -> None:
    """The replies a model would give, stored where the gateway's replay finds them."""
    from flawforge.debugging.scenarios import scenario_request
    from flawforge.llm.structured import parse_reply, repair_request
    from flawforge.llm.errors import InvalidModelOutput
    from flawforge.proto.debugging import CatalogEntry, ScenarioReply

    schema = {"response_schema": ScenarioReply.model_json_schema()}

    def request(entry: dict, seed: int):
        return scenario_request(CatalogEntry(**entry), MODEL, seed).model_copy(update=schema)

    def invalid_then(first_request, bad: str, then: str) -> None:
        record(store, first_request, bad)
        with pytest.raises(InvalidModelOutput) as problem:
            parse_reply(bad, ScenarioReply)
        record(store, repair_request(first_request, bad, str(problem.value)), then)

    kepler_bug = KEPLER.replace("E -= step", "E += step")
    good = json.dumps(reply("kepler", KEPLER, KEPLER_TESTS, [("Newton's update has the wrong sign.", kepler_bug)]))
    # Seed 0's first reply leaves out the tests: the repair request gets the full scenario.
    invalid_then(request(ENTRIES[0], 0), json.dumps({**json.loads(good), "test_code": None}), good)
    weak = json.dumps(reply("circle", AREA, AREA_TESTS, [("pi is rounded.", AREA.replace("3.14159", "3.14"))]))
    for seed in (0, 1):
        record(store, request(ENTRIES[1], seed), weak)
        invalid_then(request(ENTRIES[2], seed), "Here is your module: def mean(xs): ...",
                     json.dumps({"problem_statement": "running mean"}))


@pytest.fixture(scope="module")
def scenario_run(tmp_path_factory):
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    root = tmp_path_factory.mktemp("scenarios")
    (root / "catalog.json").write_text(json.dumps({"entries": ENTRIES}))
    record_scenarios(LocalBlobStore(str(root / "blobs")))
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs"), llm_replay=True,
                        llm_max_repairs=1)
    params = {"catalog": str(root / "catalog.json"), "count": 3, "model": MODEL, "retries": 1}
    run_embedded("debug-conversations", params, root / "out", settings)
    return root, params, settings


def read_jsonl(path: Path, model):
    return [model.model_validate_json(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_model_written_bug_is_kept_and_the_others_retried_then_skipped(scenario_run):
    root, _, _ = scenario_run
    out = root / "out"
    (instance,) = read_jsonl(out / "instances.jsonl", Instance)
    assert instance.source == "orbital-mechanics--two-body-motion--kepler-s-equation-solver"
    assert instance.modifier == "llm_variant" and instance.instance_id.startswith(f"{instance.source}.1.llm_variant__")
    assert "tests/test_kepler.py::test_kepler_equation_holds" in instance.FAIL_TO_PASS
    assert "tests/test_kepler.py::test_bad_eccentricity" in instance.PASS_TO_PASS
    assert "+        E += step" in instance.fix_patch.replace("-        E += step", "+        E += step")
    rejects = read_jsonl(out / "rejects.jsonl", BugReject)
    by_source: dict[str, list[str]] = {}
    for reject in rejects:
        by_source.setdefault(reject.source, []).append(reject.reason)
    assert instance.scenario.problem_statement == "Compute with kepler."
    assert instance.scenario.outline == ["define", "validate", "compute"]
    assert sorted(by_source["geometry--circles--circle-area"]) == ["no_valid_bug", "no_valid_bug", "skipped",
                                                                   "survived", "survived"]
    broken = [r for r in rejects if r.source == "statistics--estimation--running-mean"]
    assert [r.reason for r in broken] == ["invalid_reply", "invalid_reply", "skipped"]
    assert "does not match ScenarioReply" in broken[0].detail and "after 1 repairs" in broken[0].detail
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] == 1 and summary["by_modifier"]["llm_variant"]["valid"] == 1


@pytest.mark.slow
def test_the_task_revalidates_and_entries_are_taken_once(scenario_run, tmp_path):
    from flawforge.cli.debugging import unpack_tasks, validate_conversation
    from flawforge.cli.jobs_client import run_embedded

    root, params, settings = scenario_run
    out = tmp_path / "out"
    import shutil

    shutil.copytree(root / "out", out)
    unpack_tasks(out)
    (task,) = (out / "tasks").iterdir()
    assert validate_conversation(out / "solutions" / f"{task.name}.json", None, None)["reproduced"]
    (instance,) = read_jsonl(out / "instances.jsonl", Instance)
    (conversation,) = read_jsonl(out / "conversations.jsonl", Conversation)
    statement = instance.scenario.problem_statement.strip()
    assert statement in conversation.messages[1].content and statement in (task / "PROBLEM.md").read_text()
    assert instance.scenario.outline[0] in (task / "PROBLEM.md").read_text()
    again = tmp_path / "again"
    run_embedded("debug-conversations", params, again, settings)  # the same blob store: every entry is taken
    assert (again / "instances.jsonl").read_bytes() == b""
    assert json.loads((again / "summary.json").read_text())["libraries"] == 0


# A provider that serves the model but listens nowhere (nothing answers on port 9): no reply is ever made.
DOWN = json.dumps({"down": {"base_url": "http://127.0.0.1:9/v1", "models": [MODEL]}})


def claims_in(store) -> dict[str, dict]:
    return {key: json.loads(store.get(key)) for key in store.list("debugging/catalog/")}


@pytest.mark.slow
def test_an_unreachable_provider_fails_the_job_in_one_line_and_gives_its_claims_back(tmp_path):
    """The command as a user runs it: no reply is not a bad reply. The entry the failed job took is free again;
    the one another job holds stays taken."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.debugging.scenarios import entry_id
    from flawforge.pipelines.debug_conversations import claim_key
    from flawforge.proto.debugging import CatalogEntry

    catalog, state, out = tmp_path / "catalog.json", tmp_path / "state", tmp_path / "out"
    catalog.write_text(json.dumps({"entries": ENTRIES[:2]}))
    store = LocalBlobStore(str(state))
    held = claim_key(entry_id(CatalogEntry(**ENTRIES[1])))
    store.put(held, json.dumps({"job_id": "another-job", "attempt": "0"}).encode())
    env = {**os.environ, "FLAWFORGE_LLM_PROVIDERS": DOWN, "FLAWFORGE_LLM_MAX_ATTEMPTS": "2",
           "FLAWFORGE_LLM_BACKOFF_S": "0.01"}
    done = subprocess.run([sys.executable, "-m", "flawforge.cli.entry", "run", "debug-conversations", "--catalog",
                           str(catalog), "--count", "2", "--model", MODEL, "--state", str(state), "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("flawforge: error: job ") and "cannot reach provider 'down' at http://127.0.0.1:9/v1" in line
    assert claims_in(store) == {held: {"job_id": "another-job", "attempt": "0"}}
    asked = [key for key in store.list("llm/log/") if key.endswith(".request.json")]
    assert len(asked) == 1  # the free entry was taken and asked for, once: the held one was not
    (answered,) = [json.loads(store.get(key)) for key in store.list("llm/log/") if key.endswith(".response.json")]
    assert len(answered["attempts"]) == 2 and answered["error"].startswith("provider_error")  # the two attempts
    assert not out.exists()


def test_claims_are_taken_back_by_their_job_released_on_failure_and_taken_over_from_a_stopped_job(tmp_path):
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.jobs.store import JobStore
    from flawforge.pipelines.debug_conversations import CatalogClaims, claim_key

    jobs = JobStore(LocalBlobStore(str(tmp_path)))
    running, stopped = (jobs.create("debug-conversations", {}).job_id for _ in range(2))
    first = CatalogClaims(jobs, running)
    assert first.take("a") and first.take("b")
    assert not CatalogClaims(jobs, "job-2").take("a")
    again = CatalogClaims(jobs, running)  # the same job run again after its worker died
    assert again.take("a") and again.attempt != first.attempt
    assert claims_in(jobs.store)[claim_key("a")] == {"job_id": running, "attempt": again.attempt}
    again.release()
    assert list(claims_in(jobs.store)) == [claim_key("b")]
    # An embedded run ended by Ctrl-C: its job asked to cancel, its process gone before it released "c".
    late = CatalogClaims(jobs, stopped)
    assert late.take("c")
    assert not CatalogClaims(jobs, "job-2").take("c")
    jobs.request_cancel(stopped)
    takers = [CatalogClaims(jobs, "job-2"), CatalogClaims(jobs, "job-3")]
    assert [taker.take("c") for taker in takers] == [True, False]
    late.release()  # its claim was taken over: the new holder's stays
    assert claims_in(jobs.store)[claim_key("c")]["job_id"] == "job-2"


@pytest.mark.slow
def test_runs_sharing_a_state_folder_take_different_entries_and_keep_their_claims(tmp_path, monkeypatch):
    """Two embedded runs of the command with one --state folder: each takes its own entry, and each entry's
    claim stays with the job that emitted its instance."""
    from typer.testing import CliRunner

    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.cli.main import app
    from flawforge.debugging.scenarios import scenario_request
    from flawforge.jobs.store import JobStore
    from flawforge.pipelines.debug_conversations import claim_key
    from flawforge.proto.debugging import CatalogEntry, ScenarioReply
    from flawforge.proto.jobs import JobState

    state = tmp_path / "state"
    store = LocalBlobStore(str(state))
    record_scenarios(store)
    other = {**ENTRIES[0], "subtopic": "true anomaly"}
    good = json.dumps(reply("kepler", KEPLER, KEPLER_TESTS, [("Newton's update has the wrong sign.",
                                                            KEPLER.replace("E -= step", "E += step"))]))
    record(store, scenario_request(CatalogEntry(**other), MODEL, 0).model_copy(
        update={"response_schema": ScenarioReply.model_json_schema()}), good)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"entries": [ENTRIES[0], other]}))
    monkeypatch.setenv("FLAWFORGE_LLM_PROVIDERS", DOWN)
    monkeypatch.setenv("FLAWFORGE_LLM_REPLAY", "true")
    monkeypatch.setenv("FLAWFORGE_LLM_MAX_REPAIRS", "1")
    instances = []
    for run in ("first", "second"):
        result = CliRunner().invoke(app, ["run", "debug-conversations", "--catalog", str(catalog), "--count", "1",
                                          "--model", MODEL, "--retries", "0", "--state", str(state),
                                          "--out", str(tmp_path / run)])
        assert result.exit_code == 0, result.output
        (instance,) = read_jsonl(tmp_path / run / "instances.jsonl", Instance)
        instances.append(instance)
    assert instances[0].source != instances[1].source
    assert all(i.scenario.outline == ["define", "validate", "compute"] for i in instances)
    claims = claims_in(store)
    assert sorted(claims) == sorted(claim_key(i.source) for i in instances)
    jobs = JobStore(store)
    assert len({c["job_id"] for c in claims.values()}) == 2
    assert all(jobs.get(c["job_id"]).state == JobState.succeeded for c in claims.values())

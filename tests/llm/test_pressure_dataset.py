"""The semantic-pressure dataset job against the real inference-server (SmolLM2-135M-Instruct on CPU): the
Batch API path through the gateway with its audit log, replies that are not JSON or are empty, and whole
runs that give the same bytes twice."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flawforge.cli.main import app
from flawforge.errors import FlawforgeError


def job_context(tmp_path, providers: str):
    from flawforge.jobs.context import JobContext
    from flawforge.jobs.store import JobStore
    from flawforge.assembly import platform_for
    from flawforge.settings import Settings

    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path),
                                               llm_providers=providers, llm_batch_poll_s=0.2))
    status = JobStore(platform.store).create("pressure-dataset", {})
    return JobContext(platform, status.job_id)


def make_run(ctx, **params):
    from flawforge.llm.gateway import Gateway
    from flawforge.llm.limits import CallScope
    from flawforge.pipelines.pressure_dataset import PressureDatasetParams, Run

    gateway = Gateway.from_settings(ctx.platform.store, ctx.platform.settings)
    return Run(ctx, PressureDatasetParams(**params), gateway, CallScope(job_id=ctx.job_id))


@pytest.mark.model
def test_batch_replies_that_are_not_json_or_say_nothing_are_rejects_and_every_exchange_is_audited(
        inference_server, providers_json, tmp_path):
    from flawforge.pipelines.pressure_dataset import candidates_from_replies
    from flawforge.pressure.generators import GENERATORS, Slot
    from flawforge.proto.pressure_dataset import AuditRecord

    ctx = job_context(tmp_path, providers_json)
    run = make_run(ctx)
    facts = GENERATORS["facts"]
    slots = [Slot("facts", n) for n in range(3)]
    first = facts.request(slots[0], run.validator_model, 1)
    [probe] = run.ask("fallback-probe", [first], [[slots[0].slot_id]], facts.reply_schema)
    first_token = probe.replies[0].content
    assert first_token  # greedy-free (temperature 1, seeded) but fixed: the same first token every time
    requests = [facts.request(slots[0], run.validator_model, 64),
                facts.request(slots[1], run.validator_model, 3),  # cut short: not valid JSON
                # Stopped at its own first token: an empty reply.
                facts.request(slots[0], run.validator_model, 8).model_copy(update={"stop": [first_token]})]
    outcomes = run.ask("fallback-facts", requests, [[s.slot_id] for s in slots], facts.reply_schema)
    made = candidates_from_replies(run, facts, slots, outcomes)
    assert outcomes[2].replies[0].content == "" and outcomes[2].value is None
    assert "empty" in str(outcomes[2].error)
    assert outcomes[1].value is None and outcomes[1].error.code == "invalid_output"
    rejects = {r.candidate.candidate_id: r for r in run.rejects}
    assert rejects["facts-00001"].stage == "fallback" and rejects["facts-00001"].reason == "invalid_output"
    assert rejects["facts-00002"].reason == "empty_reply" and "(the reply): says nothing" in rejects["facts-00002"].detail
    assert len(made) + len(rejects) == 3  # the first reply is a candidate or a reject, never lost

    records = [AuditRecord.model_validate_json(line) for line in run.audit.content().splitlines()]
    requests_logged = [r for r in records if r.kind == "request"]
    responses = {r.audit_id: r for r in records if r.kind == "response"}
    assert [r.audit_id for r in requests_logged] == ["fallback-probe/00000", "fallback-facts/00000",
                                                     "fallback-facts/00001", "fallback-facts/00002"]
    assert requests_logged[-1].request["stop"] == [first_token] and requests_logged[-1].candidate_ids == [
        "facts-00002"]
    assert responses["fallback-facts/00002"].response == "" and "empty" in responses["fallback-facts/00002"].error
    assert responses["fallback-facts/00001"].error and responses["fallback-facts/00001"].cached is False
    # The gateway's own log holds the provider exchanges (the batch file with every request).
    assert any(".request.json" in key for key in ctx.platform.store.list("llm/log/"))


def test_an_audit_log_that_cannot_be_written_stops_the_run_before_any_model_call(tmp_path):
    from flawforge.pressure.generators import GENERATORS, Slot

    # A provider nobody serves: reaching it would fail differently, and later.
    ctx = job_context(tmp_path, json.dumps({"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}))
    run = make_run(ctx, model="m")
    blocked = ctx.platform.store.root / ctx.item_key("audit")
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("a file where the audit folder goes")
    facts = GENERATORS["facts"]
    with pytest.raises(FlawforgeError, match="cannot write the audit log"):
        run.ask("fallback-facts", [facts.request(Slot("facts", 0), "m", 8)], [["facts-00000"]], facts.reply_schema)
    assert list(ctx.platform.store.list("llm/")) == []


def run_job(out, providers_json: str) -> dict[str, bytes]:
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(out / ".blobs"), llm_providers=providers_json,
                        llm_batch_poll_s=0.2)
    run_embedded("pressure-dataset", {"per_category": 1, "categories": ["facts", "idioms"]}, out, settings)
    return {name: (out / name).read_bytes() for name in ("prompts.jsonl", "rejects.jsonl", "audit.jsonl",
                                                          "summary.json")}


@pytest.mark.model
@pytest.mark.slow
def test_two_runs_give_the_same_bytes_and_account_for_every_candidate(inference_server, providers_json, tmp_path):
    from flawforge.proto.pressure import PromptRecord
    from flawforge.proto.pressure_dataset import AuditRecord, CandidateReject

    first = run_job(tmp_path / "a", providers_json)
    second = run_job(tmp_path / "b", providers_json)  # a fresh store: nothing comes from the first run's cache
    assert first == second
    summary = json.loads(first["summary.json"])
    assert summary["model"] == inference_server["model"] and summary["seeds"]["sources"] == 42
    records = [PromptRecord.model_validate_json(line) for line in first["prompts.jsonl"].splitlines()]
    rejects = [CandidateReject.model_validate_json(line) for line in first["rejects.jsonl"].splitlines()]
    counts = summary["counts_by_category"]
    # Two candidates per category (twice the final size), all from the offline sources, no fallback.
    assert {c: (counts[c]["offline"], counts[c]["fallback_requested"]) for c in counts} == {
        "facts": (2, 0), "idioms": (2, 0)}
    assert len(records) + len(rejects) == 4 and len(records) <= 2
    assert all(r.category in ("facts", "idioms") and r.p0_bin == "0.0-0.2" for r in records)
    audit = [AuditRecord.model_validate_json(line) for line in first["audit.jsonl"].splitlines()]
    validator_ids = {i for r in audit if r.stage == "validator" for i in r.candidate_ids}
    assert len(validator_ids) == 4 - sum(r.stage == "filter" for r in rejects)
    assert {r.stage for r in audit} <= {"validator", "pressure"} and {r.kind for r in audit} == {"request", "response"}
    for record in records:
        assert record.s_score == pytest.approx(record.v_score + 100 * record.p0)
        assert record.validation["candidate_id"] in validator_ids

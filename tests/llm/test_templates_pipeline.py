"""Template generation: `flawforge run templates` against the real inference-server, and the validation step."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flawforge.cli.main import app


def run_templates(out, gsm8k, templates, model, indices, examples=0, status=0):
    result = CliRunner().invoke(app, [
        "run", "templates", "--gsm8k", str(gsm8k), "--indices", indices, "--model", model,
        "--templates", str(templates), "--examples", str(examples), "--max-tokens", "24", "--max-repairs", "0",
        "--out", str(out)])
    assert result.exit_code == status, result.output
    report = json.loads((out / "report.json").read_text())
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    kept = [json.loads(line) for line in (out / "templates.jsonl").read_text().splitlines()]
    return report, rejects, kept


@pytest.mark.model
def test_generates_validates_reports_then_reruns_from_the_cache_and_replays(
        inference_server, providers_json, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("FLAWFORGE_LLM_PROVIDERS", providers_json)
    gsm8k = shared_data / "gsm8k" / "train.jsonl"
    templates = shared_data / "formalization-templates"
    model = inference_server["model"]

    # One problem: a prompt of the rules alone is already some 900 tokens for the CPU to read.
    report, rejects, kept = run_templates(tmp_path, gsm8k, templates, model, "2500-2500")
    assert (report["requested"], report["skipped_existing"], report["attempted"]) == (1, 0, 1)
    assert report["model_calls"] == 1 and report["cache_hits"] == 0 and report["repairs"] == 0
    assert report["completion_tokens"] <= 24 and report["prompt_tokens"] > 500
    assert report["passed"] == len(kept) == 0 and report["pass_rate"] == 0.0
    # 24 tokens cannot hold a template: the reply is cut short and refused, saying why.
    [reject] = rejects
    assert reject["problem_index"] == 2500 and reject["template_model"] == model
    assert reject["reason"] == "invalid_output" and "JSON" in reject["detail"]
    assert report["rejects_by_reason"] == {"invalid_output": 1}

    rerun, rerun_rejects, _ = run_templates(tmp_path, gsm8k, templates, model, "2500-2500")
    assert rerun["model_calls"] == 0 and rerun["cache_hits"] == 1
    assert rerun_rejects == rejects

    monkeypatch.setenv("FLAWFORGE_LLM_REPLAY", "true")
    replayed, replay_rejects, _ = run_templates(tmp_path, gsm8k, templates, model, "2500-2501")
    assert replayed["model_calls"] == 0 and replayed["cache_hits"] == 1 and replayed["attempted"] == 2
    assert [(r["problem_index"], r["reason"]) for r in replay_rejects] == [(2500, "invalid_output"),
                                                                          (2501, "replay_miss")]
    assert replayed["rejects_by_reason"] == {"invalid_output": 1, "replay_miss": 1}


def test_problems_with_templates_are_skipped_and_bad_ranges_refused(shared_data, tmp_path, monkeypatch):
    # A provider that serves the model but is never reached: no problem needs a call.
    monkeypatch.setenv("FLAWFORGE_LLM_PROVIDERS", '{"down": {"base_url": "http://127.0.0.1:9/v1", "models": ["any-model"]}}')
    gsm8k = shared_data / "gsm8k" / "train.jsonl"
    templates = shared_data / "formalization-templates"
    # nothing to ask the model: the command exits 1 saying so, the report written
    report, rejects, kept = run_templates(tmp_path, gsm8k, templates, "any-model", "1001-1001", status=1)
    assert (report["requested"], report["skipped_existing"], report["attempted"]) == (1, 1, 0)
    assert report["model_calls"] == 0 and report["pass_rate"] == 0.0 and rejects == kept == []

    result = CliRunner().invoke(app, ["run", "templates", "--gsm8k", str(gsm8k), "--indices", "9-2",
                                      "--model", "m", "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "indices" in str(result.exception)


def test_validation_keeps_passing_templates_and_rejects_others_with_the_reason(shared_data, tmp_path):
    from flawforge.jobs.context import JobContext
    from flawforge.jobs.store import JobStore
    from flawforge.proto.math import FormalizationReply
    from flawforge.llm.gateway import StructuredOutcome
    from flawforge.llm.errors import InvalidModelOutput
    from flawforge.math.gsm8k import read_gsm8k
    from flawforge.pipelines.templates import TemplateGenerationParams, validate_outcomes
    from flawforge.assembly import platform_for
    from flawforge.settings import Settings

    problems = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")
    folder = shared_data / "formalization-templates" / "tier1"
    # Real templates as if a model had written them: 1001's own (valid) and 1004's given for 1001 (wrong answer).
    replies = [FormalizationReply(code=(folder / f"{i}" / "google_gemini-2.5-flash.py").read_text(),
                                  logical_steps=json.loads((folder / f"{i}" / "google_gemini-2.5-flash.json").read_text()))
               for i in (1001, 1004)]
    outcomes = [StructuredOutcome(value=replies[0]), StructuredOutcome(value=replies[1]),
                StructuredOutcome(error=InvalidModelOutput("the reply is not valid JSON: Expecting value"))]
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    params = TemplateGenerationParams(gsm8k="unused", indices="1001-1001", model="org/some-model")
    ctx = JobContext(platform, JobStore(platform.store).create("templates", params.model_dump()).job_id)

    kept, rejects = validate_outcomes(ctx, params, [problems[1001], problems[1001], problems[1002]], outcomes)
    [template] = kept
    assert (template.problem_index, template.tier, template.template_model) == (1001, "tier1", "org_some-model")
    assert template.code == replies[0].code and template.final_answer == "1145"
    assert [(r.problem_index, r.reason) for r in rejects] == [(1001, "answer_mismatch"), (1002, "invalid_output")]
    assert "GSM8K's answer is 1145" in rejects[0].detail and "not valid JSON" in rejects[1].detail

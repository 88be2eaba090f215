"""Template generation: ask a model, through the llm-gateway, for formalization templates of GSM8K
problems that have none, validate each one in the sandbox, and keep only those that pass.

Artifacts: templates.jsonl (ProblemTemplate per passing template), rejects.jsonl (Reject per problem
that produced nothing, with the reason), report.json (TemplateGenerationReport, with the pass rate).
"""
from __future__ import annotations

import itertools
import re
import threading
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputFile, InputFolder
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.llm.gateway import Gateway, StructuredOutcome
from flawforge.llm.limits import Budget, CallScope
from flawforge.math.formalization_prompt import formalization_request
from flawforge.math.gsm8k import GSM8KProblem, index_range, read_gsm8k
from flawforge.math.templates import DEFAULT_MODEL_PREFERENCE, InvalidTemplate, TemplateFolder, problem_template
from flawforge.math.tiers import tier_of
from flawforge.proto.base import jsonl
from flawforge.proto.llm import TemplateGenerationReport
from flawforge.proto.math import FormalizationReply, ProblemTemplate, Reject

class TemplateGenerationParams(BaseModel):
    model_config = {"extra": "forbid"}
    gsm8k: InputFile = Field(description="Path of a GSM8K jsonl file (row N is problem N), under the data roots.")
    indices: str = Field(description="Inclusive problem range 'A-B'.")
    model: str = Field(min_length=1, max_length=200, description="Model name, as the llm-gateway's providers serve it.")
    templates: InputFolder | None = Field(None, description="Folder of existing templates (tierN/<index>/<model>.py "
                                                            "+ .json) under the data roots: problems with one are "
                                                            "skipped, a few are shown as examples.")
    examples: int = Field(1, ge=0, le=8, description="Existing templates shown to the model as examples.")
    max_tokens: int = Field(2048, ge=16, le=32768, description="Reply length limit per request.")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature of the model's replies "
                                                                 "(0: its most likely reply).")
    mode: Literal["sync", "batch"] = Field("sync", description="Synchronous calls or the provider's Batch API.")
    concurrency: int = Field(2, ge=1, le=64, description="Synchronous calls in flight at once.")
    max_repairs: int | None = Field(None, ge=0, le=5, description="Repair requests per invalid reply; "
                                                                   "default: the gateway's setting.")
    budget_requests: int | None = Field(None, ge=1, le=10_000_000, description="Most model requests this job may make.")
    budget_tokens: int | None = Field(None, ge=1, le=10**12, description="Most tokens this job may spend.")

    @field_validator("indices")
    @classmethod
    def _range(cls, value: str) -> str:
        if "-" not in value:
            raise ValueError("must be 'A-B' with A <= B, e.g. 2500-2509")
        index_range(value)  # says what is wrong with it
        return value.strip()

    def index_range(self) -> range:
        return index_range(self.indices)


def template_model_name(model: str) -> str:
    """The model's name as a template file stem (the data's convention: 'openai/gpt-4.1' -> 'openai_gpt-4.1')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model)


def example_templates(folder: TemplateFolder, problems: list[GSM8KProblem], count: int) -> list[tuple]:
    """The `count` shortest readable tier-1 templates by the preferred models: short examples keep prompts small."""
    found = []
    for index in folder.indices():
        if index >= len(problems) or "tier1" not in folder.tiers_of(index):
            continue
        for files in folder.in_preference_order("tier1", index, DEFAULT_MODEL_PREFERENCE)[:1]:
            try:
                code, steps = files.read()
            except InvalidTemplate:
                continue
            found.append((len(code) + len(str(steps)), index, code, steps))
    found.sort()
    return [(index, problems[index].question, problems[index].answer, code, steps)
            for _, index, code, steps in found[:count]]


def run(ctx: JobContext, params: TemplateGenerationParams) -> None:
    problems = read_gsm8k(params.gsm8k)
    wanted = params.index_range()
    if wanted.stop > len(problems):
        raise FlawforgeError(f"indices {params.indices}: {params.gsm8k} has problems 0-{len(problems) - 1}")
    folder = TemplateFolder(params.templates) if params.templates else None
    existing = set(folder.indices()) if folder else set()
    todo = [problems[i] for i in wanted if i not in existing]
    examples = example_templates(folder, problems, params.examples) if folder and params.examples else []
    requests = [formalization_request(model=params.model, index=p.index, question=p.question, solution=p.answer,
                                      examples=examples, max_tokens=params.max_tokens,
                                      temperature=params.temperature) for p in todo]
    scope = CallScope(job_id=ctx.job_id, budget=Budget(params.budget_requests, params.budget_tokens),
                      is_cancelled=lambda: ctx.jobs.get(ctx.job_id).cancel_requested)
    ctx.progress(0, len(todo), "asking the model", force=True)
    replied, progress_lock = itertools.count(1), threading.Lock()

    def count_reply() -> None:  # called from the gateway's worker threads
        with progress_lock:
            ctx.progress(next(replied), None, "model replies")

    gateway = Gateway.from_settings(ctx.platform.store, ctx.platform.settings)
    try:
        outcomes = gateway.structured_many(
            requests, FormalizationReply, scope, mode=params.mode, concurrency=params.concurrency,
            max_repairs=params.max_repairs, on_settled=count_reply)
    finally:
        gateway.close()
    ctx.check_cancelled()
    kept, rejects = validate_outcomes(ctx, params, todo, outcomes)
    replies = [reply for outcome in outcomes for reply in outcome.replies]
    by_reason: dict[str, int] = {}
    for reject in rejects:
        by_reason[reject.reason] = by_reason.get(reject.reason, 0) + 1
    report = TemplateGenerationReport(
        model=params.model, indices=params.indices, requested=len(wanted), skipped_existing=len(wanted) - len(todo),
        attempted=len(todo), parsed=sum(o.value is not None for o in outcomes), passed=len(kept),
        pass_rate=len(kept) / len(todo) if todo else 0.0, rejects_by_reason=by_reason,
        model_calls=sum(not r.cached for r in replies), cache_hits=sum(r.cached for r in replies),
        repairs=sum(o.repairs for o in outcomes), loop_retries=sum(o.loop_retried for o in outcomes),
        closed_at_budget=sum(o.value is not None and o.replies[-1].finish_reason == "length" for o in outcomes),
        prompt_tokens=sum(r.usage.prompt_tokens for r in replies),
        completion_tokens=sum(r.usage.completion_tokens for r in replies))
    ctx.put_artifact("templates.jsonl", jsonl(kept))
    ctx.put_artifact("rejects.jsonl", jsonl(rejects))
    ctx.put_artifact("report.json", report.model_dump_json(indent=1).encode())


def validate_outcomes(ctx: JobContext, params: TemplateGenerationParams, todo: list[GSM8KProblem],
                      outcomes: list[StructuredOutcome[FormalizationReply]]) -> tuple[list[ProblemTemplate], list[Reject]]:
    """Runs the template-loader's validation on every parsed reply; the rest are rejected with the gateway's error.

    The sandbox starts only when some reply parsed."""
    from flawforge.math.validation import validate_template
    from flawforge.sandbox import Sandbox

    model_name = template_model_name(params.model)
    kept: list[ProblemTemplate] = []
    rejects: list[Reject] = []
    parsed = [(problem, outcome) for problem, outcome in zip(todo, outcomes) if outcome.value is not None]
    for problem, outcome in zip(todo, outcomes):
        if outcome.value is None:
            rejects.append(Reject(problem_index=problem.index, tier=tier_of(problem.answer), template_model=model_name,
                                  reason=outcome.error.code, detail=str(outcome.error)))
    if not parsed:
        return kept, rejects
    with Sandbox.from_settings(ctx.platform.settings) as sandbox:
        for done, (problem, outcome) in enumerate(parsed, start=1):
            ctx.check_cancelled()
            tier = tier_of(problem.answer)
            steps = [step.model_dump() for step in outcome.value.logical_steps]
            verdict = validate_template(problem_index=problem.index, template_model=model_name,
                                        gsm8k_answer=problem.answer, code=outcome.value.code, logical_steps=steps,
                                        sandbox=sandbox)
            if verdict.valid:
                kept.append(problem_template(problem, tier, model_name, outcome.value.code, steps))
            else:
                rejects.append(Reject(problem_index=problem.index, tier=tier, template_model=model_name,
                                      reason=verdict.reason or "invalid_template", detail=verdict.detail))
            ctx.progress(done, len(parsed), "validating")
    rejects.sort(key=lambda reject: reject.problem_index)
    return kept, rejects


PIPELINE = register(Pipeline(name="templates", description="Formalization templates written by a model through "
                                                           "the llm-gateway, validated, with the pass rate.",
                             params=TemplateGenerationParams, owner="llm-gateway", run=run, resumable=True))

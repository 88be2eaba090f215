"""Semantic-pressure dataset (seed 001, modules 1-2): prompts whose natural one-word answer is a target
word, validated, scored by P_sem and balanced over P0 bins.

The job (run by the llm-gateway) builds each category's candidate pool from offline sources
(flawforge/pressure/sources.py) and asks the model, in one Batch API batch per category, for what the
sources leave missing; runs the deterministic filters; scores P0 and P1 through the inference-server's
/v1/research/pressure, whose S(X) the token filters read (a target no form of which is one token is
refused); validates every surviving candidate in one batch; and selects per category
(flawforge/pressure/bins.py). Every model request and response is written to the job's audit
log before the next step, and a log that cannot be written stops the job before the call.

Artifacts: prompts.jsonl (PromptRecord), rejects.jsonl (CandidateReject), audit.jsonl (AuditRecord),
summary.json. All four are functions of the parameters and the models' answers: a rerun gives the
same bytes.
"""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, Field

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.llm.gateway import Gateway, StructuredOutcome
from flawforge.llm.limits import CallScope
from flawforge.pressure import bins, filters, sources, validation
from flawforge.pressure.generators import GENERATORS, Refused, Slot, TargetedGenerator
from flawforge.pressure.prompts import baseline_prompt, negative_prompt
from flawforge.inference.word_forms import norm
from flawforge.proto.base import jsonl
from flawforge.proto.inference import PressureRequest, PressureResponse
from flawforge.proto.pressure import CATEGORIES, Category, PromptRecord, p0_bin_of
from flawforge.proto.pressure_dataset import AuditRecord, Candidate, CandidateReject, ValidatorReply

PRESSURE_PATH = "/research/pressure"
PRESSURE_ITEMS_PER_CALL = 512


class PressureDatasetParams(BaseModel):
    model_config = {"extra": "forbid"}
    per_category: int = Field(500, ge=1, le=5000, description="Prompts per category (the seed: 500).")
    categories: list[Category] = Field(list(CATEGORIES), min_length=1, description="Categories to build, in the "
                                                                                  "order A-E whatever the order "
                                                                                  "given.")
    model: Optional[str] = Field(None, max_length=200, description="The studied model, whose P0 and P1 are measured, as the "
                                                   "llm-gateway's providers serve it; default: the first "
                                                   "provider's first model.")
    validator_model: Optional[str] = Field(None, max_length=200, description="The model that fills source gaps and validates "
                                                             "(the seed's GPT-5.2); default: the studied model.")
    seed: int = Field(42, ge=0, lt=1 << 63, description="Seed of every sample drawn from the sources and of the model requests.")
    # A validation is about 80 tokens of JSON, a micro-story reply about 100; the local provider reserves up to half
    # of the budget to close the JSON, so the budget leaves room for the whole reply before that.
    fallback_max_tokens: int = Field(256, ge=16, le=4096, description="Reply length limit of a fallback request.")
    validator_max_tokens: int = Field(256, ge=16, le=4096, description="Reply length limit of a validation.")
    max_repairs: int = Field(0, ge=0, le=5, description="Repair requests per reply that is not the JSON asked "
                                                        "for (0: such a reply is a reject, with its reason).")
    reject_sentence_counts: bool = Field(False, description="Discard creative texts that are not two sentences "
                                                            "and OOD texts not one or two (the reference only "
                                                            "counts them).")


class AuditLog:
    """The job's record of every model request and response, kept in the blob store as it happens.

    Requests are written before they are sent, so a log that cannot be written stops the job before
    any unrecorded call; audit.jsonl is the parts in order."""

    def __init__(self, ctx: JobContext):
        self.ctx = ctx
        self.parts: list[str] = []

    def write(self, name: str, records: list[AuditRecord]) -> None:
        key = self.ctx.item_key(f"audit/{len(self.parts):03d}-{name}.jsonl")
        try:
            self.ctx.platform.store.put(key, jsonl(records))
        except Exception as exc:
            raise FlawforgeError(f"cannot write the audit log at {key!r} ({type(exc).__name__}: {exc}); "
                                 "no model call is made unrecorded") from exc
        self.parts.append(key)

    def content(self) -> bytes:
        return b"".join(self.ctx.platform.store.get(key) for key in self.parts)


class Run:
    """One job's state between the steps."""

    def __init__(self, ctx: JobContext, params: PressureDatasetParams, gateway: Gateway, scope: CallScope):
        self.ctx, self.params, self.gateway, self.scope = ctx, params, gateway, scope
        self.audit = AuditLog(ctx)
        self.rejects: list[CandidateReject] = []
        self.counts: dict[str, Counter] = {c: Counter() for c in CATEGORIES}
        provider = next(iter(gateway.providers.values()))
        self.model = params.model or provider.models()[0]
        self.validator_model = params.validator_model or self.model
        self.categories = [c for c in CATEGORIES if c in params.categories]

    def reject(self, candidate: Candidate, stage: str, reason: str, detail: str = "") -> None:
        self.rejects.append(CandidateReject(candidate=candidate, stage=stage, reason=reason, detail=detail))
        self.counts[candidate.category][f"rejected_{stage}"] += 1

    def ask(self, stage: str, requests: list, linked: list[list[str]], schema: type[BaseModel]
            ) -> list[StructuredOutcome]:
        """One Batch API batch of structured requests, each logged before it goes and answered after."""
        if not requests:
            return []
        model = requests[0].model
        ids = [f"{stage}/{n:05d}" for n in range(len(requests))]
        self.audit.write(f"{stage}-requests", [
            AuditRecord(audit_id=audit_id, kind="request", stage=stage.split("-")[0], candidate_ids=link,
                        model=model, request=request.model_dump(mode="json", exclude_none=True))
            for audit_id, request, link in zip(ids, requests, linked)])
        outcomes = self.gateway.structured_many(requests, schema, self.scope, mode="batch",
                                                max_repairs=self.params.max_repairs)
        self.audit.write(f"{stage}-responses", [
            AuditRecord(audit_id=audit_id, kind="response", stage=stage.split("-")[0], candidate_ids=link,
                        model=model, response=reply.content, cached=reply.cached,
                        error=str(outcome.error) if outcome.error and n == len(outcome.replies) - 1 else None)
            for audit_id, link, outcome in zip(ids, linked, outcomes)
            for n, reply in enumerate(outcome.replies or [None]) if reply is not None] + [
            AuditRecord(audit_id=audit_id, kind="response", stage=stage.split("-")[0], candidate_ids=link,
                        model=model, error=str(outcome.error))
            for audit_id, link, outcome in zip(ids, linked, outcomes) if not outcome.replies])
        return outcomes


def failure(outcome: StructuredOutcome, schema: type[BaseModel]) -> tuple[str, str]:
    """(reason, detail) of a reply that made nothing: `empty_reply` where it says nothing (a blank reply, or a
    required field blank), else the gateway's code (invalid_output, a provider error...)."""
    blank = validation.silent_fields(outcome.replies[-1].content, schema) if outcome.replies else []
    if blank:
        return "empty_reply", f"{', '.join(blank)}: says nothing ({outcome.error})"
    return outcome.error.code, str(outcome.error)


def placeholder(slot: Slot, model: str) -> Candidate:
    """What a fallback reject names when the reply made no candidate: the slot asked for."""
    return Candidate(candidate_id=slot.slot_id, category=slot.category, question_text="",
                     target_word=slot.target, source=f"llm:{model}",
                     detail={k: v for k, v in {"slot": slot.slot_id, "relation": slot.relation,
                                               "requested_target": slot.target}.items() if v})


def candidates_from_replies(run: Run, generator, slots: list[Slot], outcomes: list[StructuredOutcome]
                            ) -> list[Candidate]:
    """The candidates the fallback replies make; a reply that says nothing (empty_reply), is not the JSON asked
    for (text, a wrong shape) or does not fit its slot is a reject naming why."""
    made = []
    for slot, outcome in zip(slots, outcomes):
        if outcome.value is None:
            run.reject(placeholder(slot, run.validator_model), "fallback", *failure(outcome, generator.reply_schema))
            continue
        try:
            made.append(generator.from_reply(slot, outcome.value, run.validator_model))
        except Refused as refused:
            run.reject(placeholder(slot, run.validator_model), "fallback", refused.reason, refused.detail)
    return made


def build_pools(run: Run) -> dict[str, list[Candidate]]:
    """Each category's pool: its offline candidates, then one fallback batch for what is missing."""
    params = run.params
    records = {"idioms": sources.wordnet_idioms(), "facts": sources.countries(),
               "common_sense": sources.wordnet_relations()}
    band = sources.zipf_band()
    pools: dict[str, list[Candidate]] = {}
    for category in run.categories:
        generator = GENERATORS[category]
        rng = random.Random(f"{params.seed}:{category}")
        size = generator.pool_size(params.per_category)
        if isinstance(generator, TargetedGenerator):
            offline, slots = [], generator.target_slots(generator.targets(band, params.per_category, rng))
        else:
            offline = generator.offline(records[category], size, rng)
            slots = generator.slots(offline, size)
        run.counts[category].update(pool_wanted=size, offline=len(offline), fallback_requested=len(slots))
        run.ctx.progress(0, len(slots), f"{category}: asking the model for {len(slots)} candidates", force=True)
        requests = [generator.request(slot, run.validator_model, params.fallback_max_tokens) for slot in slots]
        outcomes = run.ask(f"fallback-{category}", requests, [[slot.slot_id] for slot in slots],
                           generator.reply_schema)
        made = candidates_from_replies(run, generator, slots, outcomes)
        run.counts[category]["fallback_made"] = len(made)
        pool, seen = [], set()
        for candidate in offline + made:
            if candidate.candidate_id in seen:
                run.reject(candidate, "filter", "duplicate", "the same question and target came twice")
                continue
            seen.add(candidate.candidate_id)
            pool.append(candidate)
        pools[category] = pool
    return pools


def apply_filters(run: Run, pools: dict[str, list[Candidate]]) -> list[Candidate]:
    kept = []
    for category in run.categories:
        for candidate in pools[category]:
            failed = filters.first_failure(candidate, run.params.reject_sentence_counts)
            if failed:
                run.reject(candidate, "filter", *failed)
            else:
                kept.append(candidate)
                run.counts[category]["passed_filters"] += 1
    return kept


def validate(run: Run, candidates: list[Candidate]) -> list[tuple[Candidate, ValidatorReply]]:
    """One batch over every candidate; those whose reply parses are validated (accepted or not)."""
    requests = [validation.validator_request(baseline_prompt(c.question_text), c, run.validator_model,
                                             run.params.validator_max_tokens) for c in candidates]
    run.ctx.progress(0, len(requests), f"validating {len(requests)} candidates", force=True)
    outcomes = run.ask("validator", requests, [[c.candidate_id] for c in candidates], ValidatorReply)
    validated = []
    for candidate, outcome in zip(candidates, outcomes):
        if outcome.value is None:
            run.reject(candidate, "validator", *failure(outcome, ValidatorReply))
            continue
        validated.append((candidate, outcome.value))
        run.counts[candidate.category]["validated"] += 1
        run.counts[candidate.category]["accepted"] += validation.refusal(outcome.value, candidate.target_word) is None
    return validated


@dataclass(frozen=True)
class Pressure:
    """A candidate's P0 and P1 on the studied model, and S(X): its target's token sequences."""

    p0: float
    p1: float
    sequences: list[list[int]]


def measure_pressure(run: Run, candidates: list[Candidate]) -> dict[str, Pressure]:
    """P0, P1 and S(X) of each candidate, through the inference-server that serves the studied model."""
    provider, upstream = run.gateway.resolve(run.model, run.scope)
    items = [item for c in candidates for item in (
        {"prompt": baseline_prompt(c.question_text), "target": c.target_word},
        {"prompt": negative_prompt(c.question_text, c.target_word), "target": c.target_word})]
    results = []
    for start in range(0, len(items), PRESSURE_ITEMS_PER_CALL):
        run.ctx.check_cancelled()
        chunk = items[start:start + PRESSURE_ITEMS_PER_CALL]
        linked = [c.candidate_id for c in candidates[start // 2:(start + len(chunk)) // 2]]
        request = PressureRequest(model=upstream, items=chunk)
        audit_id = f"pressure/{start // PRESSURE_ITEMS_PER_CALL:05d}"
        run.audit.write(f"pressure-{start // PRESSURE_ITEMS_PER_CALL:05d}-request", [AuditRecord(
            audit_id=audit_id, kind="request", stage="pressure", candidate_ids=linked, model=run.model,
            request=request.model_dump(mode="json"))])
        response = PressureResponse.model_validate(
            provider.post(PRESSURE_PATH, request.model_dump(mode="json"), run.scope,
                          attempts=run.gateway.max_attempts))
        run.audit.write(f"pressure-{start // PRESSURE_ITEMS_PER_CALL:05d}-response", [AuditRecord(
            audit_id=audit_id, kind="response", stage="pressure", candidate_ids=linked, model=response.model,
            response=json.dumps([[r.p_sem, r.p_first, len(r.sequences)] for r in response.results]))])
        results += response.results
        run.ctx.progress(start + len(chunk), len(items), "P_sem")
    return {c.candidate_id: Pressure(results[2 * i].p_sem, results[2 * i + 1].p_sem,
                                     [seq.token_ids for seq in results[2 * i].sequences]) for i, c in enumerate(candidates)}


def apply_token_filters(run: Run, candidates: list[Candidate], pressure: dict[str, Pressure]) -> list[Candidate]:
    """The candidates whose target the studied model's tokenizer writes as the token filters want."""
    kept = []
    for candidate in candidates:
        failed = filters.first_token_failure(candidate, pressure[candidate.candidate_id].sequences)
        if failed:
            run.reject(candidate, "filter", *failed)
        else:
            kept.append(candidate)
            run.counts[candidate.category]["passed_token_filters"] += 1
    return kept


def select(run: Run, validated: list[tuple[Candidate, ValidatorReply]], pressure: dict[str, Pressure]
           ) -> tuple[list[PromptRecord], list[bins.Selection]]:
    by_id = {c.candidate_id: (c, reply) for c, reply in validated}
    tracker = bins.TargetTracker()
    records, selections = [], []
    for category in run.categories:
        scored = []
        for candidate, reply in validated:
            if candidate.category != category:
                continue
            v = validation.v_score(reply, candidate.target_word)
            scored.append(bins.Scored(
                key=candidate.candidate_id, category=category, target=norm(candidate.target_word),
                p0=pressure[candidate.candidate_id].p0, s=validation.s_score(v, pressure[candidate.candidate_id].p0),
                accepted=validation.refusal(reply, candidate.target_word) is None,
                question_length=len(candidate.question_text)))
        selection = bins.select_category(category, scored, run.params.per_category, tracker,
                                         best_of_target=isinstance(GENERATORS[category], TargetedGenerator))
        selections.append(selection)
        chosen = {item.key for item in selection.chosen}
        for item in scored:
            if item.key in chosen:
                continue
            candidate, reply = by_id[item.key]
            refused = validation.refusal(reply, candidate.target_word)
            run.reject(candidate, "validator" if refused else "selection", refused or "not_selected",
                       f"S={item.s:.4f}, P0={item.p0:.3g}")
        for n, item in enumerate(selection.chosen):
            candidate, reply = by_id[item.key]
            p0, p1 = pressure[item.key].p0, pressure[item.key].p1
            records.append(PromptRecord(
                prompt_id=f"{category}-{n:04d}", category=category, question_text=candidate.question_text,
                target_word=candidate.target_word,
                validation={**reply.model_dump(), "accepted": item.accepted,
                            "refusal": validation.refusal(reply, candidate.target_word),
                            "candidate_id": candidate.candidate_id, "source": candidate.source,
                            **filters.sentence_diagnostic(candidate)},
                v_score=validation.v_score(reply, candidate.target_word), p0=p0, p1=p1, p0_bin=p0_bin_of(p0),
                s_score=item.s))
        run.counts[category]["selected"] = len(selection.chosen)
    return records, selections


def summary(run: Run, records: list[PromptRecord], selections: list[bins.Selection]) -> dict:
    by_stage = Counter(r.stage for r in run.rejects)
    return {
        "per_category": run.params.per_category,
        "model": run.model,
        "validator_model": run.validator_model,
        "seeds": {"sources": run.params.seed, "requests": "each request's seed is its slot number; "
                                                          "validator requests use seed 0 at temperature 0"},
        "prompts": len(records),
        "counts_by_category": {c: dict(sorted(run.counts[c].items())) for c in run.categories},
        "prompts_by_category_and_bin": {s.category: dict(Counter(r.p0_bin for r in records
                                                                 if r.category == s.category)) for s in selections},
        "tau_by_category": {s.category: s.tau for s in selections},
        "bin_shortfalls_by_category": {s.category: s.bin_shortfalls for s in selections},
        "shortfalls": [event for s in selections for event in s.shortfalls],
        "rejects_by_stage": dict(sorted(by_stage.items())),
        "rejects_by_stage_and_reason": dict(sorted(Counter(f"{r.stage}:{r.reason}" for r in run.rejects).items())),
        "p0_max": max((r.p0 for r in records), default=0.0),
        "p0_mean": sum(r.p0 for r in records) / len(records) if records else 0.0,
    }


def run(ctx: JobContext, params: PressureDatasetParams) -> None:
    started = time.monotonic()
    scope = CallScope(job_id=ctx.job_id, is_cancelled=lambda: ctx.jobs.get(ctx.job_id).cancel_requested)
    gateway = Gateway.from_settings(ctx.platform.store, ctx.platform.settings)
    try:
        state = Run(ctx, params, gateway, scope)
        pools = build_pools(state)
        ctx.check_cancelled()
        filtered = apply_filters(state, pools)
        ctx.check_cancelled()
        # P_sem before the validator: its S(X) is what the token filters read, and a candidate they refuse costs
        # no validation.
        pressure = measure_pressure(state, filtered)
        validated = validate(state, apply_token_filters(state, filtered, pressure))
        ctx.check_cancelled()
        records, selections = select(state, validated, pressure)
    finally:
        gateway.close()
    ctx.put_artifact("prompts.jsonl", jsonl(records))
    ctx.put_artifact("rejects.jsonl", jsonl(state.rejects))
    ctx.put_artifact("audit.jsonl", state.audit.content())
    ctx.put_artifact("summary.json", (json.dumps(summary(state, records, selections), indent=1) + "\n").encode())
    ctx.progress(len(records), len(records), f"done in {time.monotonic() - started:.1f} s", force=True)


PIPELINE = register(Pipeline(name="pressure-dataset", description="Semantic-pressure prompts (seed 001): offline "
                                                                  "sources and batch fallbacks, validated, scored "
                                                                  "by P_sem and balanced over P0 bins.",
                             params=PressureDatasetParams, owner="llm-gateway", run=run, resumable=True))

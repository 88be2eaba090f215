"""Semantic-pressure study (seed 001, modules 3-6): prompts.jsonl -> completions, traces, metrics,
figures, tables.json and report.md.

The job runs in an inference-server, beside the model, and cuts the run into work items on the bus
(proto/pressure_work.py) that any inference-server takes, so N servers run one study. First the
batches (the file's order cut every `batch_prompts`): per batch, both conditions' greedy completions
(8 tokens), the decision step T of each, one traced forward pass at T (hidden states, attentions,
logit lens and the attention / MLP decomposition; the `.pt` blobs), and the sampling pass (16
samples per prompt and condition). Once every batch is in, activation patching on the balanced
high-P0 subset, one work item per prompt. Every batch and every patched prompt is stored under the
run's key (a hash of the prompts, the model and the parameters) by the server that ran it, so a
killed run started again with the same inputs and blob store hands out only what is missing: nothing
is computed twice. A batch's numbers depend on the batch alone, not on which server ran it.
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid

from pydantic import BaseModel, Field

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputFile, read_input
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.proto.base import jsonl
from flawforge.proto.pressure import PromptRecord
from flawforge.proto.pressure_work import STUDY_UNIT, PassParams, StudyWork

RUN_PREFIX = "pressure/runs"


class PressureStudyParams(BaseModel):
    model_config = {"extra": "forbid"}
    prompts: InputFile | None = Field(None, description="Path of prompts.jsonl (one PromptRecord a line), as the "
                                                        "worker sees it, under the data roots; None with demo.")
    demo: bool = Field(False, description="Build a small prompt set with the dataset stage's offline generators "
                                          "instead.")
    demo_prompts: int = Field(24, ge=4, le=200, description="Prompts the demo builds.")
    samples: int = Field(16, ge=1, le=64, description="Samples per prompt and condition.")
    temperature: float = Field(1.0, gt=0, le=2, description="Sampling temperature of the samples.")
    top_p: float = Field(0.9, gt=0, le=1, description="Nucleus (top-p) mass of the samples.")
    seed: int = Field(42, ge=0, lt=1 << 63, description="Sampling and bootstrap seed.")
    greedy_tokens: int = Field(8, ge=1, le=64, description="Tokens of the greedy completion (and of each patched "
                                                           "run's).")
    sample_tokens: int = Field(10, ge=1, le=64, description="Tokens of each sample.")
    batch_prompts: int = Field(8, ge=1, le=256, description="Prompts per batch of the greedy, trace and sampling "
                                                            "passes: one work item, and the unit a resumed run "
                                                            "skips.")
    decompose_first: int = Field(-10, ge=-1024, le=1023, description="First block of the attention / MLP "
                                 "decomposition; negative counts from the end (-10: the last ten blocks, as the "
                                 "paper's figure shows blocks 18-27 of 28).")
    decompose_last: int = Field(-1, ge=-1024, le=1023, description="Last block of the decomposition (inclusive); "
                                                                   "-1: the model's last block.")
    patch_subset: int | None = Field(None, ge=0, le=1_000_000, description="Most prompts patched; None: the whole balanced subset.")
    bootstrap_resamples: int = Field(1000, ge=10, le=100_000, description="Bootstrap resamples of the statistics' "
                                                                          "intervals (prompts within their P0 bin).")
    stop_after_batches: int | None = Field(None, ge=0, le=1_000_000, description="Stop (fail) after this many new batches: "
                                                                   "for testing resumption.")

    def passes(self) -> PassParams:
        """What a server running the study's work items needs of these parameters."""
        return PassParams.model_validate(self.model_dump(include=set(PassParams.model_fields)))


def read_prompts(path: str) -> list[PromptRecord]:
    """The records of a prompts.jsonl; a bad line is named with its number."""
    from pydantic import ValidationError

    try:
        lines = read_input(path).decode("utf-8").splitlines()  # a regular file, bounded, opened without blocking
    except OSError as exc:
        raise FlawforgeError(f"cannot read prompts file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FlawforgeError(f"cannot read prompts file {path}: {exc}") from None
    records, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = PromptRecord.model_validate_json(line)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(map(str, err["loc"])) or "line"
            raise FlawforgeError(f"{path}:{number}: {where}: {err['msg']}") from None
        if record.prompt_id in seen:
            raise FlawforgeError(f"{path}:{number}: prompt_id {record.prompt_id!r} appears twice")
        seen.add(record.prompt_id)
        records.append(record)
    if not records:
        raise FlawforgeError(f"{path} holds no prompts")
    return records


def run_key(records: list[PromptRecord], model: str, params: PressureStudyParams) -> str:
    """Names the run's stored state: the same prompts, model and parameters find it again."""
    kept = params.model_dump(exclude={"stop_after_batches", "patch_subset", "bootstrap_resamples"})
    text = json.dumps([model, kept, [r.model_dump(mode="json") for r in records]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StopRequested(FlawforgeError):
    """A run asked to stop after some batches (resumption tests)."""


# A study's work items can take hours in all; the wait fails sooner only when nothing consumes them.
ITEMS_TIMEOUT_S = 30 * 24 * 3600.0


def hand_out(ctx: JobContext, stage: str, key: str, model: str, passes: PassParams,
             items: list[tuple[str, list[PromptRecord], int | None]], message: str) -> None:
    """Publishes one StudyWork item per (name, prompts, batch number) and waits until the run's state holds each
    one's results. Its inputs and items are named by attempt, for the reason math_errors.run gives."""
    if not items:
        return
    attempt = uuid.uuid4().hex[:12]
    refs = ctx.platform.store.put_slices(ctx.input_key(f"{attempt}-{stage}.jsonl"),
                                         [jsonl(prompts) for _, prompts, _ in items])
    expected: dict[str, list[str]] = {}  # work item: the prompts whose results it holds
    for (name, prompts, batch), ref in zip(items, refs):
        item = f"{attempt}-{name}"
        expected[item] = [record.prompt_id for record in prompts]
        ctx.publish(STUDY_UNIT, StudyWork(job_id=ctx.job_id, item=item, stage=stage, run_key=key, model=model,
                                          batch=batch, prompts=ref, params=passes))
    weights = {item: len(prompt_ids) for item, prompt_ids in expected.items()}
    for item, result in ctx.results_as_done(STUDY_UNIT, list(expected), weights=weights, message=message,
                                            timeout_s=ITEMS_TIMEOUT_S):
        if result.prompt_ids != expected[item]:
            raise FlawforgeError(f"work item {item} of job {ctx.job_id} holds the results of prompts "
                                 f"{result.prompt_ids}, not of {expected[item]}")


def run(ctx: JobContext, params: PressureStudyParams) -> None:
    from flawforge.inference.host import host_for
    from flawforge.pressure import study_runner

    started = time.monotonic()
    if not params.demo and not params.prompts:
        raise FlawforgeError("give a prompts file or ask for the demo")
    records = read_prompts(params.prompts) if not params.demo else None  # a bad file fails before the model loads
    host = host_for(ctx.platform.settings)
    backend = host.wait()
    lm = host.research_model()
    if records is None:
        records = demo_records(ctx, lm, params)
    key = f"{RUN_PREFIX}/{run_key(records, lm.name, params)}"
    passes = params.passes()
    runner = study_runner.StudyRunner(lm, backend, ctx.platform.store, key, passes)
    clock = runner.start_invocation()
    batches = runner.batches(records)
    missing = runner.missing_batches(records)
    stop = params.stop_after_batches is not None and len(missing) > params.stop_after_batches
    hand_out(ctx, "passes", key, lm.name, passes,
             [(f"batch-{index:05d}", batches[index], index) for index in missing[:params.stop_after_batches]],
             "prompts")
    if stop:
        raise StopRequested(f"stopped after {params.stop_after_batches} new batches, as asked")
    results, batch_seconds = runner.stored_batches(records)
    subset = study_runner.patch_subset(records, results, params.patch_subset)
    by_id = {record.prompt_id: record for record in records}
    hand_out(ctx, "patching", key, lm.name, passes,
             [(f"patch-{prompt_id}", [by_id[prompt_id]], None) for prompt_id in runner.missing_patches(subset)],
             "patched prompts")
    patches, patch_seconds = runner.stored_patches(subset)
    clock.update(batch_seconds=batch_seconds, patch_seconds=patch_seconds,
                 invocation_seconds=time.monotonic() - started, since_first_start=time.time() - clock["first_started"])
    outputs = study_runner.outputs(records, results, subset, patches, params, lm, key,
                                   runner.head_maps(records, results), clock)
    for name, data in outputs.items():
        ctx.put_artifact(name, data)


def demo_records(ctx: JobContext, lm, params: PressureStudyParams) -> list[PromptRecord]:
    """The demo's prompts, scored once and kept in the store: a resumed demo run finds them again."""
    name = hashlib.sha256(f"{lm.name}:{params.demo_prompts}:{params.seed}:{DEMO_VERSION}".encode()).hexdigest()[:16]
    key = f"{RUN_PREFIX}/demo/{name}.jsonl"
    store = ctx.platform.store
    if store.exists(key):
        return [PromptRecord.model_validate_json(line) for line in store.get(key).decode().splitlines()]
    ctx.progress(0, None, "scoring the demo prompts", force=True)
    records = build_demo_prompts(lm, params.demo_prompts, params.seed)
    store.put(key, jsonl(records))
    return records


# Names how the demo's prompts are chosen, in their stored copy's key: a change of rule is a new demo.
DEMO_VERSION = 3


def p_sem_of(lm, prompts: list[str], sequences: list[list[list[int]]]) -> list[float]:
    """P_sem of each prompt's target (its token sequences S(X)), teacher-forced on the served model."""
    from flawforge.inference import word_forms
    from flawforge.inference.research import score_continuations

    items = [(lm.tokenizer(prompt)["input_ids"], seqs) for prompt, seqs in zip(prompts, sequences)]
    return [word_forms.p_sem(scores) for scores in score_continuations(lm, items, 4096)]


def build_demo_prompts(lm, count: int, seed: int) -> list[PromptRecord]:
    """Up to `count` demo prompts: the demo's pool (pressure/demo.py), those whose target has a single-token form
    kept, their P0 measured, `count` of them spread over the P0 bins reached, and their P1 measured."""
    from flawforge.inference import word_forms
    from flawforge.pressure import demo, filters
    from flawforge.pressure.prompts import baseline_prompt, negative_prompt
    from flawforge.proto.pressure import p0_bin_of

    encode = lambda text: lm.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    decode = lambda ids: lm.tokenizer.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    pool, sequences = [], []
    for candidate in demo.demo_pool(count, seed):
        seqs = [list(s) for s in word_forms.sequences(candidate.target_word, encode, decode)]
        if filters.first_token_failure(candidate, seqs) is None:
            pool.append(candidate)
            sequences.append(seqs)
    p0 = p_sem_of(lm, [baseline_prompt(c.question_text) for c in pool], sequences)
    chosen = demo.spread_over_bins(p0, count)
    p1 = p_sem_of(lm, [negative_prompt(pool[i].question_text, pool[i].target_word) for i in chosen],
                  [sequences[i] for i in chosen])
    return [PromptRecord(prompt_id=f"demo-{n:03d}", category=pool[i].category, question_text=pool[i].question_text,
                         target_word=pool[i].target_word, validation={"source": pool[i].source, "validated": False},
                         v_score=0, p0=p0[i], p1=p1[n], p0_bin=p0_bin_of(p0[i]), s_score=100 * p0[i])
            for n, i in enumerate(chosen)]


PIPELINE = register(Pipeline(
    name="pressure-study", description="Semantic-pressure study: violations, traces, logit lens, patching, "
                                       "statistics, figures and tables.",
    params=PressureStudyParams, owner="inference-server", run=run, resumable=True))

"""Semantic-pressure study (seed 001, modules 3-6): prompts.jsonl -> completions, traces, metrics,
figures, tables.json and report.md.

The job runs in the inference-server, beside the model. Prompts are processed in fixed batches (the
file's order cut every `batch_prompts`): per batch, both conditions' greedy completions (8 tokens),
the decision step T of each, one traced forward pass at T (hidden states, attentions, logit lens and
the attention / MLP decomposition; the `.pt` blobs), and the sampling pass (16 samples per prompt
and condition). Then activation patching on the balanced high-P0 subset, one prompt at a time.
Every batch and every patched prompt stores its result under the run's key (a hash of the prompts,
the model and the parameters) before the next starts, so a killed run started again with the same
inputs and blob store skips what is done: nothing is computed twice.
"""
from __future__ import annotations

import hashlib
import json
import time

from pydantic import BaseModel, Field

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputFile, read_input
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.proto.pressure import PromptRecord

RUN_PREFIX = "pressure/runs"


class PressureStudyParams(BaseModel):
    model_config = {"extra": "forbid"}
    prompts: InputFile | None = Field(None, description="Path of prompts.jsonl (one PromptRecord a line), as the "
                                                        "worker sees it, under the data roots; None with demo.")
    demo: bool = Field(False, description="Build a small prompt set with the dataset stage's offline generators "
                                          "instead.")
    demo_prompts: int = Field(40, ge=4, le=200, description="Prompts the demo builds.")
    samples: int = Field(16, ge=1, le=64, description="Samples per prompt and condition.")
    temperature: float = Field(1.0, gt=0, le=2)
    top_p: float = Field(0.9, gt=0, le=1)
    seed: int = Field(42, ge=0, lt=1 << 63, description="Sampling and bootstrap seed.")
    greedy_tokens: int = Field(8, ge=1, le=64)
    sample_tokens: int = Field(10, ge=1, le=64)
    batch_prompts: int = Field(8, ge=1, le=256, description="Prompts per batch of the greedy, trace and sampling "
                                                            "passes (the unit a resumed run skips).")
    decompose_first: int = Field(-10, ge=-1024, le=1023, description="First block of the attention / MLP "
                                 "decomposition; negative counts from the end (-10: the last ten blocks, as the "
                                 "paper's figure shows blocks 18-27 of 28).")
    decompose_last: int = Field(-1, ge=-1024, le=1023, description="Last block of the decomposition (inclusive); "
                                                                   "-1: the model's last block.")
    patch_subset: int | None = Field(None, ge=0, le=1_000_000, description="Most prompts patched; None: the whole balanced subset.")
    bootstrap_resamples: int = Field(1000, ge=10, le=100_000)
    stop_after_batches: int | None = Field(None, ge=0, le=1_000_000, description="Stop (fail) after this many new batches: "
                                                                   "for testing resumption.")


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


def run(ctx: JobContext, params: PressureStudyParams) -> None:
    from flawforge.pipelines import pressure_study_runner as study_runner
    from flawforge.services.inference_server.host import host_for

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
    runner = study_runner.StudyRunner(lm, backend, ctx.platform.store, key, params)
    clock = runner.start_invocation()
    results, batch_seconds = runner.run_batches(records, progress=lambda done, total: ctx.progress(
        done, total, "prompts"), check_cancelled=ctx.check_cancelled)
    subset, patches, patch_seconds = runner.run_patching(records, results, progress=lambda done, total: ctx.progress(
        done, total, "patched prompts"), check_cancelled=ctx.check_cancelled)
    clock.update(batch_seconds=batch_seconds, patch_seconds=patch_seconds,
                 invocation_seconds=time.monotonic() - started, since_first_start=time.time() - clock["first_started"])
    outputs = study_runner.outputs(records, results, subset, patches, params, lm, key,
                                   runner.head_maps(records, results), clock)
    for name, data in outputs.items():
        ctx.put_artifact(name, data)


def demo_records(ctx: JobContext, lm, params: PressureStudyParams) -> list[PromptRecord]:
    """The demo's prompts, scored once and kept in the store: a resumed demo run finds them again."""
    from flawforge.proto.base import jsonl
    from flawforge.pressure.demo import build_demo_prompts

    name = hashlib.sha256(f"{lm.name}:{params.demo_prompts}:{params.seed}".encode()).hexdigest()[:16]
    key = f"{RUN_PREFIX}/demo/{name}.jsonl"
    store = ctx.platform.store
    if store.exists(key):
        return [PromptRecord.model_validate_json(line) for line in store.get(key).decode().splitlines()]
    ctx.progress(0, None, "scoring the demo prompts", force=True)
    records = build_demo_prompts(lm, params.demo_prompts, params.seed)
    store.put(key, jsonl(records))
    return records


PIPELINE = register(Pipeline(
    name="pressure-study", description="Semantic-pressure study: violations, traces, logit lens, patching, "
                                       "statistics, figures and tables.",
    params=PressureStudyParams, owner="inference-server", run=run, resumable=True))

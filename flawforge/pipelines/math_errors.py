"""Math error pipeline: GSM8K problems + formalization templates -> flawed solutions.

The job (run by the template-loader) reads GSM8K and the template folder, assigns tiers,
validates each problem's templates in the sandbox in model-preference order, and publishes
the problems with a usable template in ProblemBatch work items. The mutator turns each item
into its problems' candidates and rejects, stored at the job's item key; the job collects them and writes
candidates.jsonl, rejects.jsonl, validation.jsonl and summary.json. Everything except
summary's elapsed_seconds is a function of the inputs, so reruns give identical bytes.
"""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from typing import Annotated, Iterator

from pydantic import BaseModel, Field, field_validator

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputFile, InputFolder
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.math.gsm8k import index_range, read_gsm8k
from flawforge.math.selection import stable_hash
from flawforge.math.templates import DEFAULT_MODEL_PREFERENCE, TemplateFolder, choose_templates
from flawforge.math.tiers import tier_of
from flawforge.math.type_mix import shipped_type_mix
from flawforge.proto.base import jsonl
from flawforge.proto.math import (COMPUTATIONAL_TYPES, CONCEPTUAL_TYPES, PROBLEMS, BatchProblem, Caps, Family,
                                  ProblemBatch, ProblemTemplate, Reject, TemplateValidation, ValidatedTemplate)

# Problems whose templates are validated in one sandbox batch (a fork per program would cost more than the run).
# The first batch is smaller: the generation processes wait for it, and start while the next is validated.
VALIDATED_TOGETHER = 64
VALIDATED_FIRST = 16
# Problems a work item: one result file and one message for several problems (a file a problem cost the job a
# tenth more CPU), while a chunk still makes a work item for each of several generation processes.
PROBLEMS_PER_ITEM = 8
ERROR_TYPES = {"computational": COMPUTATIONAL_TYPES, "conceptual": CONCEPTUAL_TYPES}
# A template file's stem: no separator, no leading dot (it names a file in each problem folder).
ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")]


class MathErrorsParams(BaseModel):
    model_config = {"extra": "forbid"}
    gsm8k: InputFile = Field(description="Path of the GSM8K jsonl file (row N is problem N), as the worker sees it, "
                                         "under the data roots.")
    templates: InputFolder = Field(description="Folder of templates laid out tierN/<index>/<model>.py + <model>.json, "
                                               "under the data roots.")
    indices: str | None = Field(None, description="Problems 'A-B' (inclusive); default: from the lowest to the "
                                                  "highest index that has a template.")
    families: list[Family] = Field(["computational", "conceptual"], min_length=1, description="Error families.")
    model_preference: list[ModelName] = Field(list(DEFAULT_MODEL_PREFERENCE), min_length=1, max_length=16,
                                              description="Template models, most preferred first.")
    seed: int = Field(0, ge=0, lt=1 << 63, description="Base seed; each problem's seed derives from it and its "
                                                       "template.")
    caps: Caps = Field(default_factory=Caps, description="Candidates a problem may keep (None: no limit).")
    with_traces: bool = Field(False, description="Write each candidate's correct and flawed traces into "
                                                 "candidates.jsonl (about three times its size; mutated_code "
                                                 "reproduces them).")

    @field_validator("indices")
    @classmethod
    def _indices_range(cls, value: str | None) -> str | None:
        if value is not None:
            index_range(value)
        return value

    @field_validator("families")
    @classmethod
    def _distinct_families(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


def problem_seed(base_seed: int, template: ProblemTemplate) -> int:
    """Derived from the job's seed, the problem and its template (never from hash(), which varies per process)."""
    digest = stable_hash(str(base_seed), str(template.problem_index), template.template_model, template.code)
    return int(digest[:16], 16) >> 1


def _summary(params: MathErrorsParams, requested: int, templates: dict[int, ProblemTemplate],
             error_types: dict[int, list[str]], rejects: list[Reject], elapsed: float) -> dict:
    """`error_types`: each generated problem's candidates' error types."""
    family_of = {t: family for family, types in ERROR_TYPES.items() for t in types}
    by_type = Counter({t: 0 for family in params.families for t in ERROR_TYPES[family]})
    by_tier: Counter = Counter()
    for problem_index, types in error_types.items():
        by_type.update(types)
        by_tier[templates[problem_index].tier] += len(types)
    by_family = Counter()
    for error_type, count in by_type.items():
        if count:
            by_family[family_of[error_type]] += count
    return {
        "caps": params.caps.model_dump(),
        "problems": requested,
        "problems_with_template": len(templates),
        "problems_with_candidates": sum(bool(types) for types in error_types.values()),
        "problems_by_tier": dict(sorted(Counter(t.tier for t in templates.values()).items())),
        "templates_by_model": dict(sorted(Counter(t.template_model for t in templates.values()).items())),
        "candidates": sum(by_type.values()),
        "candidates_by_family": dict(sorted(by_family.items())),
        "candidates_by_error_type": dict(sorted(by_type.items())),
        # each family's generated mix of error types beside the mix people make (flawforge.math.type_mix)
        "type_mix": shipped_type_mix().report(by_type, params.families),
        "candidates_by_tier": dict(sorted((tier, n) for tier, n in by_tier.items() if n)),
        "rejects": len(rejects),
        "rejects_by_reason": dict(sorted(Counter(r.reason for r in rejects).items())),
        "elapsed_seconds": round(elapsed, 3),
    }


def validation_chunks(indices: range) -> Iterator[range]:
    """The problems whose templates are validated together, in order: VALIDATED_FIRST, then VALIDATED_TOGETHER
    at a time."""
    start, size = 0, VALIDATED_FIRST
    while start < len(indices):
        yield indices[start:start + size]
        start, size = start + size, VALIDATED_TOGETHER


def batches(chosen: list[tuple[int, ValidatedTemplate]]) -> list[list[tuple[int, ValidatedTemplate]]]:
    """The problems of a validation chunk in work items of PROBLEMS_PER_ITEM."""
    return [chosen[start:start + PROBLEMS_PER_ITEM] for start in range(0, len(chosen), PROBLEMS_PER_ITEM)]


def _catalog(ctx: JobContext, items: dict[str, list[int]], error_types: dict[int, list[str]],
             rejects: list[Reject]) -> Iterator[bytes]:
    """candidates.jsonl: each problem's candidates in problem order, as soon as its result and those of the
    problems before it have landed, so the catalog is written while later problems are still generating.
    `items` are the work items, each with the problems whose results it holds, in order. Records each problem's
    candidates' error types in `error_types` (as results land) and adds its rejects to `rejects`; the candidates
    themselves are held only until they are written."""
    landed: dict[int, bytes] = {}
    upcoming = iter(sorted(index for problems in items.values() for index in problems))
    following = next(upcoming, None)
    weights = {item: len(problems) for item, problems in items.items()}
    for item, batch in ctx.results_as_done(PROBLEMS, list(items), weights=weights, message="generating candidates"):
        held, expected = [result.problem_index for result in batch.problems], items[item]
        if held != expected:
            raise FlawforgeError(f"work item {item} of job {ctx.job_id} holds the results of problems {held}, "
                                 f"not of {expected}")
        for result in batch.problems:
            error_types[result.problem_index] = [candidate.error_type for candidate in result.candidates]
            rejects += result.rejects
            landed[result.problem_index] = jsonl(result.candidates)
        while following in landed:
            yield landed.pop(following)
            following = next(upcoming, None)


def run(ctx: JobContext, params: MathErrorsParams) -> None:
    from flawforge.sandbox import Sandbox

    started = time.monotonic()
    store = ctx.platform.store
    problems = read_gsm8k(params.gsm8k)
    folder = TemplateFolder(params.templates)
    extent = folder.extent()  # a folder without templates fails the job here, whatever the indices
    indices = index_range(params.indices) if params.indices else extent
    if indices.stop > len(problems):
        raise FlawforgeError(f"indices {params.indices or f'{indices.start}-{indices.stop - 1}'} go beyond the "
                             f"{len(problems)} problems of {params.gsm8k}")

    # Inputs are named by this attempt: a job run again (its service restarted) never rewrites the inputs that
    # work items of the earlier attempt, still queued, point to.
    attempt = uuid.uuid4().hex[:12]
    templates: dict[int, ProblemTemplate] = {}
    items: dict[str, list[int]] = {}  # work item: its problems
    rejects: list[Reject] = []
    verdicts: list[TemplateValidation] = []
    with Sandbox.from_settings(ctx.platform.settings) as sandbox:
        for chunk in validation_chunks(indices):
            ctx.check_cancelled()
            choices = choose_templates([(problems[index], tier_of(problems[index].answer)) for index in chunk],
                                       folder, params.model_preference, sandbox)
            chosen = []
            for index, choice in zip(chunk, choices):
                rejects += choice.rejects
                verdicts += choice.verdicts
                if choice.template is not None:
                    templates[index] = choice.template
                    chosen.append((index, ValidatedTemplate(template=choice.template, run=choice.run)))
            # The chunk's validated templates in one blob (JSON lines), each work item pointing to its own lines:
            # one file a chunk, not one a problem.
            chunk_batches = batches(chosen)
            refs = store.put_slices(ctx.input_key(f"{attempt}-{chunk.start}.jsonl"),
                                    [b"".join(validated.model_dump_json().encode() + b"\n" for _, validated in batch)
                                     for batch in chunk_batches]) if chosen else []
            for batch, ref in zip(chunk_batches, refs):
                # named by the attempt too: a work item of an earlier attempt, still queued, never lands as this one
                item = f"{attempt}-problems-{batch[0][0]}-{batch[-1][0]}"
                items[item] = [index for index, _ in batch]
                ctx.publish(PROBLEMS, ProblemBatch(
                    job_id=ctx.job_id, item=item, templates=ref, families=params.families, caps=params.caps,
                    with_traces=params.with_traces,
                    problems=[BatchProblem(problem_index=index, tier=validated.template.tier,
                                           template_model=validated.template.template_model,
                                           seed=problem_seed(params.seed, validated.template))
                              for index, validated in batch]))
            ctx.progress(chunk.stop - indices.start, len(indices), "validating templates")

    error_types: dict[int, list[str]] = {}
    ctx.put_artifact_chunks("candidates.jsonl", _catalog(ctx, items, error_types, rejects))
    rejects.sort(key=lambda r: (r.problem_index, r.template_model or "", r.reason, r.detail))
    verdicts.sort(key=lambda v: (v.problem_index, v.template_model))
    ctx.put_artifact("rejects.jsonl", jsonl(rejects))
    ctx.put_artifact("validation.jsonl", jsonl(verdicts))
    summary = _summary(params, len(indices), templates, error_types, rejects, time.monotonic() - started)
    ctx.put_artifact("summary.json", (json.dumps(summary, indent=1) + "\n").encode())


PIPELINE = register(Pipeline(name="math-errors", description="Computational and conceptual errors injected into "
                                                             "GSM8K solutions through formalization templates.",
                             params=MathErrorsParams, owner="template-loader", run=run,
                             # its job publishes work items to the mutator; it validates in a sandbox of its own
                             services=("mutator",)))

"""Every formalization template of the shared data, run once through the mutation engine.

The test modules of the mutation engine share this run (it takes a few minutes on the real
sandbox), so it is computed on first use and kept for the rest of the test session.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from flawforge.math.generate import FAMILIES, ProblemOutput, generate_for_problem
from flawforge.math.gsm8k import read_gsm8k
from flawforge.math.selection import stable_hash
from flawforge.math.templates import TemplateFolder, problem_template
from flawforge.proto.math import ProblemTemplate
from flawforge.sandbox import Sandbox, SandboxLimits

LIMITS = SandboxLimits(timeout_s=5, memory_mb=256, workdir_mb=16, output_bytes=16 * 1024, result_bytes=1 << 20)
# Generation is Python work between sandbox batches: a few threads keep both busy.
THREADS = 3

Key = tuple[str, int, str]  # tier, problem index, template model


def key_of(template: ProblemTemplate) -> Key:
    return template.tier, template.problem_index, template.template_model


def seed_of(template: ProblemTemplate) -> int:
    return int(stable_hash(str(template.problem_index), template.tier, template.template_model)[:12], 16)


@lru_cache(maxsize=None)
def all_templates(shared_data: Path) -> tuple[ProblemTemplate, ...]:
    """Every template of every model (not only the preferred one) with its GSM8K problem."""
    folder = TemplateFolder(shared_data / "formalization-templates")
    problems = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")
    templates = []
    for index in folder.indices():
        for tier in folder.tiers_of(index):
            for model in sorted(folder.models(tier, index)):
                code, steps = folder.files(tier, index, model).read()
                templates.append(problem_template(problems[index], tier, model, code, steps))
    return tuple(templates)


def generate_all(sandbox: Sandbox, templates: tuple[ProblemTemplate, ...], **options) -> dict[Key, ProblemOutput]:
    def one(template: ProblemTemplate) -> ProblemOutput:
        return generate_for_problem(template, sandbox, options.get("families", list(FAMILIES)), seed_of(template),
                                    with_traces=True, **{k: v for k, v in options.items() if k != "families"})

    with ThreadPoolExecutor(THREADS) as pool:
        return dict(zip(map(key_of, templates), pool.map(one, templates)))


@lru_cache(maxsize=None)
def corpus_outputs(shared_data: Path) -> dict[Key, ProblemOutput]:
    """Both error families on every template, with the default caps."""
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sandbox:
        return generate_all(sandbox, all_templates(shared_data))

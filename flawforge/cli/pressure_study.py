"""`flawforge run pressure-study`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.run import JobOptions, field_option, job_command, run_pipeline
from flawforge.errors import FlawforgeError
from flawforge.pipelines.pressure_study import PressureStudyParams as Params

DEMO_PATCHED_PROMPTS = 6  # patching costs some 30 forward passes a kind per prompt: the demo keeps to minutes


@job_command("pressure-study")
def run_pressure_study(
        prompts: Optional[Path] = field_option(Params, "prompts", "--prompts"),
        demo: bool = field_option(Params, "demo", "--demo"),
        demo_prompts: int = field_option(Params, "demo_prompts", "--demo-prompts"),
        model: Optional[Path] = typer.Option(None, "--model", help="Model folder or .gguf (embedded runs); default: "
                                                                   "the configured one."),
        samples: int = field_option(Params, "samples"),
        temperature: float = field_option(Params, "temperature"),
        top_p: float = field_option(Params, "top_p"),
        seed: int = field_option(Params, "seed"),
        greedy_tokens: int = field_option(Params, "greedy_tokens"),
        sample_tokens: int = field_option(Params, "sample_tokens"),
        patch_subset: Optional[int] = field_option(Params, "patch_subset", "--patch-subset",
                                                   syntax=f"With --demo: {DEMO_PATCHED_PROMPTS} unless given."),
        batch_prompts: int = field_option(Params, "batch_prompts"),
        decompose_first: int = field_option(Params, "decompose_first", "--decompose-first"),
        decompose_last: int = field_option(Params, "decompose_last", "--decompose-last"),
        bootstrap_resamples: int = field_option(Params, "bootstrap_resamples"), *,
        job: JobOptions) -> None:
    """Semantic-pressure study: completions, traces, logit lens, patching, statistics, figures, tables.json and
    report.md in OUT. Run again with the same inputs and OUT to resume a stopped run."""
    if demo == (prompts is not None):
        raise FlawforgeError("give either --prompts FILE or --demo")
    if model is not None and job.stack:
        raise FlawforgeError("--model applies to embedded runs; a stack serves its own model")
    if demo and patch_subset is None:
        patch_subset = DEMO_PATCHED_PROMPTS
    params = {"prompts": str(prompts.resolve()) if prompts else None, "demo": demo, "demo_prompts": demo_prompts,
              "samples": samples, "temperature": temperature, "top_p": top_p, "seed": seed,
              "greedy_tokens": greedy_tokens, "sample_tokens": sample_tokens, "patch_subset": patch_subset,
              "batch_prompts": batch_prompts, "decompose_first": decompose_first, "decompose_last": decompose_last,
              "bootstrap_resamples": bootstrap_resamples}
    overrides = {}
    if model is not None:
        from flawforge.inference.loading import resolve_source

        overrides["inference_model_path"] = str(resolve_source(str(model)).path)  # a bad path fails before the job
    run_pipeline("pressure-study", params, job, settings_overrides=overrides)
    typer.echo((job.out / "report.md").read_text())

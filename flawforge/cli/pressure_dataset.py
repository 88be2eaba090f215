"""`flawforge run pressure-dataset`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.run import JobOptions, comma_list, field_option, job_command, providers_configured, run_pipeline
from flawforge.pipelines.pressure_dataset import PressureDatasetParams as Params


@job_command("pressure-dataset")
def run_pressure_dataset(
        per_category: int = field_option(Params, "per_category", "--per-category"),
        model: Optional[str] = field_option(Params, "model", syntax="Embedded without providers: a model folder or "
                                                                    ".gguf the local server loads (e.g. "
                                                                    "Qwen2.5-7B-Instruct, bf16 on CUDA); default: "
                                                                    "the local model."),
        validator_model: Optional[str] = field_option(Params, "validator_model", "--validator-model"),
        seed: int = field_option(Params, "seed"),
        categories: str = field_option(Params, "categories", syntax="Comma-separated."),
        fallback_max_tokens: int = field_option(Params, "fallback_max_tokens"),
        validator_max_tokens: int = field_option(Params, "validator_max_tokens"),
        max_repairs: int = field_option(Params, "max_repairs"),
        reject_sentence_counts: bool = field_option(Params, "reject_sentence_counts", "--reject-sentence-counts"), *,
        job: JobOptions) -> None:
    """Semantic-pressure prompts (seed 001): OUT/prompts.jsonl, rejects.jsonl, audit.jsonl, summary.json.

    Embedded, with no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this process."""
    params = {"per_category": per_category, "model": model, "validator_model": validator_model, "seed": seed,
              "categories": comma_list(categories), "fallback_max_tokens": fallback_max_tokens,
              "validator_max_tokens": validator_max_tokens, "max_repairs": max_repairs,
              "reject_sentence_counts": reject_sentence_counts}
    model_path = Path(model).expanduser() if model and Path(model).expanduser().exists() else None
    if model_path is not None and not job.stack and not providers_configured():
        params["model"] = None  # the local server's one model, whatever it is named
    run_pipeline("pressure-dataset", params, job, local_model=str(model_path.resolve()) if model_path else "")
    typer.echo((job.out / "summary.json").read_text())

"""`flawforge run templates`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.run import JobOptions, field_option, job_command, run_pipeline
from flawforge.pipelines.templates import TemplateGenerationParams as Params


@job_command("templates")
def run_templates(gsm8k: Path = field_option(Params, "gsm8k", "--gsm8k"),
                  indices: str = field_option(Params, "indices"),
                  model: str = field_option(Params, "model"),
                  templates: Optional[Path] = field_option(Params, "templates"),
                  examples: int = field_option(Params, "examples"),
                  max_tokens: int = field_option(Params, "max_tokens"),
                  temperature: float = field_option(Params, "temperature"),
                  mode: str = field_option(Params, "mode", syntax="(sync or batch)"),
                  concurrency: int = field_option(Params, "concurrency"),
                  max_repairs: Optional[int] = field_option(Params, "max_repairs"),
                  budget_requests: Optional[int] = field_option(Params, "budget_requests"),
                  budget_tokens: Optional[int] = field_option(Params, "budget_tokens"), *, job: JobOptions) -> None:
    """Formalization templates for GSM8K problems, written by a model and validated; reports the pass rate.

    Embedded, with no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this process."""
    params = {"gsm8k": str(gsm8k.resolve()), "indices": indices, "model": model, "examples": examples,
              "templates": str(templates.resolve()) if templates else None, "max_tokens": max_tokens,
              "temperature": temperature, "mode": mode, "concurrency": concurrency, "max_repairs": max_repairs,
              "budget_requests": budget_requests, "budget_tokens": budget_tokens}

    def nothing_asked(out: Path) -> Optional[str]:
        report = json.loads((out / "report.json").read_text())
        if not report["attempted"]:
            return f"every problem of {indices} has a template in {templates} already; nothing to ask the model"
        if not report["model_calls"] and not report["cache_hits"]:
            reasons = ", ".join(f"{reason} ({n})" for reason, n in report["rejects_by_reason"].items())
            return f"no model reply for any of the {report['attempted']} problems ({reasons})"
        return None

    run_pipeline("templates", params, job, nothing_done=nothing_asked, local_model="")
    typer.echo((job.out / "report.json").read_text())

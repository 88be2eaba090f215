"""The `flawforge` command."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.review import review_app
from flawforge.cli.sandbox import sandbox_app
from flawforge.errors import FlawforgeError

app = typer.Typer(help="Flawforge: realistic failures for training and studying language models.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
run_app = typer.Typer(help="Run a pipeline, embedded by default or on a stack with --stack URL.",
                      no_args_is_help=True)
app.add_typer(run_app, name="run")
app.add_typer(review_app, name="review")
app.add_typer(sandbox_app, name="sandbox")

StackOption = typer.Option(None, "--stack", help="Base URL of a running Flawforge service; default: run embedded.")
OutOption = typer.Option(..., "--out", help="Folder for the job's artifacts.")


def run_pipeline(pipeline: str, params: dict, out: Path, stack: Optional[str]) -> None:
    """Shared by every `run` subcommand: validate, run, write artifacts, report."""
    from flawforge.cli.jobs_client import run_embedded, run_on_stack
    from flawforge.jobs.pipeline import pipelines
    from pydantic import ValidationError

    try:
        pipelines()[pipeline].params.model_validate(params)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise FlawforgeError(f"invalid {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if stack:
        status = run_on_stack(stack, pipeline, params, out)
    elif _keep_blobs():
        status = run_embedded(pipeline, params, out, _embedded_settings(out / ".blobs"))
    else:
        import tempfile

        # the blob store lives only as long as the run: OUT keeps the artifacts, not a copy of every blob
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".blobs-", dir=out) as scratch:
            status = run_embedded(pipeline, params, out, _embedded_settings(Path(scratch)))
    typer.echo(f"{pipeline}: job {status.job_id} {status.state.value}; artifacts in {out}", err=True)


def _embedded_settings(blob_dir: Path):
    from flawforge.settings import Settings

    return Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir))


# Options of `flawforge run` itself, set by its callback before the subcommand runs.
_RUN_OPTIONS = {"keep_blobs": False}


def _keep_blobs() -> bool:
    return _RUN_OPTIONS["keep_blobs"]


@run_app.callback()
def run_options(keep_blobs: bool = typer.Option(
        False, "--keep-blobs", help="Embedded runs: keep the blob store in OUT/.blobs (default: removed after the "
                                    "run; OUT keeps the artifacts).")) -> None:
    """Run a pipeline, embedded by default or on a stack with --stack URL."""
    _RUN_OPTIONS["keep_blobs"] = keep_blobs


@run_app.command("smoke")
def run_smoke(count: int = typer.Option(20, help="Work items."),
              payload_bytes: int = typer.Option(1024, help="Bytes per payload."),
              out: Path = OutOption, stack: Optional[str] = StackOption) -> None:
    """Round trip of payload blobs through the bus (platform check)."""
    run_pipeline("smoke", {"count": count, "payload_bytes": payload_bytes}, out, stack)


@run_app.command("templates")
def run_templates(gsm8k: Path = typer.Option(..., "--gsm8k", help="GSM8K jsonl file (row N is problem N)."),
                  indices: str = typer.Option(..., help="Inclusive problem range A-B, e.g. 2500-2509."),
                  model: str = typer.Option(..., help="Model name, as the llm-gateway's providers serve it."),
                  templates: Optional[Path] = typer.Option(
                      None, help="Existing templates: problems with one are skipped, a few serve as examples."),
                  examples: int = typer.Option(1, help="Existing templates shown to the model as examples."),
                  max_tokens: int = typer.Option(1024, help="Reply length limit per request."),
                  mode: str = typer.Option("sync", help="sync calls, or the provider's Batch API (batch)."),
                  concurrency: int = typer.Option(2, help="Synchronous calls in flight at once."),
                  max_repairs: Optional[int] = typer.Option(
                      None, help="Repair requests per invalid reply; default FLAWFORGE_LLM_MAX_REPAIRS."),
                  budget_requests: Optional[int] = typer.Option(None, help="Most model requests the job may make."),
                  budget_tokens: Optional[int] = typer.Option(None, help="Most tokens the job may spend."),
                  out: Path = OutOption, stack: Optional[str] = StackOption) -> None:
    """Formalization templates for GSM8K problems, written by a model and validated; reports the pass rate."""
    params = {"gsm8k": str(gsm8k.resolve()), "indices": indices, "model": model, "examples": examples,
              "templates": str(templates.resolve()) if templates else None, "max_tokens": max_tokens,
              "mode": mode, "concurrency": concurrency, "max_repairs": max_repairs, "budget_requests": budget_requests,
              "budget_tokens": budget_tokens}
    run_pipeline("templates", params, out, stack)
    report = out / "report.json"
    if report.exists():
        typer.echo(report.read_text())


@run_app.command("math-errors")
def run_math_errors(gsm8k: Path = typer.Option(..., "--gsm8k", help="GSM8K jsonl file (row N is problem N)."),
                    templates: Path = typer.Option(..., "--templates",
                                                   help="Template folder: tierN/<index>/<model>.py + <model>.json."),
                    indices: Optional[str] = typer.Option(None, help="Problems A-B (inclusive); default: all with "
                                                                     "templates."),
                    families: str = typer.Option("computational,conceptual", help="Comma-separated error families."),
                    models: Optional[str] = typer.Option(None, "--models", help="Template models, most preferred "
                                                                                "first, comma-separated."),
                    seed: int = typer.Option(0, help="Base seed of the mutations."),
                    caps: Optional[str] = typer.Option(
                        None, help="Candidates a problem keeps, e.g. 'per_type=2,per_line=2,conceptual=5' (the "
                                   "default; computational is unlimited); a limit of 'none', or all of them "
                                   "('none'), keeps every plausible candidate."),
                    out: Path = OutOption, stack: Optional[str] = StackOption) -> None:
    """Computational and conceptual errors in GSM8K solutions: OUT/candidates.jsonl, rejects.jsonl, summary.json."""
    params = {"gsm8k": str(gsm8k.resolve()), "templates": str(templates.resolve()), "indices": indices,
              "families": [f.strip() for f in families.split(",") if f.strip()], "seed": seed}
    if models:
        params["model_preference"] = [m.strip() for m in models.split(",") if m.strip()]
    if caps is not None:
        params["caps"] = caps_of(caps)
    run_pipeline("math-errors", params, out, stack)
    typer.echo((out / "summary.json").read_text())


def read_candidates(path: Path) -> list:
    """The candidates of a math-errors run's candidates.jsonl."""
    from flawforge.math.export import parse_candidates

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FlawforgeError(f"cannot read candidates file {path}: {exc.strerror or exc}") from None
    return parse_candidates(text, str(path))


def caps_of(text: str) -> dict:
    """--caps: 'none', or comma-separated limit=N|none over the limits of flawforge.proto.math.Caps (those not
    named keep their defaults; the pipeline's parameters check the numbers)."""
    from flawforge.proto.math import Caps

    limits = list(Caps.model_fields)
    if text.strip().lower() == "none":
        return dict.fromkeys(limits)
    caps = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, equals, value = (x.strip() for x in part.partition("="))
        if not equals or name not in limits:
            raise FlawforgeError(f"--caps: {part!r} is not limit=N or limit=none, with limit one of {limits}")
        if value.lower() == "none":
            caps[name] = None
        elif value.isdigit():
            caps[name] = int(value)
        else:
            raise FlawforgeError(f"--caps: {name} must be a whole number or 'none', not {value!r}")
    return caps


@app.command("recall")
def recall_report(candidates: Path = typer.Option(..., "--candidates", help="candidates.jsonl of a math-errors run."),
                  human_review: Path = typer.Option(..., "--human-review",
                                                    help="Human review folder: decisions.csv and accepted/."),
                  indices: Optional[str] = typer.Option(None, help="Only the decisions on problems A-B (the "
                                                                   "range the candidates were made for)."),
                  missed: bool = typer.Option(False, help="Also list the accepted errors the candidates miss.")) -> None:
    """How many human review decisions the candidates reproduce, accepted and rejected, as JSON."""
    import json

    from flawforge.math.gsm8k import index_range
    from flawforge.math.recall import read_human_review, recall

    found = read_candidates(candidates)
    decisions = read_human_review(human_review)
    if indices is not None:
        try:
            wanted = index_range(indices)
        except ValueError as exc:
            raise FlawforgeError(f"--indices: {exc}") from None
        decisions = [decision for decision in decisions if decision.problem_index in wanted]
    report = recall(decisions, found)
    result = {"accepted": report.accepted, "accepted_reproduced": report.accepted_produced,
              "accepted_recall": round(report.accepted_recall, 4), "rejected": report.rejected,
              "rejected_reproduced": report.rejected_produced, "rejected_recall": round(report.rejected_recall, 4),
              "accepted_by_error_type": {t: {"accepted": n, "reproduced": report.produced_by_type[t]}
                                         for t, n in sorted(report.accepted_by_type.items())}}
    result["ranker"] = ranker_report(decisions, found)
    if missed:
        result["missed"] = [decision.__dict__ for decision in report.missed]
    typer.echo(json.dumps(result, indent=1))


def ranker_report(decisions: list, candidates: list) -> dict:
    """The plausibility ranker's ROC AUC between the accepted and rejected decisions the candidates reproduce:
    cross-validated (refitted per fold, folds grouped by problem) and with the shipped weights."""
    from flawforge.math.ranking import candidate_features, cross_validated_auc, roc_auc, shipped_ranker
    from flawforge.math.ranking_fit import L2
    from flawforge.math.recall import labelled

    pairs = labelled(decisions, candidates)
    rows = [candidate_features(candidate) for _, candidate in pairs]
    labels = [int(decision.status == "accepted") for decision, _ in pairs]
    groups = [decision.problem_index for decision, _ in pairs]
    ranker = shipped_ranker()
    if len(set(labels)) < 2:
        return {"decisions_scored": len(pairs), "note": "needs accepted and rejected decisions the candidates reproduce"}
    return {"decisions_scored": len(pairs), "accepted_scored": sum(labels),
            "cross_validated_auc": round(cross_validated_auc(rows, labels, groups, l2=L2), 4),
            "shipped_weights_auc": round(roc_auc([ranker.score(row) for row in rows], labels), 4)}


@app.command("export")
def export_dataset(candidates: Path = typer.Option(..., "--candidates", help="candidates.jsonl of a math-errors run."),
                   gsm8k: Path = typer.Option(..., "--gsm8k", help="The GSM8K jsonl file the candidates came from."),
                   out: Path = OutOption,
                   test_fraction: float = typer.Option(0.2, help="Share of GSM8K problems on the test side."),
                   seed: int = typer.Option(0, help="Seed of the problem split.")) -> None:
    """The error-detection dataset: OUT/train.jsonl and OUT/test.jsonl, split by GSM8K problem."""
    import json

    from flawforge.math.export import build_dataset
    from flawforge.math.gsm8k import read_gsm8k

    splits = build_dataset(read_candidates(candidates), read_gsm8k(gsm8k), test_fraction, seed)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (out / f"{split}.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    counts = {split: {"rows": len(rows), "problems": len({r["problem_index"] for r in rows})}
              for split, rows in splits.items()}
    typer.echo(json.dumps(counts))


@app.command()
def serve(service: str = typer.Argument(..., help="Service name, e.g. trace-executor."),
          port: Optional[int] = typer.Option(None, help="HTTP port; default FLAWFORGE_HTTP_PORT, else the service's own."),
          host: Optional[str] = typer.Option(None, help="Bind address; default FLAWFORGE_HTTP_HOST.")) -> None:
    """Run one service: its HTTP API and its queue workers."""
    import uvicorn

    from flawforge.runtime.app import create_app
    from flawforge.runtime.platform import Platform
    from flawforge.services import load_service
    from flawforge.settings import Settings

    try:
        spec = load_service(service)
    except KeyError as exc:
        raise FlawforgeError(exc.args[0]) from None
    settings = Settings(service=service)
    platform = Platform.from_settings(settings)
    uvicorn.run(create_app(spec, platform), host=host or settings.http_host, port=port or settings.http_port or spec.port,
                log_level="info")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except FlawforgeError as exc:
        typer.echo(f"flawforge: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

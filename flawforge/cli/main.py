"""The `flawforge` command."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.entry import INTERRUPTED, interrupted
from flawforge.cli.outputs import output_folder
from flawforge.cli.review import review_app
from flawforge.cli.run import OutOption, run_app
from flawforge.cli.sandbox import sandbox_app
from flawforge.errors import FlawforgeError, Interrupted, NothingDone

app = typer.Typer(help="Flawforge: realistic failures for training and studying language models.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
app.add_typer(run_app, name="run")
app.add_typer(review_app, name="review")
app.add_typer(sandbox_app, name="sandbox")

# What --host may be: a host name, an IPv4 or IPv6 address (no spaces, controls or other scripts' characters).
BIND_HOST = re.compile(r"[A-Za-z0-9.:_%-]{1,253}")


@app.command("validate-conversation")
def validate_conversation(file: Path = typer.Argument(..., help="A task's solution: OUT/solutions/<task id>.json."),
                          task: Optional[Path] = typer.Option(None, "--task", help="The task folder; default: "
                                                                                   "OUT/tasks/<task id>."),
                          dump_dir: Optional[Path] = typer.Option(None, "--dump-dir",
                                                                  help="Also write the clean and buggy file here.")
                          ) -> None:
    """Re-runs a saved task in the sandbox: the buggy code still fails, the fixed code still passes."""
    from flawforge.cli.debugging import validate_conversation as revalidate

    report = revalidate(file, task, dump_dir)
    typer.echo(json.dumps(report, indent=1))
    if not report["reproduced"]:
        raise typer.Exit(1)


@app.command("recall")
def recall_report(candidates: Path = typer.Option(..., "--candidates", help="candidates.jsonl of a math-errors run."),
                  human_review: Path = typer.Option(..., "--human-review",
                                                    help="Human review folder: decisions.csv and accepted/."),
                  indices: Optional[str] = typer.Option(None, help="Only the decisions on problems A-B (the "
                                                                   "range the candidates were made for)."),
                  missed: bool = typer.Option(False, help="Also list the accepted errors the candidates miss."),
                  cross_validate: bool = typer.Option(
                      False, "--cross-validate",
                      help="The candidates are an uncapped run (--caps none): also report the recall of the selection "
                           "under --caps, replayed per problem with a ranker fitted on the other folds' problems."),
                  caps: Optional[str] = typer.Option(None, help="With --cross-validate: the caps replayed, as run "
                                                                "math-errors takes them (default: the default caps).")
                  ) -> None:
    """How many human review decisions the candidates reproduce, accepted and rejected, as JSON."""
    from flawforge.math.gsm8k import index_range
    from flawforge.math.recall import cross_validated_recall, read_human_review, recall
    from flawforge.cli.math_errors import caps_of
    from flawforge.math.type_mix import shipped_type_mix
    from flawforge.proto.math import Caps

    # Every argument is checked before the candidates are parsed (seconds for a whole run's file).
    wanted = None
    if indices is not None:
        try:
            wanted = index_range(indices)
        except ValueError as exc:
            raise FlawforgeError(f"--indices: {exc}") from None
    if caps is not None and not cross_validate:
        raise FlawforgeError("--caps applies with --cross-validate")
    try:
        replayed = Caps.model_validate(caps_of(caps)) if caps is not None else Caps()
    except ValueError as exc:  # a limit out of range (pydantic's ValidationError)
        raise FlawforgeError(f"--caps {caps}: {exc}") from None
    if not candidates.is_file():
        raise FlawforgeError(f"--candidates {candidates}: no such file")
    decisions = read_human_review(human_review)
    found = read_candidates(candidates)
    if wanted is not None:
        decisions = [decision for decision in decisions if decision.problem_index in wanted]
    report = recall(decisions, found)
    result = {"accepted": report.accepted, "accepted_reproduced": report.accepted_produced,
              "accepted_recall": round(report.accepted_recall, 4), "rejected": report.rejected,
              "rejected_reproduced": report.rejected_produced, "rejected_recall": round(report.rejected_recall, 4),
              "accepted_by_error_type": {t: {"accepted": n, "reproduced": report.produced_by_type[t]}
                                         for t, n in sorted(report.accepted_by_type.items())}}
    result["ranker"] = ranker_report(decisions, found)
    if cross_validate:
        measured = cross_validated_recall(decisions, found, replayed, shipped_type_mix())
        result["cross_validated"] = {
            "caps": replayed.model_dump()["conceptual"], "folds": "5, grouped by problem",
            "kept": measured.kept, "accepted_recall": round(measured.report.accepted_recall, 4),
            "accepted_reproduced": measured.report.accepted_produced,
            "rejected_recall": round(measured.report.rejected_recall, 4),
            "rejected_reproduced": measured.report.rejected_produced, "auc": round(measured.auc, 4)}
    if missed:
        result["missed"] = [decision.__dict__ for decision in report.missed]
    typer.echo(json.dumps(result, indent=1))


def read_candidates(path: Path) -> list:
    """The candidates of a math-errors run's candidates.jsonl."""
    from flawforge.inputs import InputRefused, read_input
    from flawforge.math.export import parse_candidates

    try:  # a regular file only, bounded: a FIFO or /dev/zero is refused, not waited on
        text = read_input(path).decode("utf-8")
    except InputRefused as exc:
        raise FlawforgeError(f"cannot read candidates file {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FlawforgeError(f"cannot read candidates file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_candidates(text, str(path))


def ranker_report(decisions: list, candidates: list) -> dict:
    """The plausibility ranker's ROC AUC between the accepted and rejected decisions the candidates reproduce:
    cross-validated (refitted per fold, folds grouped by problem) and with the shipped weights."""
    from flawforge.math.ranking import L2, cross_validated_auc, roc_auc, shipped_ranker
    from flawforge.math.recall import examples, labelled

    pairs = labelled(decisions, candidates)
    rows, labels, groups = examples(pairs)
    ranker = shipped_ranker()
    if len(set(labels)) < 2:
        return {"decisions_scored": len(pairs), "note": "needs accepted and rejected decisions the candidates reproduce"}
    return {"decisions_scored": len(pairs), "accepted_scored": sum(labels),
            "cross_validated_auc": round(cross_validated_auc(rows, labels, groups, l2=L2), 4),
            "shipped_weights_auc": round(roc_auc([ranker.score(row) for row in rows], labels), 4)}


export_app = typer.Typer(help="Datasets from a run's outputs.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("math")
def export_dataset(candidates: Path = typer.Option(..., "--candidates", help="candidates.jsonl of a math-errors run."),
                   gsm8k: Path = typer.Option(..., "--gsm8k", help="The GSM8K jsonl file the candidates came from."),
                   out: Path = OutOption,
                   test_fraction: float = typer.Option(0.2, help="Share of GSM8K problems on the test side."),
                   seed: int = typer.Option(0, help="Seed of the problem split.")) -> None:
    """The error-detection dataset: OUT/train.jsonl and OUT/test.jsonl, split by GSM8K problem."""
    from flawforge.math.export import build_dataset
    from flawforge.math.gsm8k import read_gsm8k

    with output_folder(out):
        splits = build_dataset(read_candidates(candidates), read_gsm8k(gsm8k), test_fraction, seed)
        for split, rows in splits.items():
            (out / f"{split}.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    counts = {split: {"rows": len(rows), "problems": len({r["problem_index"] for r in rows})}
              for split, rows in splits.items()}
    typer.echo(json.dumps(counts))


@export_app.command("debug")
def export_debug(run: Path = typer.Argument(..., help="The OUT folder of a debug-conversations run."),
                 fmt: str = typer.Option("swe-bench", "--format", help="swe-bench (a JSONL file) or hf (a Hugging "
                                                                      "Face datasets folder: parquet and README.md)."),
                 out: Optional[Path] = typer.Option(None, "--out", help="Folder to write; default: RUN/export-FORMAT.")
                 ) -> None:
    """The run's instances as a standard dataset: SWE-bench-style JSONL, or a Hugging Face dataset folder."""
    from flawforge.cli.debugging import export_debug as export

    dest = out or run / f"export-{fmt}"
    with output_folder(dest):
        typer.echo(json.dumps(export(run, fmt, dest)))


@app.command()
def serve(service: str = typer.Argument(..., help="Service name, e.g. trace-executor, or 'all': every service as "
                                                   "its own process on RabbitMQ (a local stack without Docker)."),
          port: Optional[int] = typer.Option(None, min=1, max=65535,
                                             help="HTTP port; default FLAWFORGE_HTTP_PORT, else the service's own."),
          host: Optional[str] = typer.Option(None, help="Bind address; default FLAWFORGE_HTTP_HOST."),
          skip: Optional[str] = typer.Option(None, help="With 'all': services to leave out, comma-separated."),
          port_offset: int = typer.Option(0, help="With 'all': added to every service's own port.")) -> None:
    """Run one service: its HTTP API and its queue workers; or every service (`serve all`)."""
    from flawforge.assembly import platform_for, service_app, service_ports
    from flawforge.services import SERVICE_NAMES, load_service
    from flawforge.settings import Settings

    if host is not None and not BIND_HOST.fullmatch(host):
        raise FlawforgeError(f"--host {ascii(host)[:200]} is not a host name or an IP address")
    if service == "all":
        from flawforge.runtime.local_stack import serve_all

        skipped = [s.strip() for s in (skip or "").split(",") if s.strip()]
        unknown = sorted(set(skipped) - set(SERVICE_NAMES))
        if unknown:
            raise FlawforgeError(f"--skip: unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICE_NAMES)}")
        if port is not None:
            raise FlawforgeError("--port names one service's port; with 'all' use --port-offset")
        serve_all([s for s in SERVICE_NAMES if s not in skipped], service_ports(), port_offset,
                  host or Settings().http_host)
        return
    if skip is not None or port_offset:
        raise FlawforgeError("--skip and --port-offset apply to 'serve all' only")
    import uvicorn

    try:
        spec = load_service(service)
    except KeyError as exc:
        raise FlawforgeError(exc.args[0]) from None
    settings = Settings(service=service)
    served = service_app(spec, platform_for(settings))
    if settings.bus == "rabbitmq":  # else its workers' start would fail in a traceback the server logs
        from flawforge.runtime.local_stack import require_broker

        require_broker(settings)
    uvicorn.run(served, host=host or settings.http_host, port=port or settings.http_port or spec.port,
                log_level="info")


def settings_error(exc) -> str:
    """A bad FLAWFORGE_* value, named by its environment variable (pydantic names the field)."""
    from flawforge.settings_doc import env_name

    err = exc.errors(include_url=False)[0]
    name = env_name(str(err["loc"][0])) if err["loc"] else "FLAWFORGE_*"
    value = os.environ.get(name)
    return f"{name}{'' if value is None else '=' + repr(value)}: {err['msg']}"


def main() -> None:
    """Runs the command; every user mistake ends as one line on stderr and a non-zero status, never a traceback."""
    from pydantic import ValidationError
    # typer carries its own copy of click: these are the exceptions its commands raise.
    from typer._click import exceptions as click

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(standalone_mode=False)
        if code == INTERRUPTED:  # typer's status for a Ctrl-C in a command (before its job exists), said silently
            raise KeyboardInterrupt
    except click.NoArgsIsHelpError as exc:  # a bare command group: its help, as the user asked
        typer.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
        code = 0
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "flawforge"
        typer.echo(f"flawforge: error: {exc.format_message()} (see '{command} --help')", err=True)
        code = 2
    except click.ClickException as exc:
        typer.echo(f"flawforge: error: {exc.format_message()}", err=True)
        code = exc.exit_code
    except Interrupted as exc:
        typer.echo(f"flawforge: {exc}", err=True)
        code = INTERRUPTED
    except (KeyboardInterrupt, typer.Abort):
        code = interrupted()
    except NothingDone as exc:
        typer.echo(f"flawforge: {exc}", err=True)
        code = 1
    except FlawforgeError as exc:
        typer.echo(f"flawforge: error: {exc}", err=True)
        code = 2
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        typer.echo(f"flawforge: error: {settings_error(exc)}", err=True)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

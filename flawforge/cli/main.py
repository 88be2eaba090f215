"""The `flawforge` command."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer

from flawforge.cli.entry import INTERRUPTED, interrupted
from flawforge.cli.outputs import output_folder
from flawforge.cli.review import review_app
from flawforge.cli.sandbox import sandbox_app
from flawforge.errors import FlawforgeError, Interrupted, NothingDone

app = typer.Typer(help="Flawforge: realistic failures for training and studying language models.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
run_app = typer.Typer(help="Run a pipeline, embedded by default or on a stack with --stack URL.",
                      no_args_is_help=True)
app.add_typer(run_app, name="run")
app.add_typer(review_app, name="review")
app.add_typer(sandbox_app, name="sandbox")

StackOption = typer.Option(None, "--stack", help="Base URL of a running Flawforge service; default: run embedded.")
TokenOption = typer.Option(None, "--token", envvar="FLAWFORGE_TOKEN", show_envvar=True,
                           help="Bearer token for --stack (one of the stack's FLAWFORGE_API_TOKENS).")
# What --host may be: a host name, an IPv4 or IPv6 address (no spaces, controls or other scripts' characters).
BIND_HOST = re.compile(r"[A-Za-z0-9.:_%-]{1,253}")
OutOption = typer.Option(..., "--out", help="Folder for the job's artifacts.")
CancelOption = typer.Option(None, "--cancel-on-exit/--keep-on-exit",
                            help="With --stack: on Ctrl-C cancel the job, or leave it running; default: ask at a "
                                 "terminal, cancel otherwise.")


def check_stack_url(url: str) -> None:
    """--stack is a service's base URL: http(s)://host:port, nothing after it (jobs go to URL/jobs)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        parts.port
    except ValueError:
        raise FlawforgeError(f"--stack {url!r} has no valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FlawforgeError(f"--stack {url!r} is not an http(s)://host:port URL")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise FlawforgeError(f"--stack {url!r} has a path; give the service's base URL, "
                             f"e.g. {parts.scheme}://{parts.netloc}")


def run_pipeline(pipeline: str, params: dict, out: Path, stack: Optional[str], token: Optional[str] = None,
                 settings_overrides: Optional[dict] = None, cancel_on_exit: Optional[bool] = None,
                 nothing_done: Optional[Callable[[Path], Optional[str]]] = None,
                 local_model: Optional[str] = None, state: Optional[Path] = None) -> None:
    """Shared by every `run` subcommand: validate, run, write artifacts, report. `nothing_done` reads the
    artifacts and says why the job, though it succeeded, produced nothing (the command then exits 1). With
    `local_model` (a model folder, or '' for the default), an embedded run with no FLAWFORGE_LLM_PROVIDERS
    starts the local inference-server in this process as its provider, once the inputs are checked. `state`: the
    folder an embedded run of a resumable pipeline keeps its blob store in across runs (default OUT/.blobs)."""
    from flawforge.cli.jobs_client import run_embedded, run_on_stack
    from flawforge.jobs.pipeline import pipeline_named
    from flawforge.jobs.runner import invalid_params
    from flawforge.settings import Settings
    from pydantic import ValidationError

    try:  # paths are checked where the job runs: here when embedded, by the stack on --stack
        pipeline_named(pipeline).params.model_validate(params)
    except ValidationError as exc:
        raise invalid_params(exc) from None
    if stack:
        check_stack_url(stack)
    if state is not None and stack:
        raise FlawforgeError("--state is for embedded runs: a stack keeps its state in its own blob store")
    if state is not None and state.exists() and not state.is_dir():
        raise FlawforgeError(f"--state {state} is a file; name a folder")
    with output_folder(out):
        if stack:
            status = run_on_stack(stack, pipeline, params, out, token or Settings().token,
                                  cancel_on_exit=cancel_on_exit)
        else:
            with (local_provider(out, local_model, [params.get("model"), params.get("validator_model")])
                  if local_model is not None else nullcontext()) as provider:
                overrides = {**(settings_overrides or {}), **(provider or {})}
                if state is not None or _keep_blobs() or pipeline_named(pipeline).resumable:
                    status = run_embedded(pipeline, params, out,
                                          _embedded_settings(state or out / ".blobs", overrides))
                else:
                    import tempfile

                    # the blob store lives only as long as the run: OUT keeps the artifacts, not a copy of every blob
                    with tempfile.TemporaryDirectory(prefix=".blobs-", dir=out) as scratch:
                        status = run_embedded(pipeline, params, out, _embedded_settings(Path(scratch), overrides))
    why = nothing_done(out) if nothing_done else None
    if why:
        raise NothingDone(f"{pipeline}: job {status.job_id} produced nothing: {why}; artifacts in {out}")
    typer.echo(f"{pipeline}: job {status.job_id} {status.state.value}; artifacts in {out}", err=True)


def _embedded_settings(blob_dir: Path, overrides: Optional[dict]):
    from flawforge.settings import Settings

    # The local user's own run reads whatever they can read: the data roots confine the jobs API and --stack.
    return Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir),
                    **{"data_roots": os.sep, **(overrides or {})})


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
              out: Path = OutOption, stack: Optional[str] = StackOption, token: Optional[str] = TokenOption,
              cancel_on_exit: Optional[bool] = CancelOption) -> None:
    """Round trip of payload blobs through the bus (platform check)."""
    run_pipeline("smoke", {"count": count, "payload_bytes": payload_bytes}, out, stack, token,
                 cancel_on_exit=cancel_on_exit)


@run_app.command("templates")
def run_templates(gsm8k: Path = typer.Option(..., "--gsm8k", help="GSM8K jsonl file (row N is problem N)."),
                  indices: str = typer.Option(..., help="Inclusive problem range A-B, e.g. 2500-2509."),
                  model: str = typer.Option(..., help="Model name, as the llm-gateway's providers serve it."),
                  templates: Optional[Path] = typer.Option(
                      None, help="Existing templates: problems with one are skipped, a few serve as examples."),
                  examples: int = typer.Option(1, help="Existing templates shown to the model as examples."),
                  max_tokens: int = typer.Option(2048, help="Reply length limit per request."),
                  mode: str = typer.Option("sync", help="sync calls, or the provider's Batch API (batch)."),
                  concurrency: int = typer.Option(2, help="Synchronous calls in flight at once."),
                  max_repairs: Optional[int] = typer.Option(
                      None, help="Repair requests per invalid reply; default FLAWFORGE_LLM_MAX_REPAIRS."),
                  budget_requests: Optional[int] = typer.Option(None, help="Most model requests the job may make."),
                  budget_tokens: Optional[int] = typer.Option(None, help="Most tokens the job may spend."),
                  out: Path = OutOption, stack: Optional[str] = StackOption,
                  token: Optional[str] = TokenOption,
                  cancel_on_exit: Optional[bool] = CancelOption) -> None:
    """Formalization templates for GSM8K problems, written by a model and validated; reports the pass rate.

    Embedded, with no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this process."""
    params = {"gsm8k": str(gsm8k.resolve()), "indices": indices, "model": model, "examples": examples,
              "templates": str(templates.resolve()) if templates else None, "max_tokens": max_tokens,
              "mode": mode, "concurrency": concurrency, "max_repairs": max_repairs, "budget_requests": budget_requests,
              "budget_tokens": budget_tokens}
    def no_reply(out: Path) -> Optional[str]:
        report = json.loads((out / "report.json").read_text())
        if report["attempted"] and not report["model_calls"] and not report["cache_hits"]:
            reasons = ", ".join(f"{reason} ({n})" for reason, n in report["rejects_by_reason"].items())
            return f"no model reply for any of the {report['attempted']} problems ({reasons})"
        return None

    run_pipeline("templates", params, out, stack, token, cancel_on_exit=cancel_on_exit, nothing_done=no_reply,
                 local_model="")
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
                        None, help="Candidates a problem keeps: [family.]limit=N|none, comma-separated, with limit "
                                   "per_type, per_line or total (default: conceptual 8 / 5 / 24, computational 2 / 2 "
                                   "/ none), after an optional preset: 'seed' (the seed notebook's conceptual 2 / 2 / "
                                   "5) or 'none' (every plausible candidate); e.g. 'seed,conceptual.total=6'."),
                    with_traces: bool = typer.Option(False, "--with-traces",
                                                     help="Write each candidate's correct and flawed traces into "
                                                          "candidates.jsonl (about three times its size)."),
                    out: Path = OutOption, stack: Optional[str] = StackOption,
                    token: Optional[str] = TokenOption,
                    cancel_on_exit: Optional[bool] = CancelOption) -> None:
    """Computational and conceptual errors in GSM8K solutions: OUT/candidates.jsonl, rejects.jsonl, summary.json."""
    params = {"gsm8k": str(gsm8k.resolve()), "templates": str(templates.resolve()), "indices": indices,
              "families": [f.strip() for f in families.split(",") if f.strip()], "seed": seed,
              "with_traces": with_traces}
    if models:
        params["model_preference"] = [m.strip() for m in models.split(",") if m.strip()]
    if caps is not None:
        params["caps"] = caps_of(caps)
    def no_template(out: Path) -> Optional[str]:
        if json.loads((out / "summary.json").read_text())["problems_with_template"]:
            return None
        return (f"no problem of {indices or 'the folder'} has a template of {models or 'the default models'} in "
                f"{templates} (reasons in rejects.jsonl)")

    run_pipeline("math-errors", params, out, stack, token, cancel_on_exit=cancel_on_exit, nothing_done=no_template)
    typer.echo((out / "summary.json").read_text())


@run_app.command("debug-conversations")
def run_debug_conversations(
        libraries: Optional[Path] = typer.Option(None, "--libraries",
                                                 help="Folder of library sdists: every *.tar.gz in it."),
        per_library: int = typer.Option(10, "--per-library", help="Candidate bugs validated per library."),
        modifiers: Optional[str] = typer.Option(None, help="Comma-separated bug modifiers; default: all."),
        catalog: Optional[str] = typer.Option(None, "--catalog", help="Scenario catalog JSON instead of libraries "
                                                                      "('default': the shipped one)."),
        count: int = typer.Option(1, "--count", help="Scenarios (with --catalog)."),
        model: Optional[str] = typer.Option(None, "--model", help="Model that writes scenarios (with --catalog), "
                                                                  "the conversations' assistant turns and the "
                                                                  "problem statements (checked against the facts) "
                                                                  "and the lm_rewrite modifier's bugs."),
        trajectories: bool = typer.Option(True, "--trajectories/--no-trajectories",
                                          help="An agent trajectory per instance, its tool calls run on the task "
                                               "folder."),
        retries: int = typer.Option(3, "--retries", help="New seeds for a scenario without a valid bug."),
        seed: int = typer.Option(0, help="Seed of the choice of candidates or entries."),
        state: Optional[Path] = typer.Option(None, "--state", help="Embedded: a folder kept across runs for the blob "
                                                                   "store (catalog claims, cached model replies), so "
                                                                   "runs sharing it never take the same entry; "
                                                                   "default OUT/.blobs."),
        out: Path = OutOption, stack: Optional[str] = StackOption) -> None:
    """Bugs proven per test in real libraries (--libraries) or model-written scenarios (--catalog):
    OUT/instances.jsonl, conversations.jsonl, trajectories.jsonl, tasks/, rejects.jsonl, summary.json.

    Embedded, with --model and no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this process."""
    from flawforge.cli.debugging import run_debug_conversations as run_debugging

    params = {"seed": seed, **({"model": model} if model else {})}
    if libraries is not None:
        params.update(libraries=str(libraries.resolve()), per_library=per_library, trajectories=trajectories)
        if modifiers:
            params["modifiers"] = [m.strip() for m in modifiers.split(",") if m.strip()]
    if catalog is not None:
        params.update(catalog=catalog if catalog == "default" else str(Path(catalog).resolve()), count=count,
                      retries=retries)
    run_debugging(run_pipeline, params, out, stack, local_model="" if model else None,
                  state=state.resolve() if state else None)


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


@run_app.command("pressure-dataset")
def run_pressure_dataset(out: Path = OutOption,
                         per_category: int = typer.Option(500, "--per-category", help="Prompts per category."),
                         model: Optional[str] = typer.Option(
                             None, help="The studied model (its P0 and P1), as the providers name it; embedded "
                                        "without providers, a model folder or .gguf the local server loads "
                                        "(e.g. Qwen2.5-7B-Instruct, bf16 on CUDA); default: the local model."),
                         validator_model: Optional[str] = typer.Option(
                             None, "--validator-model", help="The model that fills source gaps and validates; "
                                                             "default: --model."),
                         seed: int = typer.Option(42, help="Seed of the source samples and model requests."),
                         categories: str = typer.Option("idioms,facts,common_sense,creative,ood",
                                                        help="Comma-separated categories to build."),
                         stack: Optional[str] = StackOption) -> None:
    """Semantic-pressure prompts (seed 001): OUT/prompts.jsonl, rejects.jsonl, audit.jsonl, summary.json.

    Embedded, with no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this process."""
    params = {"per_category": per_category, "model": model, "validator_model": validator_model, "seed": seed,
              "categories": [c.strip() for c in categories.split(",") if c.strip()]}
    model_path = Path(model).expanduser() if model and Path(model).expanduser().exists() else None
    if model_path is not None and not stack and not _providers_configured():
        params["model"] = None  # the local server's one model, whatever it is named
    run_pipeline("pressure-dataset", params, out, stack, local_model=str(model_path.resolve()) if model_path else "")
    typer.echo((out / "summary.json").read_text())


@contextmanager
def local_provider(out: Path, model_path: str, requested: list[Optional[str]]) -> Iterator[Optional[dict]]:
    """With no FLAWFORGE_LLM_PROVIDERS set: the local inference-server started in this process, and the settings
    overrides that make it the llm-gateway's one provider (replies' JSON schemas enforced while decoding);
    otherwise nothing to override. A `requested` model name the local server does not serve fails before it
    starts (loading the model takes seconds)."""
    from flawforge.inference.loading import resolve_source
    from flawforge.runtime.local_server import KEY_ENV

    if _providers_configured():
        yield None
        return
    settings = _local_settings(out, model_path)
    served = resolve_source(settings.inference_model_path, settings.inference_model_name).name
    unknown = [name for name in requested if name and name not in (served, f"local/{served}")]
    if unknown:
        raise FlawforgeError(f"unknown model {unknown[0]!r}: the local inference-server serves {served!r} "
                             "(FLAWFORGE_LLM_PROVIDERS configures other providers)")
    with _local_inference(settings) as base:
        yield {"llm_providers": json.dumps({"local": {"base_url": f"{base}/v1", "api_key_env": KEY_ENV,
                                                      "timeout_s": 3600, "json_schema": True,
                                                      "loop_guard": True}})}


def _providers_configured() -> bool:
    from flawforge.settings import Settings

    return bool(Settings().llm_providers.strip())


def _local_settings(out: Path, model_path: str):
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(out / ".blobs"))
    # One torch thread unless told otherwise: the job's own threads share the machine with it.
    return settings.model_copy(update={"inference_threads": settings.inference_threads or 1,
                                       "inference_model_path": model_path or settings.inference_model_path})


def _local_inference(settings):
    from flawforge.assembly import served_app
    from flawforge.runtime.local_server import local_service

    typer.echo("starting the local inference-server in this process (no FLAWFORGE_LLM_PROVIDERS set)", err=True)
    # Readiness (the model loaded) answers 503 quietly while it loads; polling a model route would log each refusal.
    return local_service("inference-server", settings, "/readyz", served_app)


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


def caps_of(text: str) -> dict:
    """--caps: comma-separated [family.]limit=N|none (family: computational or conceptual, both when left out;
    limit: per_type, per_line or total), over the defaults or over a preset named first: 'seed' (the seed
    notebook's 2 / 2 / 5 conceptual caps) or 'none' (no limit). The pipeline's parameters check the numbers."""
    from flawforge.math.selection import DEFAULT_CAPS, NO_CAPS, SEED_CAPS
    from flawforge.proto.math import Caps, FamilyCaps

    families, limits = list(Caps.model_fields), list(FamilyCaps.model_fields)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    presets = {"seed": SEED_CAPS, "none": NO_CAPS}
    base = presets[parts.pop(0).lower()] if parts and parts[0].lower() in presets else DEFAULT_CAPS
    caps = base.model_dump()
    for part in parts:
        key, equals, value = (x.strip() for x in part.partition("="))
        key = key.lower()
        family, dot, limit = key.rpartition(".")
        if key in families:  # the flat form before caps were per family: 'conceptual=5' was its total
            raise FlawforgeError(f"--caps: {part!r}: a family's limits are named, e.g. '{key}.total={value}'")
        if not equals or limit not in limits or (dot and family not in families):
            raise FlawforgeError(f"--caps: {part!r} is not [family.]limit=N or [family.]limit=none, with family one "
                                 f"of {families} and limit one of {limits} (a preset, {list(presets)}, comes first)")
        if value.lower() == "none":
            number = None
        elif value.isascii() and value.isdigit():
            number = int(value)
        else:
            raise FlawforgeError(f"--caps: {key} must be a whole number or 'none', not {value!r}")
        for name in [family] if dot else families:
            caps[name][limit] = number
    return caps


DEMO_PATCHED_PROMPTS = 6  # patching costs some 30 forward passes a kind per prompt: the demo keeps to minutes


@run_app.command("pressure-study")
def run_pressure_study(prompts: Optional[Path] = typer.Option(None, "--prompts", help="prompts.jsonl of the dataset "
                                                                                       "stage (one record a line)."),
                       demo: bool = typer.Option(False, "--demo", help="Build a small prompt set with the dataset "
                                                                       "stage's offline generators and run the whole "
                                                                       "study on it."),
                       demo_prompts: int = typer.Option(24, "--demo-prompts", help="Prompts the demo builds."),
                       model: Optional[Path] = typer.Option(None, "--model", help="Model folder or .gguf (embedded "
                                                                                  "runs); default: the configured one."),
                       samples: int = typer.Option(16, help="Samples per prompt and condition."),
                       patch_subset: Optional[int] = typer.Option(None, "--patch-subset",
                                                                  help="Most prompts patched; default: the whole "
                                                                       "balanced high-P0 subset (6 with --demo)."),
                       batch_prompts: int = typer.Option(8, help="Prompts per batch (the unit a rerun resumes at)."),
                       decompose_first: int = typer.Option(-10, "--decompose-first",
                                                           help="First block of the attention / MLP decomposition; "
                                                                "negative counts from the end."),
                       decompose_last: int = typer.Option(-1, "--decompose-last",
                                                          help="Last block of the decomposition (inclusive); -1: the "
                                                               "last block."),
                       out: Path = OutOption, stack: Optional[str] = StackOption,
                       token: Optional[str] = TokenOption) -> None:
    """Semantic-pressure study: completions, traces, logit lens, patching, statistics, figures, tables.json and
    report.md in OUT. Run again with the same inputs and OUT to resume a stopped run."""
    if demo == (prompts is not None):
        raise FlawforgeError("give either --prompts FILE or --demo")
    if model is not None and stack:
        raise FlawforgeError("--model applies to embedded runs; a stack serves its own model")
    if demo and patch_subset is None:
        patch_subset = DEMO_PATCHED_PROMPTS
    params = {"prompts": str(prompts.resolve()) if prompts else None, "demo": demo, "demo_prompts": demo_prompts,
              "samples": samples,
              "patch_subset": patch_subset, "batch_prompts": batch_prompts, "decompose_first": decompose_first,
              "decompose_last": decompose_last}
    overrides = {}
    if model is not None:
        from flawforge.inference.loading import resolve_source

        overrides["inference_model_path"] = str(resolve_source(str(model)).path)  # a bad path fails before the job
    run_pipeline("pressure-study", params, out, stack, token, settings_overrides=overrides)
    typer.echo((out / "report.md").read_text())


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
    uvicorn.run(service_app(spec, platform_for(settings)), host=host or settings.http_host,
                port=port or settings.http_port or spec.port, log_level="info")


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

"""`flawforge run <pipeline>`: the group, the options every job command shares, and the run itself.

Each pipeline's command lives in its own module (RUN_COMMANDS), imported only when that command is named or help
lists them: a command reads its options' defaults and help from its pipeline's parameter model, so importing it
imports the pipeline's module, which no other command needs.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer
from pydantic import BaseModel
from typer.core import TyperGroup
from typer.models import OptionInfo

from flawforge.cli.outputs import output_folder
from flawforge.errors import FlawforgeError, NothingDone

# The command of each pipeline (named as the pipeline) and its module.
RUN_COMMANDS = {"smoke": "flawforge.cli.smoke", "templates": "flawforge.cli.templates",
                "math-errors": "flawforge.cli.math_errors", "debug-conversations": "flawforge.cli.debugging",
                "pressure-dataset": "flawforge.cli.pressure_dataset", "pressure-study": "flawforge.cli.pressure_study"}
# Parameters that name a model: the local inference-server must serve them.
MODEL_PARAMETERS = ("model", "validator_model", "solver")
# Each command, as its module registers it with `job_command`.
_REGISTERED: dict[str, typer.Typer] = {}


class PipelineCommands(TyperGroup):
    """The `run` group: its commands come from their modules when asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(RUN_COMMANDS)

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in RUN_COMMANDS:
            return None
        importlib.import_module(RUN_COMMANDS[cmd_name])
        return typer.main.get_command(_REGISTERED[cmd_name])


run_app = typer.Typer(cls=PipelineCommands, help="Run a pipeline, embedded by default or on a stack with --stack URL.",
                      no_args_is_help=True)

OutOption = typer.Option(..., "--out", help="Folder for the job's artifacts.")
KeepBlobsOption = typer.Option(False, "--keep-blobs", help="Embedded runs: keep the blob store in OUT/.blobs (default: "
                                                           "removed after the run; OUT keeps the artifacts).")


# `flawforge run --keep-blobs <pipeline>` (where the option first stood): job_command reads it from the context.
@run_app.callback()
def run_options(keep_blobs: bool = KeepBlobsOption) -> None:
    """Run a pipeline, embedded by default or on a stack with --stack URL."""


@dataclass(frozen=True)
class JobOptions:
    """The options every job command takes, declared once here (COMMON_OPTIONS) and added by `job_command`."""
    out: Path
    stack: Optional[str]
    token: Optional[str]
    cancel_on_exit: Optional[bool]
    keep_blobs: bool


_OPTION_DECLARATIONS = {
    "out": (Path, OutOption),
    "stack": (Optional[str], typer.Option(None, "--stack", help="Base URL of a running Flawforge service; default: "
                                                                "run embedded.")),
    "token": (Optional[str], typer.Option(None, "--token", envvar="FLAWFORGE_TOKEN", show_envvar=True,
                                          help="Bearer token for --stack (one of the stack's FLAWFORGE_API_TOKENS).")),
    "cancel_on_exit": (Optional[bool], typer.Option(
        None, "--cancel-on-exit/--keep-on-exit",
        help="With --stack: on Ctrl-C cancel the job, or leave it running; default: ask at a terminal, cancel "
             "otherwise.")),
    "keep_blobs": (bool, KeepBlobsOption),
}
COMMON_OPTIONS = tuple(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
                       for name, (kind, option) in _OPTION_DECLARATIONS.items())


def job_command(name: str) -> Callable[[Callable], Callable]:
    """Registers `command` as `flawforge run NAME` with its own options and COMMON_OPTIONS; it gets those as
    `job`, a JobOptions (`--keep-blobs` may also come before NAME)."""
    def register(command: Callable) -> Callable:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "job"]
        context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

        @functools.wraps(command)
        def run(ctx: typer.Context, **values) -> None:
            common = {p.name: values.pop(p.name) for p in COMMON_OPTIONS}
            common["keep_blobs"] = common["keep_blobs"] or bool(ctx.parent and ctx.parent.params.get("keep_blobs"))
            command(**values, job=JobOptions(**common))

        run.__signature__ = inspect.Signature([*own, context, *COMMON_OPTIONS])
        run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}
        app = typer.Typer(add_completion=False)
        app.command(name)(run)
        _REGISTERED[name] = app
        return command
    return register


def field_option(model: type[BaseModel], field: str, *param_decls: str, syntax: str = "", **kwargs) -> OptionInfo:
    """The option that sets the pipeline parameter `field`: its default is the field's (a list written
    comma-separated), its help the field's description, followed by `syntax` where the command line writes the
    value otherwise. `kwargs` go to typer.Option (a `default` there replaces the field's)."""
    info = model.model_fields[field]
    default = ... if info.is_required() else info.get_default(call_default_factory=True)
    if isinstance(default, list):
        default = ",".join(map(str, default))
    return typer.Option(kwargs.pop("default", default), *param_decls,
                        help=" ".join(filter(None, [info.description, syntax])), **kwargs)


def comma_list(text: str) -> list[str]:
    """A comma-separated option's values, blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


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


def run_pipeline(pipeline: str, params: dict, job: JobOptions, settings_overrides: Optional[dict] = None,
                 nothing_done: Optional[Callable[[Path], Optional[str]]] = None,
                 local_model: Optional[str] = None, state: Optional[Path] = None) -> None:
    """Shared by every `run` command: validate, run, write artifacts, report. `nothing_done` reads the
    artifacts and says why the job, though it succeeded, produced nothing (the command then exits 1). With
    `local_model` (a model folder, or '' for the default), an embedded run with no FLAWFORGE_LLM_PROVIDERS
    starts the local inference-server in this process as its provider, once the inputs are checked. `state`: the
    folder an embedded run of a resumable pipeline keeps its blob store in across runs (default OUT/.blobs)."""
    from flawforge.cli.jobs_client import run_embedded, run_on_stack
    from flawforge.jobs.pipeline import pipeline_named
    from flawforge.jobs.runner import invalid_params
    from flawforge.settings import Settings
    from pydantic import ValidationError

    out, stack = job.out, job.stack
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
            status = run_on_stack(stack, pipeline, params, out, job.token or Settings().token,
                                  cancel_on_exit=job.cancel_on_exit)
        else:
            with (local_provider(out, local_model, [params.get(name) for name in MODEL_PARAMETERS])
                  if local_model is not None else nullcontext()) as provider:
                overrides = {**(settings_overrides or {}), **(provider or {})}
                if state is not None or job.keep_blobs or pipeline_named(pipeline).resumable:
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


@contextmanager
def local_provider(out: Path, model_path: str, requested: list[Optional[str]]) -> Iterator[Optional[dict]]:
    """With no FLAWFORGE_LLM_PROVIDERS set: the local inference-server started in this process, and the settings
    overrides that make it the llm-gateway's one provider (replies' JSON schemas enforced while decoding);
    otherwise nothing to override. A `requested` model name the local server does not serve fails before it
    starts (loading the model takes seconds)."""
    if providers_configured():
        yield None
        return
    from flawforge.inference.loading import resolve_source  # torch: only where the model is local
    from flawforge.runtime.local_server import KEY_ENV

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


def providers_configured() -> bool:
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

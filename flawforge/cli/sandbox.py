"""`flawforge sandbox ...`: run a file in the sandbox; see which isolation layers this host gives it.

`exec` prints the unit's result as JSON on stdout and exits 0 whenever the sandbox itself
worked, whatever the program did: the outcome is in the JSON, not in the exit status.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flawforge.errors import FlawforgeError
from flawforge.settings import Settings

sandbox_app = typer.Typer(help="Run untrusted Python in the sandbox.", no_args_is_help=True)


def _sandbox(settings: Settings, **overrides):
    """A sandbox for one unit at a time, from the settings (FLAWFORGE_SANDBOX_*)."""
    from flawforge.sandbox import Sandbox, SandboxUnavailable

    try:
        return Sandbox.from_settings(settings, workers=1, **overrides)
    except SandboxUnavailable as exc:
        raise FlawforgeError(str(exc)) from None


@sandbox_app.command("exec")
def exec_file(file: Path = typer.Argument(..., help="Python file to run."),
              call: Optional[str] = typer.Option(None, "--call", help="Function to call after the module ran."),
              trace: bool = typer.Option(False, "--trace", help="Record every assignment of the called function "
                                                                 "(of the module's top level without --call)."),
              timeout: Optional[float] = typer.Option(None, "--timeout", help="Wall-clock limit, seconds "
                                                                             "(default: FLAWFORGE_SANDBOX_TIMEOUT_S)."),
              memory: Optional[int] = typer.Option(None, "--memory", help="Memory the program may add, MiB "
                                                                          "(default: FLAWFORGE_SANDBOX_MEMORY_MB).")) -> None:
    """Runs FILE in the sandbox and prints the result (outcome, trace, return value, output, usage) as JSON."""
    from pydantic import ValidationError

    from flawforge.inputs import InputRefused, read_input
    from flawforge.proto.sandbox import SandboxLimits

    settings = Settings()
    try:  # a regular file only, no larger than the sandbox takes: a FIFO or /dev/zero is refused, not waited on
        source = read_input(file, settings.sandbox_max_source_bytes).decode("utf-8")
    except InputRefused as exc:
        raise FlawforgeError(f"cannot read {file}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FlawforgeError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        limits = SandboxLimits(timeout_s=settings.sandbox_timeout_s if timeout is None else timeout,
                               memory_mb=settings.sandbox_memory_mb if memory is None else memory)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        option = {"timeout_s": "--timeout", "memory_mb": "--memory"}[err["loc"][0]]
        raise FlawforgeError(f"invalid {option}: {err['msg']}") from None
    with _sandbox(settings, limits=limits) as sandbox:
        result = sandbox.execute(source, call, trace=trace)
    typer.echo(result.model_dump_json(indent=1))


@sandbox_app.command("layers")
def layers() -> None:
    """Prints which isolation layers are active on this host, and why any is missing, as JSON."""
    with _sandbox(Settings()) as sandbox:
        typer.echo(json.dumps(sandbox.layer_report().model_dump(), indent=1))

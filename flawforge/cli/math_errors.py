"""`flawforge run math-errors`, and the --caps syntax it shares with `flawforge recall`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.run import JobOptions, comma_list, field_option, job_command, run_pipeline
from flawforge.errors import FlawforgeError
from flawforge.pipelines.math_errors import MathErrorsParams as Params
from flawforge.proto.math import Caps, FamilyCaps

CAPS_SYNTAX = ("Written [family.]limit=N|none, comma-separated, with limit per_type, per_line or total, after an "
               "optional preset: 'seed' (the seed notebook's conceptual 2 / 2 / 5) or 'none' (every plausible "
               "candidate); e.g. 'seed,conceptual.total=6'.")


def caps_of(text: str) -> dict:
    """--caps: comma-separated [family.]limit=N|none (family: computational or conceptual, both when left out;
    limit: per_type, per_line or total), over the defaults or over a preset named first: 'seed' (the seed
    notebook's 2 / 2 / 5 conceptual caps) or 'none' (no limit). The pipeline's parameters check the numbers."""
    from flawforge.math.selection import DEFAULT_CAPS, NO_CAPS, SEED_CAPS

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


def caps_text(caps: Caps) -> str:
    """`caps` as --caps writes them (caps_of reads it back)."""
    return ",".join(f"{family}.{limit}={'none' if number is None else number}"
                    for family, limits in caps.model_dump().items() for limit, number in limits.items())


@job_command("math-errors")
def run_math_errors(gsm8k: Path = field_option(Params, "gsm8k", "--gsm8k"),
                    templates: Path = field_option(Params, "templates", "--templates"),
                    indices: Optional[str] = field_option(Params, "indices"),
                    families: str = field_option(Params, "families", syntax="Comma-separated."),
                    model_preference: str = field_option(Params, "model_preference", "--models",
                                                         syntax="Comma-separated."),
                    seed: int = field_option(Params, "seed"),
                    caps: str = field_option(Params, "caps", default=caps_text(Caps()), syntax=CAPS_SYNTAX),
                    with_traces: bool = field_option(Params, "with_traces", "--with-traces"), *,
                    job: JobOptions) -> None:
    """Computational and conceptual errors in GSM8K solutions: OUT/candidates.jsonl, rejects.jsonl, summary.json."""
    params = {"gsm8k": str(gsm8k.resolve()), "templates": str(templates.resolve()), "indices": indices,
              "families": comma_list(families), "model_preference": comma_list(model_preference), "seed": seed,
              "caps": caps_of(caps), "with_traces": with_traces}

    def no_template(out: Path) -> Optional[str]:
        if json.loads((out / "summary.json").read_text())["problems_with_template"]:
            return None
        return (f"no problem of {indices or 'the folder'} has a template of {model_preference} in {templates} "
                "(reasons in rejects.jsonl)")

    run_pipeline("math-errors", params, job, nothing_done=no_template)
    typer.echo((job.out / "summary.json").read_text())

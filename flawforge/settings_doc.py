"""Writes the settings table: `python -m flawforge.settings_doc > docs/settings.md`.

A test compares the committed docs/settings.md with this output, so the table cannot
fall behind flawforge/settings.py.
"""
from __future__ import annotations

import json
import typing

from pydantic.fields import FieldInfo

from flawforge.settings import Settings

HEADER = """# Settings

Every process (services and CLI) reads these from the environment. The variable name is
the field name in upper case with the `FLAWFORGE_` prefix; list values are written as JSON.
Generated from `flawforge/settings.py` by `python -m flawforge.settings_doc`; do not edit by hand.

| Variable | Type | Default | Description |
| --- | --- | --- | --- |
"""


def env_name(field_name: str) -> str:
    return f"{Settings.model_config['env_prefix']}{field_name}".upper()


def env_value(value: object) -> str:
    """A value the way it is written in the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def type_label(annotation: object) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if args and type(None) in args:  # Optional: the non-null part, marked optional
        rest = [a for a in args if a is not type(None)]
        return " \\| ".join(type_label(a) for a in rest) + " (optional)"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_label(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def default_label(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "unset"
    written = env_value(default)
    return f"`{written}`" if written else "empty"


def settings_table() -> str:
    rows = []
    for name, field in Settings.model_fields.items():
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{env_name(name)}` | {type_label(field.annotation)} | {default_label(field)} | {description} |")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(settings_table(), end="")

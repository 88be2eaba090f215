"""Providers configured by name: where each OpenAI-compatible endpoint is and how hard to push it."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from flawforge.errors import ConfigError
from flawforge.proto.llm import ProviderConfig

# The local inference-server wants a bearer token like every service: FLAWFORGE_TOKEN is the one this process
# sends. It enforces a response_format json_schema while decoding and has the loop guard (its transformers
# backend; a provider served by vLLM is configured without it).
DEFAULT_PROVIDERS = {"local": {"base_url": "http://127.0.0.1:8005/v1", "api_key_env": "FLAWFORGE_TOKEN",
                               "json_schema": True, "loop_guard": True}}


def parse_providers(text: str) -> dict[str, ProviderConfig]:
    """Reads `name -> settings` from YAML or JSON text."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"providers: not valid YAML/JSON: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("providers: expected a mapping of provider name to settings")
    providers = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"providers.{name}: expected a mapping of settings")
        try:
            providers[str(name)] = ProviderConfig.model_validate({**body, "name": str(name)})
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(map(str, (name, *err["loc"])))
            raise ConfigError(f"providers.{where}: {err['msg']}") from None
    return providers


def load_providers(setting: str) -> dict[str, ProviderConfig]:
    """`setting` is a path to a YAML/JSON file, inline JSON/YAML, or empty for the local inference-server."""
    if not setting.strip():
        return parse_providers(json.dumps(DEFAULT_PROVIDERS))
    stripped = setting.strip()
    if stripped.startswith("{") or "\n" in stripped:
        return parse_providers(stripped)
    path = Path(stripped)
    if not path.is_file():
        raise ConfigError(f"providers file {stripped!r} does not exist")
    return parse_providers(path.read_text())

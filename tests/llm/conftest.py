"""The inference-server (tests/conftest.py) as the gateway's provider."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def providers_json(inference_server, monkeypatch) -> str:
    """The inference-server as provider 'local', with an API key that must never reach the log."""
    monkeypatch.setenv("FLAWFORGE_TEST_LLM_KEY", inference_server["api_key"])
    return json.dumps({"local": {"base_url": inference_server["base_url"], "api_key_env": "FLAWFORGE_TEST_LLM_KEY"}})

"""The inference-server (tests/conftest.py) as the gateway's provider."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def providers_json(inference_server, monkeypatch) -> str:
    """The inference-server as provider 'local', with an API key that must never reach the log."""
    monkeypatch.setenv("FLAWFORGE_TEST_LLM_KEY", inference_server["api_key"])
    return json.dumps({"local": {"base_url": inference_server["base_url"], "api_key_env": "FLAWFORGE_TEST_LLM_KEY"}})


@pytest.fixture
def tool_call_provider():
    """An OpenAI-compatible endpoint that calls a tool where the request asks for a call (tool_choice required: the
    first tool, or the named one) with arguments {"city": "Paris"}, and otherwise answers text; yields its base URL
    (with /v1) and the bodies it was sent."""
    from tests.llm.test_providers import json_server

    def answer(body: dict, _: int) -> tuple[int, dict]:
        choice = body.get("tool_choice")
        if choice == "required" or isinstance(choice, dict):
            name = (choice if isinstance(choice, dict) else body["tools"][0])["function"]["name"]
            call = {"id": "call_abc", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "It is 21 degrees in Paris."}, "stop"
        return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                     "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}}

    with json_server(answer) as served:
        yield served

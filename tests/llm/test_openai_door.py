"""The gateway's OpenAI-compatible /v1 driven by the official OpenAI SDK, with the local inference-server
(SmolLM2-135M-Instruct on CPU) as its provider: plain, streamed and json_schema replies, each asked twice, the
second time served from the cache (no new call in the log); and tool calls, with a local endpoint answering canned
calls as the provider."""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import pytest

from auth_support import API_TOKENS, TOKEN
from flawforge.blobstore import LocalBlobStore
from tests.llm.test_providers import CLOCK, WEATHER, free_port


@contextmanager
def serving_gateway(providers: dict, blob_dir, redis_url: str, redis_prefix: str) -> Iterator[str]:
    """The llm-gateway over `providers`, over HTTP on a free local port (uvicorn in a thread), its blobs under
    blob_dir; yields its /v1 URL."""
    import uvicorn

    from flawforge.assembly import platform_for, service_app
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir), api_tokens=API_TOKENS,
                        llm_providers=json.dumps(providers), redis_url=redis_url, redis_prefix=redis_prefix,
                        llm_chat_max_requests_per_hour=10)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service_app("llm-gateway", platform_for(settings)), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the gateway did not start"
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def gateway_url(inference_server, providers_json, tmp_path, redis_url, redis_prefix):
    """The llm-gateway with the inference-server as its provider 'local'."""
    providers = json.loads(providers_json)
    providers["local"].update(json_schema=True, loop_guard=True)  # as the default local provider is set
    with serving_gateway(providers, tmp_path, redis_url, redis_prefix) as url:
        yield url


def calls_logged(tmp_path) -> int:
    return sum(1 for key in LocalBlobStore(tmp_path).list("llm/log/") if key.endswith(".request.json"))


@pytest.mark.model
def test_the_openai_sdk_gets_completions_streams_and_schemas_through_the_cache(gateway_url, inference_server,
                                                                                 tmp_path):
    import openai

    client = openai.OpenAI(base_url=gateway_url, api_key=TOKEN, max_retries=0)
    model = f"local/{inference_server['model']}"
    assert model in [m.id for m in client.models.list()]
    with pytest.raises(openai.AuthenticationError):  # authenticated like every route
        openai.OpenAI(base_url=gateway_url, api_key="not-a-token", max_retries=0).models.list()

    ask = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4,
           "temperature": 0}
    first = client.chat.completions.with_raw_response.create(**ask)
    second = client.chat.completions.with_raw_response.create(**ask)
    assert (first.headers["x-flawforge-cached"], second.headers["x-flawforge-cached"]) == ("false", "true")
    reply = first.parse()
    assert reply.choices[0].message.content and reply.usage.completion_tokens <= 4
    assert second.parse().choices[0].message.content == reply.choices[0].message.content
    assert calls_logged(tmp_path) == 1

    streamed = {**ask, "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 6}
    texts, usages = [], []
    for _ in range(2):
        chunks = list(client.chat.completions.create(**streamed, stream=True, stream_options={"include_usage": True}))
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        usages.append(chunks[-1].usage)
        assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    assert texts[0] and texts[0] == texts[1] and usages[0].completion_tokens <= 6
    assert calls_logged(tmp_path) == 2  # the second stream came from the cache
    # Streamed from the provider: more than one piece of text came back, as it was decoded.
    raw = httpx.post(f"{gateway_url}/chat/completions", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120,
                     json={**streamed, "messages": [{"role": "user", "content": "Say hello."}], "stream": True})
    events = [line for line in raw.text.splitlines() if line.startswith("data: {")]
    assert raw.headers["content-type"].startswith("text/event-stream") and raw.text.rstrip().endswith("[DONE]")
    assert sum(1 for e in events if json.loads(e[6:])["choices"][0]["delta"].get("content")) > 1

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    structured = {**ask, "messages": [{"role": "user", "content": "Is water wet? Answer in JSON."}],
                  "max_tokens": 12, "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "answer", "schema": schema}}}
    answers = [client.chat.completions.create(**structured).choices[0].message.content for _ in range(2)]
    assert isinstance(json.loads(answers[0])["ok"], bool) and answers[0] == answers[1]
    assert calls_logged(tmp_path) == 4

    refused = httpx.post(f"{gateway_url}/chat/completions", headers={"Authorization": f"Bearer {TOKEN}"},
                         json={**ask, "logprobs": True})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logprobs"  # OpenAI's status


def test_the_openai_sdk_calls_tools_through_the_door_and_sends_their_results_back(tool_call_provider, tmp_path,
                                                                                   redis_url, redis_prefix):
    """A named and a required tool_choice get the provider's call, parsed by the SDK (the named one asked twice, the
    second time from the cache); the call and its result sent back as a tool turn get a text answer. A streamed
    request with tools, and one for a provider configured without tools, are refused before reaching it."""
    import openai

    base_url, bodies = tool_call_provider
    providers = {"canned": {"base_url": base_url, "models": ["m"]},
                 "toolless": {"base_url": base_url, "models": ["m"], "tools": False}}
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    ask = {"model": "canned/m", "messages": question, "tools": [CLOCK, WEATHER], "max_tokens": 20}
    with serving_gateway(providers, tmp_path, redis_url, redis_prefix) as url:
        client = openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0)
        first = client.chat.completions.with_raw_response.create(**ask, tool_choice=named)
        again = client.chat.completions.with_raw_response.create(**ask, tool_choice=named)
        required = client.chat.completions.create(**ask, tool_choice="required")
        reply = first.parse().choices[0]
        [call] = reply.message.tool_calls
        answer = client.chat.completions.create(**{**ask, "messages": [
            *question, reply.message, {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'}]})

        with pytest.raises(openai.BadRequestError, match="tool calls are not streamed") as streamed:
            client.chat.completions.create(**ask, tool_choice=named, stream=True)
        with pytest.raises(openai.BadRequestError, match="provider 'toolless' is configured without tool calls"):
            client.chat.completions.create(**{**ask, "model": "toolless/m"}, tool_choice=named)
        with pytest.raises(openai.BadRequestError, match="not among the tools"):
            client.chat.completions.create(**ask, tool_choice={"type": "function", "function": {"name": "get_news"}})

    assert (first.headers["x-flawforge-cached"], again.headers["x-flawforge-cached"]) == ("false", "true")
    assert reply.finish_reason == "tool_calls" and reply.message.content is None
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_abc", "get_weather", {"city": "Paris"})
    assert again.parse().choices[0].message.tool_calls == reply.message.tool_calls
    assert [c.function.name for c in required.choices[0].message.tool_calls] == ["get_time"]  # the first tool
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    assert answer.choices[0].message.content == "It is 21 degrees in Paris."
    # Refused in OpenAI's shape before a stream started: a JSON body, not events.
    assert streamed.value.response.headers["content-type"].startswith("application/json")
    assert streamed.value.code == "invalid_request"
    # The provider got the named call, the required one and the answer's turn; nothing of the cached or refused ones.
    assert len(bodies) == 3
    assert bodies[0]["tools"] == [CLOCK, WEATHER] and bodies[0]["tool_choice"] == named
    assert bodies[1]["tool_choice"] == "required" and "tool_choice" not in bodies[2]
    assert bodies[2]["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": '{"celsius": 21}'}]

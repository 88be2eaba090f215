"""Concurrent requests through the official `openai` SDK against the real server: each streamed text equals the
text the request gets alone, whatever shares its batch or leaves it; schemas are enforced or refused."""
from __future__ import annotations

import json
import threading
import time

import openai
import pytest
from prometheus_client import REGISTRY

pytestmark = pytest.mark.model

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"],
               "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                          "required": ["city"], "additionalProperties": False}}}


def chat(content: str, **options) -> tuple[str, dict]:
    return "chat", {"messages": [{"role": "user", "content": content}], "max_tokens": 8, **options}


# Eight requests of every kind the server decodes: plain chat, text completions, json_schema and tools.
JOBS = [chat("Name a colour."), chat("Write a sentence about the sea."), chat("What is two plus two?"),
        ("completion", {"prompt": "1, 2, 3,", "max_tokens": 8}),
        ("completion", {"prompt": "The capital of France is", "max_tokens": 8}),
        chat("Name a ship.", max_tokens=16,
             response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": NAME_SCHEMA}}),
        chat("Describe Rome.", response_format={"type": "json_object"}, max_tokens=12),
        chat("What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required", max_tokens=24)]


@pytest.fixture(scope="module")
def sdk(inference_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=inference_server["base_url"], api_key=inference_server["api_key"], max_retries=0,
                         timeout=300)


def stream(sdk, model: str, job, leave_after_first: bool = False) -> str:
    """The streamed text, a tool call's arguments included."""
    kind, options = job
    create = sdk.chat.completions.create if kind == "chat" else sdk.completions.create
    chunks = create(model=model, temperature=0, stream=True, **options)
    text = ""
    for chunk in chunks:
        for choice in chunk.choices:
            text += (choice.text if kind == "completion" else (choice.delta.content or "") + "".join(
                call.function.arguments for call in choice.delta.tool_calls or []))
        if leave_after_first and text:
            chunks.close()  # the client goes away mid-stream
            break
    return text


def concurrently(sdk, model: str, jobs, leaving: int | None = None) -> tuple[list[str], int]:
    """The streamed texts, and the most rows the server's batch held at once meanwhile (its gauge, polled)."""
    results: list = [None] * len(jobs)
    peak = 0

    def run(index: int) -> None:
        results[index] = stream(sdk, model, jobs[index], leave_after_first=index == leaving)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, int(REGISTRY.get_sample_value("flawforge_generation_rows") or 0))
        time.sleep(0.02)
    return results, peak


@pytest.fixture(scope="module")
def alone(sdk, inference_server) -> list[str]:
    return [stream(sdk, inference_server["model"], job) for job in JOBS]


def test_eight_concurrent_streams_each_get_their_text_alone(sdk, inference_server, alone):
    texts, peak = concurrently(sdk, inference_server["model"], JOBS)
    assert texts == alone and all(alone)
    assert peak == len(JOBS)  # all eight decoded in one batch at once (the server runs in this process)
    assert json.loads(alone[5])["name"] and json.loads(alone[7])["city"]


def test_a_client_leaving_mid_stream_leaves_the_others_text_unchanged(sdk, inference_server, alone):
    leaver = chat("Write a long poem about the sea.", max_tokens=64)
    texts, peak = concurrently(sdk, inference_server["model"], [leaver] + JOBS[1:], leaving=0)
    assert texts[1:] == alone[1:] and peak > 1
    assert texts[0]  # it had its first text before it left


def test_max_length_bounds_the_strings_decoded(sdk, inference_server):
    reply = sdk.chat.completions.create(
        model=inference_server["model"], messages=[{"role": "user", "content": "Give a very long name for a ship."}],
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": NAME_SCHEMA}},
        temperature=1.0, seed=5, n=4, max_tokens=24)
    names = [json.loads(choice.message.content)["name"] for choice in reply.choices]
    assert all(0 < len(name) <= 8 for name in names), names


def test_a_keyword_decoding_would_not_enforce_is_a_400_naming_it(sdk, inference_server):
    tags = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                      "uniqueItems": True}}}
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model=inference_server["model"], messages=[{"role": "user", "content": "Tags?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": tags}})
    error = caught.value
    assert (error.status_code, error.code, error.param) == (400, "unsupported_schema_keyword", "response_format")
    assert "'uniqueItems' at /properties/tags" in error.message
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer", "not": {"const": 3}}}}}}
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=inference_server["model"], messages=[{"role": "user", "content": "Call f."}],
                                    tools=[tool])
    assert caught.value.param == "tools" and "tools[0] (f) uses 'not' at /properties/x" in caught.value.message

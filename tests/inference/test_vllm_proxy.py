"""Generation passed through to vLLM's OpenAI server, as the inference-server does on a GPU, tested against a real
OpenAI-compatible server: the inference-server of this session on the local model stands for vLLM's. Driven with
the official `openai` SDK: streams chunk by chunk, answers as the upstream gives them, a client that leaves
aborts its request upstream, and the engine's own checks hold before anything is sent."""
from __future__ import annotations

import asyncio
import threading
import time

import openai
import pytest
from prometheus_client import REGISTRY

from flawforge.inference.errors import RequestError, UpstreamUnavailable
from flawforge.inference.openai_api import RequestLimits
from flawforge.inference.upstream import VllmServer

pytestmark = pytest.mark.model

COLOUR = [{"role": "user", "content": "Name a colour."}]


def sdk_for(server: dict) -> openai.OpenAI:
    return openai.OpenAI(base_url=server["base_url"], api_key=server["api_key"], max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def proxy(vllm_proxy_server) -> openai.OpenAI:
    return sdk_for(vllm_proxy_server)


@pytest.fixture(scope="module")
def upstream(inference_server) -> openai.OpenAI:
    return sdk_for(inference_server)


def test_answers_and_streams_come_from_the_upstream_chunk_by_chunk(proxy, upstream, inference_server):
    model = inference_server["model"]
    assert [m.id for m in proxy.models.list()] == [m.id for m in upstream.models.list()] == [model]
    direct = upstream.chat.completions.create(model=model, messages=COLOUR, max_tokens=8, temperature=0)
    passed = proxy.chat.completions.create(model=model, messages=COLOUR, max_tokens=8, temperature=0)
    assert passed.choices[0].message.content == direct.choices[0].message.content
    chunks = list(proxy.chat.completions.create(model=model, messages=COLOUR, max_tokens=8, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == direct.choices[0].message.content
    assert len(pieces) > 2  # token by token, not the whole reply in one delta
    assert chunks[-1].usage.completion_tokens == direct.usage.completion_tokens
    text = proxy.completions.create(model=model, prompt="1, 2, 3,", max_tokens=6, temperature=0, n=2, logprobs=1)
    assert [c.text for c in text.choices] == [c.text for c in upstream.completions.create(
        model=model, prompt="1, 2, 3,", max_tokens=6, temperature=0, n=2, logprobs=1).choices]


def test_a_client_leaving_aborts_its_request_upstream(proxy, upstream, inference_server):
    model = inference_server["model"]
    kept = {"messages": [{"role": "user", "content": "Count from one to fifty in words."}], "max_tokens": 16}
    expected = upstream.chat.completions.create(model=model, temperature=0, **kept).choices[0].message.content
    leaving = proxy.chat.completions.create(model=model, temperature=0, stream=True, max_tokens=64,
                                            messages=[{"role": "user", "content": "Write a long poem about the sea."}])
    next(iter(leaving))
    pieces, rows = [], []

    def keep() -> None:
        for chunk in proxy.chat.completions.create(model=model, temperature=0, stream=True, **kept):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                rows.append(REGISTRY.get_sample_value("flawforge_generation_rows"))  # upstream's batch, as it came

    keeper = threading.Thread(target=keep)
    keeper.start()
    while not rows and keeper.is_alive():
        time.sleep(0.02)
    leaving.close()
    keeper.join(300)
    assert "".join(pieces) == expected and rows[0] == 2
    # The leaver's 64 tokens would outlast the kept 16: upstream, its row left the batch when its client left,
    # while the kept request had tokens to go.
    assert 1 in rows[:-4], rows


def test_the_engine_checks_hold_before_the_upstream_is_asked(proxy, inference_server):
    model = inference_server["model"]
    with pytest.raises(openai.BadRequestError) as caught:
        proxy.chat.completions.create(model=model, messages=COLOUR, extra_body={"dry_multiplier": 0.8})
    assert caught.value.code == "unsupported_parameter" and caught.value.param == "dry_multiplier"
    with pytest.raises(openai.BadRequestError) as caught:
        proxy.chat.completions.create(model=model, messages=COLOUR, response_format={"type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}})
    assert caught.value.code == "unsupported_schema_keyword"
    with pytest.raises(openai.NotFoundError) as caught:  # the upstream's own refusal, as it gave it
        proxy.chat.completions.create(model="gpt-4o", messages=COLOUR, max_tokens=2)
    assert caught.value.code == "model_not_found"


def test_batch_lines_go_upstream_whole(inference_server, upstream):
    server = VllmServer(inference_server["base_url"], inference_server["api_key"])
    limits = RequestLimits(default_max_tokens=8, max_request_tokens=64)
    body = {"model": inference_server["model"], "messages": COLOUR, "temperature": 0}
    answer = server.execute("/v1/chat/completions", body, limits)  # max_tokens left to the server: 8
    direct = upstream.chat.completions.create(max_tokens=8, **body)
    assert answer["choices"][0]["message"]["content"] == direct.choices[0].message.content
    with pytest.raises(RequestError) as caught:
        server.execute("/v1/chat/completions", {**body, "n": 16, "max_tokens": 8}, limits)
    assert caught.value.code == "request_too_large"


def test_an_unreachable_upstream_is_a_503(inference_server):
    server = VllmServer("http://127.0.0.1:9/v1", "key")
    with pytest.raises(UpstreamUnavailable) as caught:
        asyncio.run(server.answer("/chat/completions", {"model": "m", "messages": COLOUR}))
    assert caught.value.http_status == 503 and caught.value.code == "upstream_unavailable"

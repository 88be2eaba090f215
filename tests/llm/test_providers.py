"""The provider layer over real HTTP: LiteLLM's Router falling back from providers that fail to one that answers,
and a provider's requests per minute shared by two gateway processes through the real Redis."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from auth_support import API_TOKENS, TOKEN
from flawforge.blobstore import LocalBlobStore
from flawforge.llm.config import parse_providers
from flawforge.llm.gateway import Gateway
from flawforge.proto.llm import ChatRequest
from tests.platform.polling import wait_until_answers


@contextmanager
def json_server(answer):
    """A local HTTP server on a free port answering each POST with `answer(body, bodies before it)`: (status, JSON);
    yields its base URL (with /v1) and the bodies it was sent."""
    bodies: list[dict] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, reply = answer(body, len(bodies))
            bodies.append(body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()


def openai_server(status: int, content: str = "Paris"):
    """An OpenAI-compatible endpoint answering every chat completion with `status` (200: a reply of `content`)."""
    def answer(body: dict, _: int) -> tuple[int, dict]:
        if status != 200:
            return status, {"error": {"message": "worker crashed", "type": "server_error"}}
        return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}

    return json_server(answer)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failing_provider_falls_back_to_one_that_answers(tmp_path):
    with openai_server(500) as (failing, failed_bodies), openai_server(200) as (answering, answered_bodies):
        providers = parse_providers(json.dumps({
            "flaky": {"base_url": failing, "models": ["big"], "fallbacks": ["down/big", "steady/small"]},
            "down": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "models": ["big"]},
            "steady": {"base_url": answering, "models": ["small"]}}))
        store = LocalBlobStore(tmp_path)
        result = Gateway(store, providers, max_attempts=2).chat(
            ChatRequest(model="flaky/big", messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=4))
    assert (result.content, result.provider, result.model) == ("Paris", "steady", "small")
    assert len(failed_bodies) == 2 and [b["model"] for b in answered_bodies] == ["small"]  # retried, then fell back
    [response_key] = [k for k in store.list("llm/log/") if k.endswith(".response.json")]
    attempts = json.loads(store.get(response_key))["attempts"]
    assert [a["model"] for a in attempts] == ["flaky/big", "flaky/big", "down/big", "down/big", "steady/small"]
    assert "worker crashed" in attempts[0]["error"] and "Connection error" in attempts[2]["error"]
    assert "error" not in attempts[-1]


@pytest.mark.slow
def test_two_gateway_processes_share_a_providers_requests_per_minute(tmp_path, redis_url, redis_prefix):
    """The first process's call takes the minute's only request; the second process is refused (429, Retry-After,
    OpenAI's error shape) without reaching the provider."""
    with openai_server(200) as (base_url, bodies):
        env = {**os.environ, "FLAWFORGE_API_TOKENS": API_TOKENS, "FLAWFORGE_REDIS_URL": redis_url,
               "FLAWFORGE_REDIS_PREFIX": redis_prefix, "FLAWFORGE_LLM_RATE_LIMIT_WAIT_S": "0",
               "FLAWFORGE_LLM_PROVIDERS": json.dumps({"remote": {"base_url": base_url, "models": ["m"],
                                                                 "requests_per_minute": 1}})}
        ports, servers = [free_port(), free_port()], []
        try:
            for i, port in enumerate(ports):
                servers.append(subprocess.Popen(
                    [sys.executable, "-m", "flawforge.cli.entry", "serve", "llm-gateway", "--port", str(port)],
                    env={**env, "FLAWFORGE_BLOB_DIR": str(tmp_path / f"blobs{i}")}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True))
            for port, server in zip(ports, servers):
                wait_until_answers(f"http://127.0.0.1:{port}/healthz", server, timeout=120)
            body = {"model": "remote/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            headers = {"Authorization": f"Bearer {TOKEN}"}
            first = httpx.post(f"http://127.0.0.1:{ports[0]}/v1/chat/completions", json=body, headers=headers,
                               timeout=180)
            assert first.status_code == 200, first.text
            second = httpx.post(f"http://127.0.0.1:{ports[1]}/v1/chat/completions",
                                json={**body, "seed": 2}, headers=headers, timeout=60)
        finally:
            for server in servers:
                server.terminate()
                server.wait(30)
    assert second.status_code == 429 and 1 <= int(second.headers["retry-after"]) <= 60
    error = second.json()["error"]
    assert error["code"] == "rate_limited" and "1 requests per minute (shared by every replica)" in error["message"]
    assert len(bodies) == 1  # the refused call never reached the provider


def research_server(statuses: list[int]):
    """A server's own route beside OpenAI's (/v1/research/pressure) answering each request with the next status of
    `statuses` (the last one repeats)."""
    def answer(_: dict, before: int) -> tuple[int, dict]:
        status = statuses[min(before, len(statuses) - 1)]
        return status, {"results": [1]} if status == 200 else {"error": {"message": "warming up"}}

    return json_server(answer)


def test_a_providers_own_route_is_tried_again_after_a_passing_failure_and_each_attempt_is_logged(tmp_path):
    from flawforge.llm.errors import InvalidRequest, ProviderError
    from flawforge.llm.limits import CallScope

    with research_server([503, 200]) as (base, bodies):
        store = LocalBlobStore(tmp_path / "a")
        gateway = Gateway(store, parse_providers(json.dumps({"local": {"base_url": base, "models": ["m"]}})))
        answer = gateway.providers["local"].post("/research/pressure", {"items": []}, CallScope(), attempts=3)
    assert answer == {"results": [1]} and len(bodies) == 2
    logged = [json.loads(store.get(k)) for k in sorted(store.list("llm/log/")) if k.endswith(".request.json")]
    assert sorted(record["attempt"] for record in logged) == [1, 2]

    with research_server([503]) as (base, bodies):  # passing failures, every attempt spent
        gateway = Gateway(LocalBlobStore(tmp_path / "b"), parse_providers(json.dumps({"local": {"base_url": base}})))
        with pytest.raises(ProviderError, match="warming up"):
            gateway.providers["local"].post("/research/pressure", {}, CallScope(), attempts=2)
    assert len(bodies) == 2

    with research_server([400]) as (base, bodies):  # a refusal is final
        gateway = Gateway(LocalBlobStore(tmp_path / "c"), parse_providers(json.dumps({"local": {"base_url": base}})))
        with pytest.raises(InvalidRequest):
            gateway.providers["local"].post("/research/pressure", {}, CallScope(), attempts=3)
    assert len(bodies) == 1


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def test_tools_and_tool_calls_go_to_the_provider_and_back_logged_and_cached_under_their_own_fingerprint(
        tmp_path, tool_call_provider):
    """tools, tool_choice and the conversation's calls and tool results reach the provider as OpenAI takes them; the
    reply's call comes back parsed, is in the call log, and is cached under a fingerprint the tools are part of: a
    replay with another tool set or tool_choice misses, and a request without tools keeps the fingerprint it had."""
    from flawforge.llm.cache import canonical_json, fingerprint
    from flawforge.llm.errors import InvalidRequest, ReplayMiss

    earlier = [{"role": "user", "content": "Weather in Paris, then Rome?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21}'}]
    request = ChatRequest(model="remote/m", messages=earlier, tools=[WEATHER], tool_choice="required", max_tokens=20)
    store = LocalBlobStore(tmp_path)
    base_url, bodies = tool_call_provider
    providers = {"remote": {"base_url": base_url, "models": ["m"]}}
    gateway = Gateway(store, parse_providers(json.dumps(providers)))
    result = gateway.chat(request)
    again = gateway.chat(request)
    refusing = Gateway(LocalBlobStore(tmp_path / "refusing"),
                       parse_providers(json.dumps({"remote": {**providers["remote"], "tools": False}})))
    with pytest.raises(InvalidRequest, match="provider 'remote' is configured without tool calls"):
        refusing.chat(request)
    refusing.chat(ChatRequest(model="remote/m", messages=earlier[:1], max_tokens=20))
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls] == [
        ("call_abc", "get_weather", {"city": "Paris"})]
    assert result.finish_reason == "tool_calls" and result.content == ""
    assert again.cached and again.tool_calls == result.tool_calls
    # One call reached the provider with the tools, the choice and the earlier call and its result (the refusing
    # provider got only the request without tools).
    assert len(bodies) == 2 and "tools" not in bodies[1]
    assert bodies[0]["tools"] == [WEATHER] and bodies[0]["tool_choice"] == "required"
    assert bodies[0]["messages"][1]["tool_calls"] == earlier[1]["tool_calls"]
    assert bodies[0]["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21}'}
    logged = {k.rsplit(".", 2)[-2]: json.loads(store.get(k)) for k in store.list("llm/log/")}
    assert logged["request"]["body"]["tools"] == [WEATHER]
    assert logged["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}

    replay = Gateway(store, parse_providers(json.dumps(providers)), replay=True)
    assert replay.chat(request).tool_calls == result.tool_calls
    for other in ({"tools": [WEATHER, CLOCK]}, {"tool_choice": "auto"},
                  {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}):
        changed = ChatRequest.model_validate({**request.model_dump(), **other})
        assert fingerprint(changed) != fingerprint(request)
        with pytest.raises(ReplayMiss):
            replay.chat(changed)
    plain = ChatRequest(model="remote/m", messages=earlier[:1], max_tokens=20)
    assert fingerprint(plain) == hashlib.sha256(canonical_json({
        "model": "remote/m", "messages": earlier[:1], "parameters": {"max_tokens": 20, "temperature": 0.0},
        "response_schema": None})).hexdigest()

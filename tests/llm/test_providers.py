"""The provider layer over real HTTP: LiteLLM's Router falling back from providers that fail to one that answers,
and a provider's requests per minute shared by two gateway processes through the real Redis."""
from __future__ import annotations

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
def openai_server(status: int, content: str = "Paris"):
    """An OpenAI-compatible endpoint on a free local port answering every chat completion with `status` (200: a
    reply of `content`); yields its base URL and the bodies it was sent."""
    bodies: list[dict] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            answer = ({"id": "c", "object": "chat.completion", "created": 0, "model": bodies[-1]["model"],
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
                      if status == 200 else {"error": {"message": "worker crashed", "type": "server_error"}})
            data = json.dumps(answer).encode()
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

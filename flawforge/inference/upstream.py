"""Generation on vLLM's own OpenAI-compatible server (`vllm serve`): the inference-server passes chat and text
completions through to it, streams included, and keeps the research endpoints on its transformers copy
(docs/serving.md says why this, and not vLLM's engine inside this process).

A request is checked here as the transformers engine would check it (the caller's token bounds, the schema
keywords decoding would not enforce) and refused with the same 400s; what passes goes to vLLM as the caller
wrote it, with max_tokens set where the caller left it to the server. vLLM's answer comes back as it is: its
status and body, or its server-sent events chunk by chunk as they arrive. Closing the stream (the client went
away) closes the request to vLLM, which aborts the request there and frees its slot in vLLM's batch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import AsyncIterator

import httpx

from flawforge.inference import openai_api
from flawforge.inference.errors import RequestError, UpstreamUnavailable
from flawforge.proto.inference import ChatCompletionRequest, CompletionRequest, SamplingRequest

# The transformers engine's decoding extensions: vLLM would ignore them, so they are refused.
ENGINE_EXTENSIONS = ("json_closing_reserve", "dry_multiplier")
CONNECT_TIMEOUT_S = 10.0


@dataclass
class Answer:
    """vLLM's answer: its status, content type and either the whole body or its chunks as they come."""

    status: int
    media_type: str
    body: bytes = b""
    chunks: AsyncIterator[bytes] | None = None


def checked_body(req: SamplingRequest, raw: dict, limits: openai_api.RequestLimits) -> dict:
    """The body to send vLLM for a validated request `req` (its JSON `raw`): refused as the transformers engine
    would refuse it, with max_tokens set where the caller left it to the server."""
    for name in ENGINE_EXTENSIONS:
        if getattr(req, name):
            raise RequestError(400, f"{name} is not supported by the vLLM engine", param=name,
                               code="unsupported_parameter")
    body = dict(raw)
    if isinstance(req, ChatCompletionRequest):
        openai_api.refuse_unenforced_schemas(req)
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is None:
            max_tokens = body["max_tokens"] = limits.default_max_tokens
        openai_api.check_cost(limits, req.n, max_tokens)
    elif isinstance(req, CompletionRequest):
        if req.max_tokens is None:
            body["max_tokens"] = openai_api.COMPLETION_MAX_TOKENS
        openai_api.check_cost(limits, req.n, body["max_tokens"], len(req.prompts))
    return body


class VllmServer:
    """vLLM's OpenAI server at `base_url` (ending in /v1), called with `token` as its API key."""

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # No read deadline: a long completion streams for minutes; the client's own deadline ends it.
        timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
        self.client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)
        self.sync_client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    async def answer(self, path: str, body: dict | None = None) -> Answer:
        """vLLM's answer to a POST of `body` (a GET without one); a streamed one comes as chunks (closing them
        aborts the request there)."""
        request = self.client.build_request("GET" if body is None else "POST", path, json=body)
        streamed = bool(body and body.get("stream"))
        try:
            response = await self.client.send(request, stream=streamed)
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(self.base_url, exc) from None
        media_type = response.headers.get("content-type", "application/json")
        if not streamed or response.status_code != 200:
            content = await response.aread()
            await response.aclose()
            return Answer(response.status_code, media_type, content)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()

        return Answer(200, media_type, chunks=chunks())

    def execute(self, endpoint: str, body: dict, limits: openai_api.RequestLimits) -> dict:
        """A batch line's whole answer (`endpoint` as the line names it, /v1/...); vLLM's refusal as a RequestError
        with its status and words."""
        req = openai_api.batch_request(endpoint, body)
        try:
            response = self.sync_client.post(endpoint.removeprefix("/v1"), json=checked_body(req, body, limits))
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(self.base_url, exc) from None
        try:
            answer = response.json()
        except json.JSONDecodeError:
            answer = {}
        if response.status_code != 200:
            error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            raise RequestError(response.status_code, str(error.get("message") or response.text[:300]),
                               param=error.get("param"), code=error.get("code"))
        return answer

    async def aclose(self) -> None:
        await self.client.aclose()
        self.sync_client.close()

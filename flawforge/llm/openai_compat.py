"""OpenAI's shapes, which every provider is spoken to and answered in: the body of a chat completion, an answer
read from one, a refusal read from an error body."""
from __future__ import annotations

import json
from typing import Any, Iterator

from flawforge.llm.errors import ContextLengthExceeded, InvalidRequest, LLMError, ProviderError, UnknownModel
from flawforge.proto.inference import (AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChunkChoice,
                                       ChunkDelta, FunctionCall, ToolCall, Usage)
from flawforge.proto.llm import ChatRequest, ChatResult

CHAT_PATH = "/chat/completions"


def error_from_response(status: int, body: Any, retry_after_s: float | None = None, provider: str = "") -> LLMError:
    """Names what the provider (by its name, where given) refused, from its status code and OpenAI-style error
    body."""
    code, message = "", ""
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict):
            code = str(error.get("code") or error.get("type") or "")
            message = str(error.get("message") or error.get("msg") or json.dumps(error))
        else:
            message = json.dumps(error) if not isinstance(error, str) else error
    elif body:
        message = str(body)[:1000]
    lowered = f"{code} {message}".lower()
    detail = f"provider{f' {provider!r}' if provider else ''} answered {status}: {message or '(no message)'}"
    if code == "context_length_exceeded" or ("context" in lowered and ("length" in lowered or "maximum" in lowered)):
        return ContextLengthExceeded(detail)
    if code == "model_not_found" or (status == 404 and "model" in lowered):
        return UnknownModel(detail)
    if status in (408, 409, 429) or status >= 500:
        return ProviderError(detail, retryable=True, retry_after_s=retry_after_s)
    if status in (400, 413, 422):
        return InvalidRequest(detail)
    return ProviderError(detail)


def tool_calls_of(message: dict) -> list[ToolCall] | None:
    """The calls of an answer's message (id, function name, arguments as JSON text); None without any."""
    return [ToolCall(id=str(call["id"]), function=FunctionCall(name=call["function"]["name"],
                                                               arguments=call["function"]["arguments"]))
            for call in message.get("tool_calls") or []] or None


def result_from_completion(body: Any, fp: str, provider: str) -> ChatResult:
    try:
        choice = body["choices"][0]
        usage = body.get("usage") or {}
        return ChatResult(fingerprint=fp, provider=provider, model=str(body.get("model", "")),
                          content=choice["message"].get("content") or "",
                          tool_calls=tool_calls_of(choice["message"]), finish_reason=choice.get("finish_reason"),
                          usage=Usage(prompt_tokens=usage.get("prompt_tokens", 0),
                                      completion_tokens=usage.get("completion_tokens", 0),
                                      total_tokens=usage.get("total_tokens", 0)))
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ProviderError(f"provider returned a chat completion without {exc}: {str(body)[:300]}") from None


def chat_body(request: ChatRequest, upstream_model: str, json_schema: bool) -> dict:
    """The request in OpenAI's shape, its tools and tool_choice as they were set; the schema sent as response_format
    where the provider enforces it, else stated with the first instructions."""
    messages = [m.model_dump() for m in request.messages]
    body: dict[str, Any] = {"model": upstream_model, "messages": messages, **request.parameters(),
                            **request.tool_fields()}
    if request.response_schema is not None:
        if json_schema:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": request.response_schema}}
        else:
            # Stated up front with the other instructions: a schema as the last message tempts small
            # models to echo it instead of answering.
            note = ("Reply with one JSON object, and nothing else, that matches this JSON schema:\n"
                    + json.dumps(request.response_schema))
            if messages[0]["role"] == "system":
                messages[0]["content"] += "\n\n" + note
            else:
                messages.insert(0, {"role": "system", "content": note})
    return body


def _finish(reason: str | None) -> str:
    """A finish reason OpenAI's clients know; a provider's own ('content_filter', none) reads as a stop."""
    return reason if reason in ("stop", "length", "tool_calls") else "stop"


def completion_of(result: ChatResult, created: int) -> ChatCompletion:
    """The gateway's answer as OpenAI's chat completion (its id names the request's fingerprint); a reply that only
    calls tools has null content, as OpenAI answers it."""
    content = None if result.tool_calls and not result.content else result.content
    return ChatCompletion(id=f"chatcmpl-{result.fingerprint[:24]}", created=created, model=result.model,
                          system_fingerprint=f"flawforge-{result.provider}", usage=result.usage,
                          choices=[ChatChoice(index=0, finish_reason=_finish(result.finish_reason),
                                              message=AssistantMessage(content=content,
                                                                       tool_calls=result.tool_calls))])


def chunks_of(pieces: Iterator[str | ChatResult], fp: str, model: str, created: int,
              include_usage: bool) -> Iterator[ChatCompletionChunk]:
    """OpenAI's stream of chunks from the gateway's pieces: the role with the first text, the finish reason
    last, then the usage when asked for (stream_options.include_usage)."""
    def chunk(delta: ChunkDelta, finish: str | None = None, usage: Usage | None = None,
              choices: bool = True) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=f"chatcmpl-{fp[:24]}", created=created, model=model,
                                   system_fingerprint="flawforge-gateway", usage=usage,
                                   choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)] if choices else [])

    first = True
    for piece in pieces:
        if isinstance(piece, ChatResult):
            yield chunk(ChunkDelta(), _finish(piece.finish_reason))
            if include_usage:
                yield chunk(ChunkDelta(), usage=piece.usage, choices=False)
            return
        yield chunk(ChunkDelta(role="assistant", content=piece) if first else ChunkDelta(content=piece))
        first = False

"""OpenAI-compatible chat and text completions on a backend, shared by the HTTP endpoints and the
Batch API worker."""
from __future__ import annotations

import json
import secrets
import time
import uuid

from pydantic import ValidationError

from flawforge.inference.backend import Backend, Sample, SamplingParams
from flawforge.inference.errors import RequestError
from flawforge.proto.inference import (
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionRequest, ChoiceLogprobs, Completion,
    CompletionChoice, CompletionLogprobs, CompletionRequest, SamplingRequest, TokenLogprob, TopLogprob, Usage,
)

SEED_SPACE = 1 << 63


def check_model(served: str, requested: str) -> None:
    if requested != served:
        raise RequestError(404, f"The model {requested!r} does not exist; this server serves {served!r}.",
                           param="model", code="model_not_found")


def _max_tokens(backend: Backend, prompt_tokens: int, requested: int | None, default: int, param: str) -> int:
    limit = backend.context_length
    if prompt_tokens == 0:
        raise RequestError(400, f"The {param} is empty.", param=param, code="empty_prompt")
    if requested is None:
        if prompt_tokens >= limit:
            raise RequestError(400, f"This model's maximum context length is {limit} tokens. However, your "
                                    f"{param} has {prompt_tokens} tokens.", param=param,
                               code="context_length_exceeded")
        return min(default, limit - prompt_tokens)
    if prompt_tokens + requested > limit:
        raise RequestError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                                f"{prompt_tokens + requested} tokens ({prompt_tokens} in the {param}, {requested} "
                                f"in the completion).", param=param, code="context_length_exceeded")
    return requested


def _params(req: SamplingRequest, max_tokens: int, logprobs: bool, top_logprobs: int) -> SamplingParams:
    seed = secrets.randbelow(SEED_SPACE) if req.seed is None else req.seed % SEED_SPACE
    return SamplingParams(n=req.n, temperature=req.temperature, top_p=req.top_p, max_tokens=max_tokens, seed=seed,
                          stop=req.stop_strings, logprobs=logprobs, top_logprobs=top_logprobs)


def _piece(backend: Backend, token_id: int) -> str:
    return backend.tokenizer.decode([token_id])


def _fingerprint(backend: Backend) -> str:
    return f"{backend.name}:{backend.model_name}"


def chat_prompt(backend: Backend, req: ChatCompletionRequest) -> list[int]:
    tokenizer = backend.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError(400, f"The model {backend.model_name!r} has no chat template; use /v1/completions.",
                           param="messages", code="no_chat_template")
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text} for m in req.messages]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def chat_completion(backend: Backend, req: ChatCompletionRequest, default_max_tokens: int) -> ChatCompletion:
    check_model(backend.model_name, req.model)
    prompt = chat_prompt(backend, req)
    max_tokens = _max_tokens(backend, len(prompt), req.max_completion_tokens or req.max_tokens,
                             default_max_tokens, "messages")
    samples = backend.generate(prompt, _params(req, max_tokens, req.logprobs, req.top_logprobs or 0))
    if req.response_format is not None and req.response_format.type == "json_object":
        for index, sample in enumerate(samples):
            try:
                json.loads(sample.text)
            except json.JSONDecodeError as exc:
                raise RequestError(422, f"The model's output for choice {index} is not valid JSON ({exc}): "
                                        f"{sample.text[:200]!r}", param="response_format",
                                   code="invalid_json_output") from None

    def token_logprobs(sample: Sample) -> ChoiceLogprobs:
        def entry(token_id: int, logprob: float) -> TopLogprob:
            piece = _piece(backend, token_id)
            return TopLogprob(token=piece, logprob=logprob, bytes=list(piece.encode()))

        return ChoiceLogprobs(content=[
            TokenLogprob(**entry(c.token_id, c.logprob).model_dump(), top_logprobs=[entry(t, lp) for t, lp in c.top])
            for c in sample.logprobs])

    choices = [ChatChoice(index=i, message=AssistantMessage(content=s.text), finish_reason=s.finish_reason,
                          logprobs=token_logprobs(s) if req.logprobs else None) for i, s in enumerate(samples)]
    completion_tokens = sum(len(s.token_ids) for s in samples)
    return ChatCompletion(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=backend.model_name,
                          choices=choices, system_fingerprint=_fingerprint(backend),
                          usage=Usage(prompt_tokens=len(prompt), completion_tokens=completion_tokens,
                                      total_tokens=len(prompt) + completion_tokens))


def completion(backend: Backend, req: CompletionRequest) -> Completion:
    check_model(backend.model_name, req.model)
    encoded = [backend.tokenizer(p)["input_ids"] for p in req.prompts]
    want = req.logprobs is not None
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for text, prompt in zip(req.prompts, encoded):
        max_tokens = _max_tokens(backend, len(prompt), req.max_tokens, req.max_tokens or 16, "prompt")
        samples = backend.generate(prompt, _params(req, max_tokens, want, req.logprobs or 0))
        prompt_tokens += len(prompt)
        for sample in samples:
            completion_tokens += len(sample.token_ids)
            choices.append(CompletionChoice(index=len(choices), text=sample.text, finish_reason=sample.finish_reason,
                                            logprobs=_legacy_logprobs(backend, sample, len(text)) if want else None))
    return Completion(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=backend.model_name,
                      choices=choices, system_fingerprint=_fingerprint(backend),
                      usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  total_tokens=prompt_tokens + completion_tokens))


def _legacy_logprobs(backend: Backend, sample: Sample, offset: int) -> CompletionLogprobs:
    tokens = [_piece(backend, c.token_id) for c in sample.logprobs]
    offsets = []
    for piece in tokens:
        offsets.append(offset)
        offset += len(piece)
    return CompletionLogprobs(tokens=tokens, token_logprobs=[c.logprob for c in sample.logprobs],
                              top_logprobs=[{_piece(backend, t): lp for t, lp in c.top} for c in sample.logprobs],
                              text_offset=offsets)


def execute(backend: Backend, endpoint: str, body: dict, default_max_tokens: int) -> dict:
    """Runs one request given as JSON, as a batch line carries it; raises RequestError."""
    request_model = {"/v1/chat/completions": ChatCompletionRequest, "/v1/completions": CompletionRequest}[endpoint]
    try:
        req = request_model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ".".join(map(str, err["loc"])) or None
        raise RequestError(400, f"invalid {field or 'body'}: {err['msg']}", param=field,
                           code="invalid_request") from None
    if endpoint == "/v1/chat/completions":
        return chat_completion(backend, req, default_max_tokens).model_dump(mode="json")
    return completion(backend, req).model_dump(mode="json")

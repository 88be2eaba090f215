"""OpenAI-compatible chat and text completions on a backend, shared by the HTTP endpoints and the
Batch API worker: whole responses, or the chunks of a stream.

Structured output and tool calls are grammar-constrained while decoding (flawforge.inference.decoding):
`response_format` json_object / json_schema constrain the whole reply; with tools, the model is told
how to call them and a call's arguments are constrained to the function's parameters. Tool calls
are written `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the model's own text, the
format the prompt teaches.
"""
from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from pydantic import ValidationError

from flawforge.errors import ConfigError
from flawforge.inference.backend import Backend, OutputFormat, Sample, SamplingParams, TokenChoice
from flawforge.inference.errors import RequestError
from flawforge.inference.schema_support import refuse_unsupported
from flawforge.proto.inference import (
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatMessage,
    ChoiceLogprobs, ChunkChoice, ChunkDelta, Completion, CompletionChoice, CompletionLogprobs, CompletionRequest,
    FunctionCall, NamedToolChoice, SamplingRequest, TokenLogprob, ToolCall, ToolCallDelta, TopLogprob, Usage,
)

SEED_SPACE = 1 << 63
COMPLETION_MAX_TOKENS = 16  # of a text completion that sets none (None), as OpenAI's
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_CALL = re.compile(re.escape(TOOL_OPEN) + r"(.*?)" + re.escape(TOOL_CLOSE), re.S)


def check_model(served: str, requested: str) -> None:
    if requested != served:
        raise RequestError(404, f"The model {requested!r} does not exist; this server serves {served!r}.",
                           param="model", code="model_not_found")


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask of the model: its caller's cap on completion tokens (n x max_tokens, summed over
    a completion's prompts), and the max_tokens of a chat completion that sets none."""

    default_max_tokens: int
    max_request_tokens: int


def caller_caps(spec: str, server_max: int) -> dict[str, int]:
    """`name:tokens,...` (FLAWFORGE_INFERENCE_CALLER_REQUEST_TOKENS) -> {name: cap}, each cap at most `server_max`;
    `*` names every caller not named. A malformed entry is a config error."""
    caps: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, tokens = entry.rpartition(":")
        if not name.strip() or not tokens.strip().isdigit() or int(tokens) < 1:
            raise ConfigError(f"FLAWFORGE_INFERENCE_CALLER_REQUEST_TOKENS entry {entry[:40]!r} is not 'name:tokens'")
        caps[name.strip()] = min(int(tokens), server_max)
    return caps


@dataclass(frozen=True)
class CallerLimits:
    """Each caller's RequestLimits: its own cap (FLAWFORGE_INFERENCE_CALLER_REQUEST_TOKENS), else the cap of `*`,
    else the server-wide maximum. A request is bounded by its sender's, a batch line by its batch's creator's."""

    default_max_tokens: int
    server_max: int
    caps: dict[str, int]

    @classmethod
    def from_settings(cls, settings) -> "CallerLimits":
        server_max = settings.inference_max_request_tokens
        return cls(settings.inference_default_max_tokens, server_max,
                   caller_caps(settings.inference_caller_request_tokens, server_max))

    def of(self, who: str | None) -> RequestLimits:
        """`who` None: a caller no entry names (a batch recorded before batches named their creator)."""
        return RequestLimits(self.default_max_tokens, self.caps.get(who, self.caps.get("*", self.server_max)))


def check_cost(limits: RequestLimits, n: int, max_tokens: int, prompts: int = 1) -> None:
    cost = prompts * n * max_tokens
    if cost > limits.max_request_tokens:
        many = f"{prompts} prompts x " if prompts > 1 else ""
        raise RequestError(400, f"This request asks for up to {cost} completion tokens ({many}n={n} x max_tokens="
                                f"{max_tokens}), more than the {limits.max_request_tokens} one request of this caller "
                                f"may ask for; lower n or max_tokens.", param="max_tokens",
                           code="request_too_large")


def _check_prompt_size(backend: Backend, text: str, param: str) -> None:
    """Refuses, before tokenising, a text too long to fit the context whatever its tokens (a 14 MiB prompt took
    9.3 s and 1.35 GiB to tokenise): no token covers more characters than the vocabulary's longest."""
    bound = backend.context_length * backend.vocabulary.longest_token
    if len(text) > bound:
        raise RequestError(400, f"This model's maximum context length is {backend.context_length} tokens, at most "
                                f"{bound} characters; however, the {param} come to {len(text)} characters.",
                           param=param, code="context_length_exceeded")


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


def _logit_bias(backend: Backend, req: SamplingRequest) -> tuple[tuple[int, float], ...]:
    bias = tuple((int(token), value) for token, value in (req.logit_bias or {}).items())
    outside = [token for token, _ in bias if token >= backend.vocab_size]
    if outside:
        raise RequestError(400, f"logit_bias names token ids outside the vocabulary (0..{backend.vocab_size - 1}): "
                                f"{outside[:5]}", param="logit_bias", code="invalid_logit_bias")
    return bias


def _check_closing_reserve(reserve: int, max_tokens: int) -> None:
    """The closing reserve is at most half the reply's budget (the rule the llm-gateway applies to the reserve it
    sets): a larger one leaves the reply no room to write, every string closed at its first quote."""
    if reserve > max_tokens // 2:
        raise RequestError(400, f"json_closing_reserve {reserve} leaves no room to write: it may be at most half of "
                                f"max_tokens ({max_tokens}), {max_tokens // 2}.", param="json_closing_reserve",
                           code="invalid_closing_reserve")


def _params(backend: Backend, req: SamplingRequest, max_tokens: int, logprobs: bool, top_logprobs: int,
            output_format: OutputFormat | None = None, format_param: str = "response_format") -> SamplingParams:
    _check_closing_reserve(req.json_closing_reserve, max_tokens)
    seed = secrets.randbelow(SEED_SPACE) if req.seed is None else req.seed % SEED_SPACE
    if output_format is not None:
        backend.vocabulary.compile(output_format, format_param)  # a bad schema fails before any token
    return SamplingParams(n=req.n, temperature=req.temperature, top_p=req.top_p, max_tokens=max_tokens, seed=seed,
                          stop=req.stop_strings, logprobs=logprobs, top_logprobs=top_logprobs,
                          presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
                          logit_bias=_logit_bias(backend, req), output_format=output_format,
                          json_closing_reserve=req.json_closing_reserve, dry_multiplier=req.dry_multiplier, dry_base=req.dry_base,
                          dry_allowed_length=req.dry_allowed_length, dry_penalty_last_n=req.dry_penalty_last_n,
                          dry_sequence_breakers=tuple(req.dry_sequence_breakers))


def _piece(backend: Backend, token_id: int) -> str:
    return backend.tokenizer.decode([token_id])


def _fingerprint(backend: Backend) -> str:
    return f"{backend.name}:{backend.model_name}:{backend.model_revision.removeprefix('sha256:')[:12]}"


# --- chat: prompts, tools and formats ------------------------------------------------------------


def _tool_note(req: ChatCompletionRequest) -> str:
    listed = "\n".join(json.dumps({"name": t.function.name, "description": t.function.description or "",
                                   "parameters": t.function.parameters}) for t in req.tools)
    return ("You can call these functions:\n" + listed + "\nTo call one, reply with " + TOOL_OPEN
            + '{"name": <function name>, "arguments": <arguments object>}' + TOOL_CLOSE + ".")


def _turn(message: ChatMessage) -> dict:
    """A message as the chat template takes it; tool calls and results become text in the call format."""
    if message.role == "tool":
        return {"role": "user", "content": f"Result of call {message.tool_call_id or ''}: {message.text}"}
    text = message.text
    for call in message.tool_calls or []:
        text += f'{TOOL_OPEN}{{"name": {json.dumps(call.function.name)}, "arguments": {call.function.arguments}}}' \
                f"{TOOL_CLOSE}"
    return {"role": "system" if message.role == "developer" else message.role, "content": text}


def _uses_tools(req: ChatCompletionRequest) -> bool:
    return bool(req.tools) and req.tool_choice != "none"


def chat_prompt(backend: Backend, req: ChatCompletionRequest) -> list[int]:
    tokenizer = backend.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError(400, f"The model {backend.model_name!r} has no chat template; use /v1/completions.",
                           param="messages", code="no_chat_template")
    messages = [_turn(m) for m in req.messages]
    if _uses_tools(req):
        if messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": messages[0]["content"] + "\n\n" + _tool_note(req)}
        else:
            messages.insert(0, {"role": "system", "content": _tool_note(req)})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    _check_prompt_size(backend, text, "messages")
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _call_schema(tools) -> dict:
    """One call of any of `tools`: {"name": ..., "arguments": {...}}."""
    options = [{"type": "object", "properties": {"name": {"const": t.function.name},
                                                 "arguments": t.function.parameters},
                "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    return options[0] if len(options) == 1 else {"anyOf": options}


def refuse_unenforced_schemas(req: ChatCompletionRequest) -> None:
    """A 400 naming the first schema keyword of the request's response format or tools that decoding would not
    enforce (flawforge.inference.schema_support)."""
    if _uses_tools(req):
        for index, tool in enumerate(req.tools):
            refuse_unsupported(tool.function.parameters, "tools", f"tools[{index}] ({tool.function.name})")
    elif req.response_format is not None and req.response_format.type == "json_schema":
        refuse_unsupported(req.response_format.json_schema.json_schema or {}, "response_format", "response_format")


def _output_format(req: ChatCompletionRequest) -> OutputFormat | None:
    refuse_unenforced_schemas(req)
    if _uses_tools(req):
        if req.tool_choice in (None, "auto"):
            return OutputFormat("structural_tag", json.dumps({"type": "structural_tag", "format": {
                "type": "triggered_tags", "triggers": [TOOL_OPEN], "tags": [{
                    "type": "tag", "begin": f'{TOOL_OPEN}{{"name": {json.dumps(t.function.name)}, "arguments": ',
                    "content": {"type": "json_schema", "json_schema": t.function.parameters},
                    "end": "}" + TOOL_CLOSE} for t in req.tools]}}))
        chosen = ([t for t in req.tools if t.function.name == req.tool_choice.function.name]
                  if isinstance(req.tool_choice, NamedToolChoice) else req.tools)
        return OutputFormat.json_schema(_call_schema(chosen))
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return OutputFormat.json_schema({"type": "object"})
    return OutputFormat.json_schema(fmt.json_schema.json_schema or {})


def _tool_calls(req: ChatCompletionRequest, text: str) -> tuple[str | None, list[ToolCall]]:
    """The reply's text and the calls it makes."""
    if not _uses_tools(req):
        return text, []
    if req.tool_choice not in (None, "auto"):
        bodies, rest = [text], ""
    else:
        bodies, rest = TOOL_CALL.findall(text), TOOL_CALL.sub("", text).strip()
    calls = []
    for body in bodies:
        try:
            call = json.loads(body)
            calls.append(ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=FunctionCall(
                name=call["name"], arguments=json.dumps(call["arguments"]))))
        except (json.JSONDecodeError, KeyError, TypeError):
            rest = text  # cut short by max_tokens: the text is all there is
    return (rest or None) if calls else text, calls


@dataclass
class PreparedChat:
    prompt: list[int]
    params: SamplingParams


def prepare_chat(backend: Backend, req: ChatCompletionRequest, limits: RequestLimits) -> PreparedChat:
    """Everything that can refuse the request, done before the first token."""
    check_model(backend.model_name, req.model)
    prompt = chat_prompt(backend, req)
    max_tokens = _max_tokens(backend, len(prompt), req.max_completion_tokens or req.max_tokens,
                             limits.default_max_tokens, "messages")
    check_cost(limits, req.n, max_tokens)
    return PreparedChat(prompt, _params(backend, req, max_tokens, req.logprobs, req.top_logprobs or 0,
                                        _output_format(req), "tools" if _uses_tools(req) else "response_format"))


def _token_logprobs(backend: Backend, choices: list[TokenChoice]) -> ChoiceLogprobs:
    vocabulary = backend.vocabulary

    def entry(token_id: int, logprob: float) -> TopLogprob:
        return TopLogprob(token=_piece(backend, token_id), logprob=logprob,
                          bytes=list(vocabulary.token_bytes(token_id)))

    return ChoiceLogprobs(content=[
        TokenLogprob(**entry(c.token_id, c.logprob).model_dump(), top_logprobs=[entry(t, lp) for t, lp in c.top])
        for c in choices])


def _usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens)


def chat_completion(backend: Backend, req: ChatCompletionRequest, limits: RequestLimits) -> ChatCompletion:
    prepared = prepare_chat(backend, req, limits)
    samples = backend.generate(prepared.prompt, prepared.params)
    choices = []
    for index, sample in enumerate(samples):
        content, calls = _tool_calls(req, sample.text)
        choices.append(ChatChoice(index=index, message=AssistantMessage(content=content, tool_calls=calls or None),
                                  finish_reason="tool_calls" if calls else sample.finish_reason,
                                  logprobs=_token_logprobs(backend, sample.logprobs) if req.logprobs else None))
    return ChatCompletion(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=backend.model_name,
                          choices=choices, system_fingerprint=_fingerprint(backend),
                          usage=_usage(len(prepared.prompt), sum(len(s.token_ids) for s in samples)))


def chat_chunks(backend: Backend, req: ChatCompletionRequest, prepared: PreparedChat,
                cancelled: Callable[[], bool]) -> Iterator[dict]:
    """The chunks of a streamed chat completion, as JSON objects. Text streams as it is released; with
    tools, a choice's text and calls come whole at its end, once the calls can be told from the text."""
    head = ChatCompletionChunk(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()),
                               model=backend.model_name, choices=[], system_fingerprint=_fingerprint(backend))

    def chunk(choice: ChunkChoice) -> dict:
        return head.model_copy(update={"choices": [choice]}).model_dump(mode="json")

    for index in range(req.n):
        yield chunk(ChunkChoice(index=index, delta=ChunkDelta(role="assistant", content="")))
    tools = _uses_tools(req)
    held = [""] * req.n
    completion_tokens = 0
    for delta in backend.stream(prepared.prompt, prepared.params, cancelled):
        completion_tokens += len(delta.token_ids)
        logprobs = _token_logprobs(backend, delta.logprobs) if req.logprobs and delta.logprobs else None
        if not tools:
            if delta.text or logprobs or delta.finish_reason:
                yield chunk(ChunkChoice(index=delta.index, delta=ChunkDelta(content=delta.text or None),
                                        logprobs=logprobs, finish_reason=delta.finish_reason))
            continue
        held[delta.index] += delta.text
        if delta.finish_reason:
            content, calls = _tool_calls(req, held[delta.index])
            yield chunk(ChunkChoice(index=delta.index, delta=ChunkDelta(content=content, tool_calls=[
                ToolCallDelta(index=i, id=c.id, function=c.function) for i, c in enumerate(calls)] or None),
                finish_reason="tool_calls" if calls else delta.finish_reason))
    if req.include_usage:
        yield head.model_copy(update={"usage": _usage(len(prepared.prompt), completion_tokens)}).model_dump(
            mode="json") | {"choices": []}


# --- text completions ----------------------------------------------------------------------------


@dataclass
class PreparedCompletion:
    prompts: list[tuple[str, list[int], SamplingParams | None]]  # text, tokens, params (None: echo only)


def prepare_completion(backend: Backend, req: CompletionRequest, limits: RequestLimits) -> PreparedCompletion:
    check_model(backend.model_name, req.model)
    # max_tokens is each prompt's own (or refused with the context): the cost is known before any tokenising.
    check_cost(limits, req.n, COMPLETION_MAX_TOKENS if req.max_tokens is None else req.max_tokens, len(req.prompts))
    want = req.logprobs is not None
    prepared = []
    for text in req.prompts:
        _check_prompt_size(backend, text, "prompt")
        prompt = backend.tokenizer(text)["input_ids"]
        if req.max_tokens == 0:
            _max_tokens(backend, len(prompt), 0, 0, "prompt")
            prepared.append((text, prompt, None))
            continue
        max_tokens = _max_tokens(backend, len(prompt), req.max_tokens, COMPLETION_MAX_TOKENS, "prompt")
        prepared.append((text, prompt, _params(backend, req, max_tokens, want, req.logprobs or 0)))
    return PreparedCompletion(prepared)


def _echo_logprobs(backend: Backend, prompt: list[int]) -> list[TokenChoice | None]:
    """The prompt's own tokens, each scored given those before it (the first has nothing before it)."""
    if len(prompt) < 2:
        return [None] * len(prompt)
    [[scores]] = backend.score([(prompt[:1], [prompt[1:]])])
    return [None] + [TokenChoice(token_id=t, logprob=lp) for t, lp in zip(prompt[1:], scores)]


def _legacy_logprobs(backend: Backend, entries: list[tuple[int, TokenChoice | None]],
                     offset: int) -> CompletionLogprobs:
    tokens, logprobs, tops, offsets = [], [], [], []
    for token_id, choice in entries:
        piece = _piece(backend, token_id)
        tokens.append(piece)
        offsets.append(offset)
        offset += len(piece)
        logprobs.append(None if choice is None else choice.logprob)
        tops.append(None if choice is None else {_piece(backend, t): lp for t, lp in choice.top})
    return CompletionLogprobs(tokens=tokens, token_logprobs=logprobs, top_logprobs=tops, text_offset=offsets)


def completion(backend: Backend, req: CompletionRequest, limits: RequestLimits) -> Completion:
    prepared = prepare_completion(backend, req, limits)
    want = req.logprobs is not None
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for text, prompt, params in prepared.prompts:
        prompt_tokens += len(prompt)
        echoed = _echo_logprobs(backend, prompt) if req.echo and want else []
        samples = (backend.generate(prompt, params) if params is not None
                   else [Sample(token_ids=[], text="", finish_reason="length")] * req.n)
        for sample in samples:
            completion_tokens += len(sample.token_ids)
            logprobs = None
            if want:
                entries = ([(c.token_id if c else t, c) for t, c in zip(prompt, echoed)] if req.echo else []) + \
                          [(c.token_id, c) for c in sample.logprobs]
                logprobs = _legacy_logprobs(backend, entries, 0 if req.echo else len(text))
            choices.append(CompletionChoice(index=len(choices), text=(text if req.echo else "") + sample.text,
                                            finish_reason=sample.finish_reason, logprobs=logprobs))
    return Completion(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=backend.model_name,
                      choices=choices, system_fingerprint=_fingerprint(backend),
                      usage=_usage(prompt_tokens, completion_tokens))


def completion_chunks(backend: Backend, req: CompletionRequest, prepared: PreparedCompletion,
                      cancelled: Callable[[], bool]) -> Iterator[dict]:
    """The chunks of a streamed text completion: choice indices run n per prompt, in prompt order."""
    head = Completion(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=backend.model_name,
                      choices=[], usage=None, system_fingerprint=_fingerprint(backend))
    want = req.logprobs is not None
    prompt_tokens = completion_tokens = 0
    for number, (text, prompt, params) in enumerate(prepared.prompts):
        prompt_tokens += len(prompt)
        first = number * req.n
        if req.echo:
            for index in range(req.n):
                yield head.model_copy(update={"choices": [CompletionChoice(
                    index=first + index, text=text, finish_reason=None if params else "length")]}).model_dump(
                    mode="json")
        if params is None:
            continue
        offsets = [len(text)] * req.n
        for delta in backend.stream(prompt, params, cancelled):
            completion_tokens += len(delta.token_ids)
            logprobs = (_legacy_logprobs(backend, [(c.token_id, c) for c in delta.logprobs], offsets[delta.index])
                        if want and delta.logprobs else None)
            offsets[delta.index] += len(delta.text)
            yield head.model_copy(update={"choices": [CompletionChoice(
                index=first + delta.index, text=delta.text, finish_reason=delta.finish_reason,
                logprobs=logprobs)]}).model_dump(mode="json")
    if req.include_usage:
        yield head.model_copy(update={"usage": _usage(prompt_tokens, completion_tokens)}).model_dump(mode="json")


# --- the Batch API's entry ---------------------------------------------------------------------


def batch_request(endpoint: str, body: dict) -> SamplingRequest:
    """A batch line's request, validated; raises RequestError."""
    request_model = {"/v1/chat/completions": ChatCompletionRequest, "/v1/completions": CompletionRequest}[endpoint]
    try:
        req = request_model.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc.errors(include_url=False)) from None
    if req.stream:
        raise RequestError(400, "stream is not supported in a batch request", param="stream",
                           code="invalid_request")
    return req


def execute(backend: Backend, endpoint: str, body: dict, limits: RequestLimits) -> dict:
    """Runs one request given as JSON, as a batch line carries it; raises RequestError."""
    req = batch_request(endpoint, body)
    if endpoint == "/v1/chat/completions":
        return chat_completion(backend, req, limits).model_dump(mode="json")
    return completion(backend, req, limits).model_dump(mode="json")


def invalid_request(errors: list[dict]) -> RequestError:
    """The first validation error as OpenAI words it: a 400 naming the parameter."""
    err = errors[0]
    if err["type"] == "json_invalid":
        return RequestError(400, "We could not parse the JSON body of your request: it is not valid JSON.",
                            code="invalid_json")
    loc = [str(part) for part in err["loc"] if part != "body"]
    field = ".".join(loc) or None
    message = err["msg"].removeprefix("Value error, ")
    return RequestError(400, f"Invalid value for {field}: {message}" if field else f"Invalid request: {message}",
                        param=field, code="invalid_value" if field else "invalid_request")

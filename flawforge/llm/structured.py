"""Structured output: find the JSON in a reply, validate it against a pydantic model, ask for a repair."""
from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from flawforge.llm.errors import InvalidModelOutput
from flawforge.proto.llm import ChatMessage, ChatRequest

T = TypeVar("T", bound=BaseModel)


def extract_json(text: str):
    """The JSON value in a reply: the whole text, a fenced block, or the first balanced object."""
    candidates = [text.strip()]
    if "```" in text:
        for block in text.split("```")[1::2]:
            candidates.append(block.split("\n", 1)[1] if block.lstrip().startswith(("json", "JSON")) else block)
    start = text.find("{")
    if start >= 0:
        candidates.append(text[start:text.rfind("}") + 1])
    decoder = json.JSONDecoder()
    first_error = None
    for candidate in candidates:
        candidate = candidate.strip()
        if not candidate:
            continue
        try:
            value, _ = decoder.raw_decode(candidate)
            return value
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
    if first_error is None:
        raise InvalidModelOutput("the reply is empty, expected a JSON object")
    raise InvalidModelOutput(f"the reply is not valid JSON: {first_error.msg} at line {first_error.lineno} "
                             f"column {first_error.colno}")


def parse_reply(text: str, schema: type[T]) -> T:
    value = extract_json(text)
    try:
        return schema.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                             for e in exc.errors(include_url=False)[:5])
        raise InvalidModelOutput(f"the reply's JSON does not match {schema.__name__}: {problems}") from None


def repair_request(request: ChatRequest, reply: str, problem: str) -> ChatRequest:
    """The conversation so far plus the bad reply and what is wrong with it."""
    return request.model_copy(update={"messages": [
        *request.messages,
        ChatMessage(role="assistant", content=reply),
        ChatMessage(role="user", content=f"That reply cannot be used: {problem}. "
                                         "Answer again with only the corrected JSON object."),
    ]})

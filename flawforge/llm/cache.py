"""The fingerprint cache: a request's answer stored once in the blob store, so a rerun costs nothing.

An entry is {"sha256": ..., "result": "<the answer's JSON>"}: the checksum covers the answer's text, so an entry
cut short or edited on disk (without its checksum recomputed) is a miss, logged, and asked of the model again;
never served as the model's answer, never an error for the request.
"""
from __future__ import annotations

import hashlib
import json
import logging
from typing import Iterable

from flawforge.blobstore import BlobStore
from flawforge.errors import BlobNotFound
from flawforge.llm.calllog import redact
from flawforge.proto.llm import ChatRequest, ChatResult

PREFIX = "llm/cache"

log = logging.getLogger(__name__)


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(request: ChatRequest) -> str:
    """sha256 over what determines the answer: model, messages, sampling parameters, response schema, and the tools
    and tool_choice where set (left out otherwise, so a request without tools keeps the fingerprint it had before
    tools were passed).

    How the reply is parsed or repaired is deliberately left out: changing the parser must not
    make finished calls look new.
    """
    return hashlib.sha256(canonical_json({
        "model": request.model,
        "messages": [m.model_dump() for m in request.messages],
        "parameters": request.parameters(),
        "response_schema": request.response_schema,
        **request.tool_fields(),
    })).hexdigest()


class ResponseCache:
    def __init__(self, store: BlobStore):
        self.store = store

    @staticmethod
    def key(fp: str) -> str:
        return f"{PREFIX}/{fp[:2]}/{fp}.json"

    def get(self, fp: str) -> ChatResult | None:
        try:
            data = self.store.get(self.key(fp))
        except BlobNotFound:
            return None
        result = self._verified(fp, data)
        return None if result is None else result.model_copy(update={"cached": True})

    def _verified(self, fp: str, data: bytes) -> ChatResult | None:
        """The entry's answer if its checksum holds and it answers `fp`; else None, logged."""
        try:
            entry = json.loads(data)
            text = entry["result"]
            if hashlib.sha256(text.encode()).hexdigest() != entry["sha256"]:
                raise ValueError("its checksum does not match its answer")
            result = ChatResult.model_validate_json(text)
            if result.fingerprint != fp:
                raise ValueError(f"it answers another request ({result.fingerprint})")
            return result
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cache entry %s is unusable, treated as a miss: %s", self.key(fp), str(exc).splitlines()[0])
            return None

    def put(self, result: ChatResult, secrets: Iterable[str] = ()) -> ChatResult:
        """Stores the answer redacted like the call log (a key the model echoed, in its text or a call's
        arguments, is not kept) and returns what was stored, so a fresh answer reads as its cached copy will."""
        answer = result.model_dump(include={"content", "tool_calls"})
        stored = ChatResult.model_validate({**result.model_dump(), **redact(answer, secrets), "cached": False})
        text = stored.model_dump_json()
        entry = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "result": text}
        self.store.put(self.key(result.fingerprint), json.dumps(entry).encode(), "application/json")
        return stored

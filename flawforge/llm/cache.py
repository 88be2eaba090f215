"""The fingerprint cache: a request's answer stored once in the blob store, so a rerun costs nothing."""
from __future__ import annotations

import hashlib
import json

from typing import Iterable

from flawforge.blobstore import BlobStore
from flawforge.errors import BlobNotFound
from flawforge.llm.calllog import redact
from flawforge.proto.llm import ChatRequest, ChatResult

PREFIX = "llm/cache"


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(request: ChatRequest) -> str:
    """sha256 over what determines the answer: model, messages, sampling parameters, response schema.

    How the reply is parsed or repaired is deliberately left out: changing the parser must not
    make finished calls look new.
    """
    return hashlib.sha256(canonical_json({
        "model": request.model,
        "messages": [m.model_dump() for m in request.messages],
        "parameters": request.parameters(),
        "response_schema": request.response_schema,
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
        return ChatResult.model_validate_json(data).model_copy(update={"cached": True})

    def put(self, result: ChatResult, secrets: Iterable[str] = ()) -> ChatResult:
        """Stores the answer redacted like the call log (a key the model echoed is not kept) and returns what
        was stored, so a fresh answer reads as its cached copy will."""
        stored = result.model_copy(update={"cached": False, "content": redact(result.content, secrets)})
        self.store.put(self.key(result.fingerprint), stored.model_dump_json().encode(), "application/json")
        return stored

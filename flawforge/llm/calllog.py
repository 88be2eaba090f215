"""Every HTTP exchange with a provider, written to the blob store with secrets redacted.

The request is logged before it is sent; a log that cannot be written fails the call, so no
model call ever goes unrecorded.
"""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any, Iterable

from flawforge.blobstore import BlobStore
from flawforge.llm.errors import CallLogUnavailable

PREFIX = "llm/log"
REDACTED = "[REDACTED]"
SECRET_HEADERS = {"authorization", "proxy-authorization", "api-key", "x-api-key", "openai-api-key", "cookie"}
# Shapes of well-known credentials, caught even where they were pasted into a prompt.
SECRET_PATTERNS = (
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
)


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy with secret headers, known secret values and credential-shaped strings replaced."""
    secrets = [s for s in secrets if s and len(s) >= 4]

    def clean_text(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, REDACTED)
        for pattern in SECRET_PATTERNS:
            text = pattern.sub(REDACTED, text)
        return text

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: REDACTED if str(k).lower() in SECRET_HEADERS or str(k).lower() == "api_key" else walk(v)
                    for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            return clean_text(node)
        return node

    return walk(value)


class CallLog:
    def __init__(self, store: BlobStore):
        self.store = store

    def exchange_key(self) -> str:
        now = datetime.now(timezone.utc)
        return f"{PREFIX}/{now:%Y-%m-%d}/{now:%H%M%S.%f}-{uuid.uuid4().hex[:12]}"

    def write(self, key: str, record: dict, secrets: Iterable[str] = ()) -> None:
        record = {"time": datetime.now(timezone.utc).isoformat(), **record}
        data = json.dumps(redact(record, secrets), sort_keys=True, default=str).encode()
        try:
            self.store.put(key, data, "application/json")
        except Exception as exc:
            raise CallLogUnavailable(f"cannot write the call log at {key!r} ({type(exc).__name__}: {exc}); "
                                     "an unrecorded model call is refused") from exc

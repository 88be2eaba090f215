"""What a JSON request body may hold before any model validates it: finite numbers, text without lone
surrogates, a bounded number of keys and a bounded depth.

Python's json accepts all of these, and each costs a service dearly further on: `1e999` and `NaN` become
floats no answer can serialise, a lone surrogate cannot be encoded back, and every unknown key of a model
that forbids extras becomes a validation error of its own (500,000 keys: 700 MiB for one 422).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from flawforge.errors import InvalidInput

MAX_OBJECT_KEYS = 1_000  # keys of one object: a request's largest mappings (logit biases, params) hold hundreds
MAX_KEYS = 100_000  # keys of the whole body: a batch of 10,000 suite changes holds about 50,000
MAX_DEPTH = 64  # nested arrays and objects: the deepest request (a JSON schema) nests a few dozen
# Where a lone surrogate can come from: a \uD800-\uDFFF escape, or its UTF-8 bytes (json lets them pass).
SURROGATE_SOURCE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class InvalidJsonBody(InvalidInput):
    code = "invalid_json"


def _refuse_constant(name: str) -> float:
    raise InvalidJsonBody(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJsonBody(f"the number {text[:40]} is too large for a float")
    return value


def _surrogate_at(value: str) -> int | None:
    try:
        value.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        return exc.start


class _KeyCounter:
    """object_pairs_hook: counts every object's keys as json builds it."""

    def __init__(self):
        self.total = 0

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict:
        self.total += len(pairs)
        if len(pairs) > MAX_OBJECT_KEYS:
            raise InvalidJsonBody(f"an object has {len(pairs):,} keys (at most {MAX_OBJECT_KEYS:,})")
        if self.total > MAX_KEYS:
            raise InvalidJsonBody(f"over {MAX_KEYS:,} keys in all")
        return dict(pairs)


def _check_values(value: Any, check_text: bool) -> None:
    """Depth, and (`check_text`) lone surrogates in keys and strings, walked without recursion."""
    walked = (str, list, dict) if check_text else (list, dict)
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if check_text and (at := _surrogate_at(value)) is not None:
                raise InvalidJsonBody(f"a string holds a lone surrogate "
                                      f"(U+{ord(value[at]):04X} at character {at:,}); text must be valid Unicode")
            continue
        if not isinstance(value, (list, dict)):
            continue
        if depth > MAX_DEPTH:
            raise InvalidJsonBody(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            if check_text:
                stack.extend((key, depth) for key in value)
            value = value.values()
        stack.extend((item, depth + 1) for item in value if isinstance(item, walked))


def parse_json(data: bytes) -> Any:
    """json.loads that refuses (InvalidJsonBody) what no service takes; malformed JSON raises ValueError, as
    json.loads does."""
    counter = _KeyCounter()
    try:
        value = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite, object_pairs_hook=counter)
    except RecursionError:
        raise InvalidJsonBody(f"nested deeper than {MAX_DEPTH} levels") from None
    check_text = SURROGATE_SOURCE.search(data) is not None
    # Each level needs an opening bracket: with no more of them than the limit, only text is left to check.
    if check_text or data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        _check_values(value, check_text)
    return value


def check_json_body(body: bytes) -> None:
    """Raises InvalidJsonBody naming the first thing the body holds that no service takes; a body that is not
    JSON at all passes (the route answers it as it would)."""
    try:
        parse_json(body)
    except ValueError:  # malformed JSON (InvalidJsonBody is no ValueError) is the route's to answer
        return

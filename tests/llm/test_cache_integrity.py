"""A cached answer edited or cut short on disk is a miss (logged), never served as the model's, never an error."""
from __future__ import annotations

import json
import logging

import pytest

from flawforge.blobstore import LocalBlobStore
from flawforge.llm.cache import ResponseCache, fingerprint
from flawforge.llm.config import parse_providers
from flawforge.llm.errors import ReplayMiss
from flawforge.llm.gateway import Gateway
from flawforge.proto.llm import ChatRequest, ChatResult

REQUEST = ChatRequest(model="m", messages=[{"role": "user", "content": "2+2?"}], max_tokens=4)


def replaying_gateway(store) -> Gateway:
    providers = parse_providers('{"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}')
    return Gateway(store, providers, replay=True)


def edited(raw: bytes) -> bytes:
    entry = json.loads(raw)
    entry["result"] = entry["result"].replace("2+2 is 4", "2+2 is 5")
    return json.dumps(entry).encode()


@pytest.mark.parametrize("damage", [edited, lambda raw: raw[: len(raw) // 2], lambda raw: b"\xff" + raw[1:]],
                         ids=["edited", "truncated", "not utf-8"])
def test_a_damaged_entry_is_a_logged_miss(tmp_path, caplog, damage):
    store = LocalBlobStore(tmp_path)
    fp = fingerprint(REQUEST)
    ResponseCache(store).put(ChatResult(fingerprint=fp, provider="p", model="m", content="2+2 is 4"))
    gateway = replaying_gateway(store)
    assert gateway.chat(REQUEST).content == "2+2 is 4"  # whole, it is served

    path = tmp_path / ResponseCache.key(fp)
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="flawforge.llm.cache"), pytest.raises(ReplayMiss):
        gateway.chat(REQUEST)  # replay asks no model: a miss is an error that says so
    assert "treated as a miss" in caplog.text
    assert ResponseCache(store).get(fp) is None


def test_an_entry_moved_to_another_requests_key_is_a_miss(tmp_path):
    store = LocalBlobStore(tmp_path)
    cache = ResponseCache(store)
    cache.put(ChatResult(fingerprint="a" * 64, provider="p", model="m", content="the answer to a"))
    store.put(ResponseCache.key("b" * 64), store.get(ResponseCache.key("a" * 64)))
    assert cache.get("a" * 64).content == "the answer to a" and cache.get("b" * 64) is None

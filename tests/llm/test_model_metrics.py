"""Every model call the gateway makes is counted, timed and its tokens added up (Prometheus); cache hits are not."""
from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from flawforge.blobstore import LocalBlobStore
from flawforge.llm.config import parse_providers
from flawforge.llm.gateway import Gateway
from flawforge.proto.llm import ChatRequest

pytestmark = pytest.mark.model


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_model_calls_tokens_and_latency_are_exported(inference_server, providers_json, tmp_path):
    model = inference_server["model"]
    labels = {"provider": "local", "model": model}
    before = {"ok": sample("flawforge_model_requests_total", **labels, outcome="ok"),
              "prompt": sample("flawforge_model_tokens_total", **labels, kind="prompt"),
              "completion": sample("flawforge_model_tokens_total", **labels, kind="completion"),
              "timed": sample("flawforge_model_request_seconds_count", **labels)}
    gateway = Gateway(LocalBlobStore(tmp_path), parse_providers(providers_json))
    request = ChatRequest(model=model, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=3)
    result = gateway.chat(request)
    assert sample("flawforge_model_requests_total", **labels, outcome="ok") == before["ok"] + 1
    assert sample("flawforge_model_tokens_total", **labels, kind="prompt") == before["prompt"] + result.usage.prompt_tokens
    assert result.usage.completion_tokens > 0
    assert (sample("flawforge_model_tokens_total", **labels, kind="completion")
            == before["completion"] + result.usage.completion_tokens)
    assert sample("flawforge_model_request_seconds_count", **labels) == before["timed"] + 1
    assert gateway.chat(request).cached  # no model call: nothing more counted
    assert sample("flawforge_model_requests_total", **labels, outcome="ok") == before["ok"] + 1

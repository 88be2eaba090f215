"""The llm-gateway's HTTP API on answers that need no model: refusals, malformed batches, unknown batches."""
from __future__ import annotations

import json
import socket

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.assembly import platform_for, service_app
from flawforge.settings import Settings


@pytest.fixture
def client(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"),
                        llm_providers=json.dumps({"local": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "models": ["m"], "api_key_env": "LLM_TEST_KEY"}}),
                        api_tokens=API_TOKENS)
    with TestClient(service_app("llm-gateway", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        yield client


def test_unready_while_no_provider_answers_and_lists_providers_without_secrets(client):
    ready = client.get("/readyz")  # nothing listens on the provider's port
    assert ready.status_code == 503
    assert ready.json()["checks"]["llm_providers"].startswith("failed: no provider reachable (local: ConnectError")
    [provider] = client.get("/llm/providers").json()
    assert provider["name"] == "local" and provider["models"] == ["m"] and provider["api_key_env"] == "LLM_TEST_KEY"


def test_chat_refusals_name_the_problem(client):
    response = client.post("/llm/chat", json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404
    assert response.json() == {"code": "unknown_model", "detail": "unknown model 'gpt-9'; known: local/m"}
    response = client.post("/llm/chat", json={"model": "m", "messages": []})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "messages"]


def test_batch_of_only_bad_lines_completes_with_an_error_per_line(client):
    data = "\n".join([
        "not json",
        json.dumps({"custom_id": "x", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                               "max_tokens": 0}}),
        json.dumps({"custom_id": "y", "body": {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}}),
    ])
    response = client.post("/llm/batches", content=data, headers={"content-type": "application/jsonl"})
    assert response.status_code == 202
    record = response.json()
    assert record["state"] == "completed" and record["provider_batches"] == []
    results = {r["custom_id"]: r["error"] for r in client.get(f"/llm/batches/{record['batch_id']}/results").json()}
    assert results["line-1"] == {"code": "malformed_batch_line", "message": "line 1: not valid JSON: Expecting value"}
    assert results["x"]["code"] == "malformed_batch_line" and "body.max_tokens" in results["x"]["message"]
    assert results["y"] == {"code": "unknown_model", "message": "unknown model 'gpt-9'; known: local/m"}


def test_unknown_batch_and_empty_file(client):
    assert client.get("/llm/batches/abc123").status_code == 404
    assert client.get("/llm/batches/abc123").json()["code"] == "batch_not_found"
    response = client.post("/llm/batches", content=b"\n")
    assert response.status_code == 400 and response.json()["detail"] == "the batch file is empty"


def test_chat_worker_answers_a_bus_request_with_the_items_result(tmp_path):
    import time

    from flawforge.jobs.store import JobStore
    from flawforge.proto.llm import ChatRequest, ChatRequested, RowResult
    from flawforge.runtime.service import Workers
    from flawforge.proto.llm import CHAT_QUEUE
    from flawforge.services.llm_gateway.workers import CHAT_CONSUMER

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path),
                        llm_providers='{"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}')
    platform = platform_for(settings)
    job = JobStore(platform.store).create("templates", {})
    request = ChatRequest(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    ref = platform.store.put_content("llm/requests", request.model_dump_json().encode())
    workers = Workers(platform, [CHAT_CONSUMER]).start()
    try:
        platform.bus.publish(CHAT_QUEUE, ChatRequested(job_id=job.job_id, item="q1.json", request=ref))
        key = f"jobs/{job.job_id}/items/q1.json"
        deadline = time.monotonic() + 10
        while not platform.store.exists(key):
            assert time.monotonic() < deadline, "no result for the item"
            time.sleep(0.02)
    finally:
        workers.stop()
    row = RowResult.model_validate_json(platform.store.get(key))
    assert row.custom_id == "q1.json" and row.result is None
    assert row.error.code == "unknown_model" and "gpt-9" in row.error.message


def test_the_chat_route_has_an_hourly_budget(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_max_attempts=1,
                        llm_chat_max_requests_per_hour=1, api_tokens=API_TOKENS,
                        llm_providers=json.dumps({"local": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "models": ["m"]}}))
    with TestClient(service_app("llm-gateway", platform_for(settings)), headers=AUTHORIZATION) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/llm/chat", json=body).json()["code"] == "provider_error"  # spent the one request
        spent = client.post("/llm/chat", json=body)
        assert spent.status_code == 429 and spent.json()["code"] == "budget_exceeded"
        assert "budget of 1 model requests" in spent.json()["detail"]
        # A batch spends the same budget: none of its 25 rows is sent (sent, each would be a provider_error).
        rows = "\n".join(json.dumps({"custom_id": f"r{i}", "body": {**body, "seed": i}}) for i in range(25))
        batch = client.post("/llm/batches", content=rows, headers={"content-type": "application/jsonl"})
        assert batch.status_code == 202 and batch.json()["provider_batches"] == []
        errors = [row["error"] for row in client.get(f"/llm/batches/{batch.json()['batch_id']}/results").json()]
        assert len(errors) == 25 and {e["code"] for e in errors} == {"budget_exceeded"}

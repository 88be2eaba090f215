"""The llm-gateway's HTTP API on answers that need no model: refusals, malformed batches, unknown batches."""
from __future__ import annotations

import json
import socket
import time

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION, ROLE_TOKENS
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


@pytest.fixture
def budgeted(tmp_path, redis_url, redis_prefix):
    """A gateway app whose callers may each send 2 model requests an hour, its provider a closed port; and its
    platform (the worker driving batches runs beside the routes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_max_attempts=1,
                        llm_chat_max_requests_per_hour=2, api_tokens=f"{API_TOKENS},svc:{ROLE_TOKENS['service']}:service",
                        redis_url=redis_url,
                        redis_prefix=redis_prefix, llm_batch_poll_s=0.05,
                        llm_providers=json.dumps({"local": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "models": ["m"]}}))
    platform = platform_for(settings)
    with TestClient(service_app("llm-gateway", platform), headers=AUTHORIZATION) as client:
        yield client, platform


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_each_caller_has_an_hourly_budget_its_batches_spend_too(budgeted):
    client, _ = budgeted
    for _ in range(2):
        assert client.post("/llm/chat", json=CHAT).json()["code"] == "provider_error"  # each spent a request
    spent = client.post("/llm/chat", json=CHAT)
    assert spent.status_code == 429 and spent.json()["code"] == "budget_exceeded"
    assert "'tests''s budget of 2 model requests is spent" in spent.json()["detail"]
    assert 1 <= int(spent.headers["retry-after"]) <= 3600  # when the hour's window renews
    # A batch spends the same budget: none of its 25 rows is sent (sent, each would be a provider_error).
    rows = "\n".join(json.dumps({"custom_id": f"r{i}", "body": {**CHAT, "seed": i}}) for i in range(25))
    batch = client.post("/llm/batches", content=rows, headers={"content-type": "application/jsonl"})
    assert batch.status_code == 202 and batch.json()["provider_batches"] == []
    errors = [row["error"] for row in client.get(f"/llm/batches/{batch.json()['batch_id']}/results").json()]
    assert len(errors) == 25 and {e["code"] for e in errors} == {"budget_exceeded"}
    # Another caller's budget is its own.
    other = client.post("/llm/chat", json=CHAT, headers={"Authorization": f"Bearer {ROLE_TOKENS['service']}"})
    assert other.json()["code"] == "provider_error"


def test_a_batch_row_sent_again_spends_its_creators_budget(budgeted):
    """The worker driving a batch resubmits a row that failed in a way a retry may fix: that sending spends the
    budget of the caller who sent the batch, as a chat call does."""
    from datetime import datetime, timezone

    from flawforge.proto.llm import (BATCH_QUEUE, BatchDriveRequested, BatchRecord, BatchRow, BatchRowState,
                                     CallError, ChatRequest)

    client, platform = budgeted
    now = datetime.now(timezone.utc)
    failed = CallError(code="provider_error", message="provider answered 503: overloaded")
    record = BatchRecord(batch_id="b1", created_by="tests", state="in_progress", created_at=now, updated_at=now,
                         rows=[BatchRowState(custom_id="r1", status="pending", attempts=1, error=failed)])
    platform.store.put("llm/batches/b1/record.json", record.model_dump_json().encode())
    platform.store.put("llm/batches/b1/rows.jsonl",
                       BatchRow(custom_id="r1", request=ChatRequest.model_validate(CHAT)).model_dump_json().encode())
    assert client.post("/llm/chat", json=CHAT).json()["code"] == "provider_error"  # 1 of the 2 requests
    platform.bus.publish(BATCH_QUEUE, BatchDriveRequested(batch_id="b1"))
    deadline = time.monotonic() + 30
    while (state := client.get("/llm/batches/b1").json())["state"] == "in_progress":
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    [row] = state["rows"]
    assert row["status"] == "failed" and row["error"]["message"].startswith("cannot reach provider 'local'")  # sent
    spent = client.post("/llm/chat", json=CHAT)  # the resubmission took the caller's second request
    assert spent.status_code == 429 and spent.json()["code"] == "budget_exceeded"

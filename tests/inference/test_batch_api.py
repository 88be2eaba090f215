"""The OpenAI Batch API on the real model: files, statuses, output and error files, cancel, expiry,
resuming and restarts."""
from __future__ import annotations

import json
import time

import pytest

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore, run_batch
from flawforge.proto.inference import BatchRequested, BatchStatus

pytestmark = pytest.mark.model

FINAL = {"completed", "failed", "cancelled", "expired"}


def chat_line(custom_id: str, model: str, content: str = "Say hi.", **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 5,
                     "temperature": 0, **body}}


def upload(client, lines: list) -> str:
    data = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()
    response = client.post("/v1/files", files={"file": ("input.jsonl", data)}, data={"purpose": "batch"})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def create_batch(client, file_id: str) -> dict:
    response = client.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                                "completion_window": "24h", "metadata": {"purpose": "test"}})
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(client, batch_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while (batch := client.get(f"/v1/batches/{batch_id}").json())["status"] not in FINAL:
        assert time.monotonic() < deadline, f"batch still {batch['status']}"
        time.sleep(0.1)
    return batch


def lines_of(client, file_id: str) -> list[dict]:
    response = client.get(f"/v1/files/{file_id}/content")
    assert response.status_code == 200
    return [json.loads(line) for line in response.text.splitlines()]


def executor(backend, calls: list | None = None):
    def execute(endpoint: str, body: dict) -> dict:
        if calls is not None:
            calls.append(body)
        return openai_api.execute(backend, endpoint, body, openai_api.RequestLimits(512, 8192))

    return execute


def test_a_batch_completes_while_bad_lines_and_failed_requests_go_to_the_error_file(make_client, lm):
    client = make_client()
    model = lm.name
    lines = [
        chat_line("ok-1", model),
        "{not json",
        {"custom_id": "no-method", "url": "/v1/chat/completions", "body": {}},
        chat_line("unknown-model", "gpt-4o"),
        chat_line("too-long", model, content="word " * 9000),
        chat_line("bad-schema", model, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "minProperties": "x"}}}),
        {**chat_line("wrong-url", model), "url": "/v1/completions"},
        chat_line("ok-1", model, content="again"),
        chat_line("bad-body", model, temperature=5),
        chat_line("ok-2", model, content="Count to three.", seed=3, temperature=1.0),
    ]
    batch = create_batch(client, upload(client, lines))
    assert batch["status"] == "validating" and batch["expires_at"] == batch["created_at"] + 24 * 3600
    batch = wait_for(client, batch["id"])
    assert batch["status"] == "completed", batch
    assert batch["request_counts"] == {"total": 10, "completed": 2, "failed": 8}
    assert batch["in_progress_at"] <= batch["finalizing_at"] <= batch["completed_at"]
    assert batch["metadata"] == {"purpose": "test"} and batch["model"] == model

    outputs = lines_of(client, batch["output_file_id"])
    assert [o["custom_id"] for o in outputs] == ["ok-1", "ok-2"]
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in outputs)
    usages = [o["response"]["body"]["usage"] for o in outputs]
    assert batch["usage"] == {"input_tokens": sum(u["prompt_tokens"] for u in usages),
                              "output_tokens": sum(u["completion_tokens"] for u in usages),
                              "total_tokens": sum(u["total_tokens"] for u in usages)}
    direct = client.post("/v1/chat/completions", json=chat_line("x", model)["body"]).json()
    assert outputs[0]["response"]["body"]["choices"][0]["message"] == direct["choices"][0]["message"]

    errors = {e["custom_id"] or "unparsable": e for e in lines_of(client, batch["error_file_id"])}
    line_codes = {cid: e["error"]["code"] for cid, e in errors.items() if e["error"]}
    assert line_codes == {"unparsable": "invalid_json", "no-method": "invalid_request",
                          "wrong-url": "mismatched_endpoint", "ok-1": "duplicate_custom_id"}
    assert "line 2 is not valid JSON" in errors["unparsable"]["error"]["message"]
    responses = {cid: (e["response"]["status_code"], e["response"]["body"]["error"]["code"])
                 for cid, e in errors.items() if e["response"]}
    assert responses == {"unknown-model": (404, "model_not_found"), "too-long": (400, "context_length_exceeded"),
                         "bad-schema": (400, "invalid_schema"), "bad-body": (400, "invalid_value")}
    assert errors["bad-body"]["response"]["body"]["error"]["param"] == "temperature"

    purposes = {f["id"]: f["purpose"] for f in client.get("/v1/files").json()["data"]}
    assert purposes[batch["output_file_id"]] == purposes[batch["error_file_id"]] == "batch_output"
    assert [b["id"] for b in client.get("/v1/batches").json()["data"]] == [batch["id"]]


def test_a_batch_line_is_bounded_by_its_creators_cap_not_only_the_servers(make_client, lm):
    client = make_client(inference_caller_request_tokens="tests:6,*:50")  # the server-wide maximum: 8,192
    batch = create_batch(client, upload(client, [chat_line("within", lm.name, max_tokens=4),
                                                 chat_line("over", lm.name, max_tokens=8)]))
    assert batch["created_by"] == "tests"
    batch = wait_for(client, batch["id"])
    assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert [line["custom_id"] for line in lines_of(client, batch["output_file_id"])] == ["within"]
    [over] = lines_of(client, batch["error_file_id"])
    error = over["response"]["body"]["error"]
    assert over["custom_id"] == "over" and over["response"]["status_code"] == 400
    assert error["code"] == "request_too_large" and "more than the 6 " in error["message"]


def test_a_batch_without_a_valid_line_fails_and_bad_creations_are_refused(make_client, lm):
    client = make_client()
    batch = wait_for(client, create_batch(client, upload(client, ["garbage", {"custom_id": "x"}]))["id"])
    assert batch["status"] == "failed" and batch["failed_at"] and batch["output_file_id"] is None
    assert [(e["code"], e["line"]) for e in batch["errors"]["data"]] == [
        ("empty_batch", None), ("invalid_json", 1), ("invalid_request", 2)]

    missing = client.post("/v1/batches", json={"input_file_id": "file-nope", "endpoint": "/v1/chat/completions",
                                               "completion_window": "24h"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "file_id"
    endpoint = client.post("/v1/batches", json={"input_file_id": "file-x", "endpoint": "/v1/embeddings",
                                                "completion_window": "24h"})
    assert endpoint.status_code == 400 and endpoint.json()["error"]["param"] == "endpoint"
    purpose = client.post("/v1/files", files={"file": ("a.jsonl", b"{}\n")}, data={"purpose": "fine-tune"})
    assert purpose.status_code == 400 and purpose.json()["error"]["param"] == "purpose"
    assert client.get("/v1/batches/batch_unknown").status_code == 404
    assert client.get("/v1/files/../../etc").status_code == 404


def test_cancel_before_and_during_a_run(make_client, backend, lm):
    from flawforge.services.inference_server.worker import make_batch_handler

    client = make_client(run_worker=False)
    batch = create_batch(client, upload(client, [chat_line(f"r{i}", lm.name) for i in range(3)]))
    cancelling = client.post(f"/v1/batches/{batch['id']}/cancel").json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"]
    make_batch_handler(client.platform)(BatchRequested(batch_id=batch["id"]))  # the worker picks it up
    cancelled = client.get(f"/v1/batches/{batch['id']}").json()
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"]
    assert cancelled["request_counts"] == {"total": 3, "completed": 0, "failed": 0}
    again = client.post(f"/v1/batches/{batch['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "batch_finished"

    # A cancel that arrives while the worker runs stops it after the request in flight.
    batches, files = BatchStore(client.platform.store), FileStore(client.platform.store)
    batch = create_batch(client, upload(client, [chat_line(f"r{i}", lm.name) for i in range(4)]))
    run = executor(backend)

    def execute_then_cancel(endpoint, body):
        result = run(endpoint, body)
        batches.request_cancel(batch["id"], int(time.time()))
        return result

    done = run_batch(batches, files, batch["id"], execute_then_cancel)
    assert done.status == BatchStatus.cancelled
    assert done.request_counts.completed == 1 and done.error_file_id is None
    assert [line["custom_id"] for line in lines_of(client, done.output_file_id)] == ["r0"]


def test_a_batch_past_its_window_expires_with_the_rest_in_the_error_file(make_client, backend, lm):
    client = make_client(run_worker=False)
    batches, files = BatchStore(client.platform.store), FileStore(client.platform.store)
    batch = create_batch(client, upload(client, [chat_line(f"r{i}", lm.name) for i in range(3)]))
    now = [time.time()]
    run = executor(backend)

    def execute_while_a_day_passes(endpoint, body):
        now[0] += 25 * 3600
        return run(endpoint, body)

    done = run_batch(batches, files, batch["id"], execute_while_a_day_passes, clock=lambda: now[0])
    assert done.status == BatchStatus.expired and done.expired_at >= done.expires_at
    assert [line["custom_id"] for line in lines_of(client, done.output_file_id)] == ["r0"]
    expired = lines_of(client, done.error_file_id)
    assert [(e["custom_id"], e["error"]["code"]) for e in expired] == [("r1", "batch_expired"),
                                                                       ("r2", "batch_expired")]


def test_a_restarted_worker_resumes_after_the_saved_parts(make_client, backend, lm):
    client = make_client(run_worker=False)
    batches, files = BatchStore(client.platform.store), FileStore(client.platform.store)
    batch = create_batch(client, upload(client, [chat_line(f"r{i}", lm.name) for i in range(10)]))
    calls: list = []
    first = run_batch(batches, files, batch["id"], executor(backend, calls))
    assert first.status == BatchStatus.completed and len(calls) == 10
    # The worker died after saving every part but before the batch was finalised.
    stale = first.model_copy(update={"status": BatchStatus.in_progress, "output_file_id": None,
                                     "finalizing_at": None, "completed_at": None})
    batches.save(stale)
    calls.clear()
    resumed = run_batch(batches, files, batch["id"], executor(backend, calls))
    assert calls == [] and resumed.status == BatchStatus.completed
    assert lines_of(client, resumed.output_file_id) == lines_of(client, first.output_file_id)


@pytest.mark.rabbitmq
def test_files_and_batches_survive_a_restart_on_rabbitmq(make_client, lm, amqp_url, tmp_path):
    from flawforge.proto.inference import BATCH_QUEUE

    before = make_client(run_worker=False, bus="rabbitmq", amqp_url=amqp_url, blob_dir=tmp_path)
    before.platform.bus.declare(BATCH_QUEUE)
    before.platform.bus.purge(BATCH_QUEUE)
    file_id = upload(before, [chat_line("r0", lm.name), chat_line("r1", lm.name)])
    batch = create_batch(before, file_id)  # nothing runs it: `before` has no worker

    after = make_client(bus="rabbitmq", amqp_url=amqp_url, blob_dir=tmp_path)
    assert after.get(f"/v1/files/{file_id}").json()["purpose"] == "batch"
    done = wait_for(after, batch["id"])
    assert done["status"] == "completed" and done["request_counts"]["completed"] == 2

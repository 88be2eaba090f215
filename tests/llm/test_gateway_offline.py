"""Gateway behaviour that must hold before any model is reached: replay, log failures, routing, budgets."""
from __future__ import annotations

import socket
import time

import pytest

from flawforge.blobstore import LocalBlobStore
from flawforge.llm.config import parse_providers
from flawforge.llm.errors import BudgetExceeded, CallCancelled, CallLogUnavailable, ProviderError, ReplayMiss, UnknownModel
from flawforge.llm.gateway import Gateway
from flawforge.llm.limits import Budget, CallScope
from flawforge.proto.llm import BatchRow, ChatRequest


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: any request to it fails at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_gateway(store, port: int, **kwargs) -> Gateway:
    providers = parse_providers(f'{{"local": {{"base_url": "http://127.0.0.1:{port}/v1", "models": ["m"]}}}}')
    return Gateway(store, providers, max_attempts=2, **kwargs)


def request(content: str = "hi", model: str = "m") -> ChatRequest:
    return ChatRequest(model=model, messages=[{"role": "user", "content": content}], max_tokens=4)


def test_replay_miss_is_an_error_and_makes_no_call(tmp_path, closed_port):
    store = LocalBlobStore(tmp_path)
    gateway = make_gateway(store, closed_port, replay=True)
    with pytest.raises(ReplayMiss, match="replay makes no model calls"):
        gateway.chat(request())
    [row] = gateway.batches.run([BatchRow(custom_id="r1", request=request())])
    assert row.error.code == "replay_miss"
    assert list(store.list("llm/log/")) == []


def test_unreachable_provider_is_retried_then_reported_and_every_attempt_logged(tmp_path, closed_port):
    import json

    store = LocalBlobStore(tmp_path)
    with pytest.raises(ProviderError, match=f"cannot reach provider 'local' at http://127.0.0.1:{closed_port}/v1"):
        make_gateway(store, closed_port).chat(request())
    logged = sorted(store.list("llm/log/"))
    assert [k.rsplit(".", 2)[-2] for k in logged] == ["request", "response"]  # one exchange, logged before and after
    response = json.loads(store.get(logged[1]))
    assert response["error"].startswith("provider_error: cannot reach provider 'local'")
    assert [a["url"] for a in response["attempts"]] == [f"http://127.0.0.1:{closed_port}/v1/"] * 2  # both attempts
    assert all("Connection error" in a["error"] for a in response["attempts"])


def test_call_fails_when_the_log_cannot_be_written(tmp_path, closed_port):
    store = LocalBlobStore(tmp_path)
    (tmp_path / "llm").write_text("a file where the log folder should be")
    with pytest.raises(CallLogUnavailable, match="cannot write the call log"):
        make_gateway(store, closed_port).chat(request())


def test_unknown_model_names_the_known_ones(tmp_path, closed_port):
    gateway = make_gateway(LocalBlobStore(tmp_path), closed_port)
    with pytest.raises(UnknownModel, match=r"unknown model 'gpt-9'; known: local/m"):
        gateway.chat(request(model="gpt-9"))
    with pytest.raises(UnknownModel):
        gateway.chat(request(model="nope/m"))


def test_spent_budget_and_cancellation_stop_calls_before_the_network(tmp_path, closed_port):
    store = LocalBlobStore(tmp_path)
    gateway = make_gateway(store, closed_port)
    with pytest.raises(BudgetExceeded, match="0 model requests"):
        gateway.chat(request(), CallScope(job_id="j", budget=Budget(max_requests=0)))
    with pytest.raises(CallCancelled, match="job j was cancelled"):
        gateway.chat(request(), CallScope(job_id="j", is_cancelled=lambda: True))
    assert list(store.list("llm/log/")) == []


def test_replay_refuses_to_poll_a_batch_still_running_at_its_provider(tmp_path, closed_port):
    from datetime import datetime, timezone

    from flawforge.proto.llm import BatchRecord, BatchRowState, ProviderBatch

    store = LocalBlobStore(tmp_path)
    now = datetime.now(timezone.utc)
    record = BatchRecord(batch_id="b0", state="in_progress", created_at=now, updated_at=now,
                         rows=[BatchRowState(custom_id="r1", status="submitted", attempts=1, provider_batch_id="p1")],
                         provider_batches=[ProviderBatch(id="p1", provider="local", status="in_progress",
                                                         input_file_id="f1", custom_ids=["r1"])])
    store.put("llm/batches/b0/record.json", record.model_dump_json().encode())
    with pytest.raises(ReplayMiss, match="batch b0 is still running"):
        make_gateway(store, closed_port, replay=True).batches.advance("b0")
    assert list(store.list("llm/log/")) == []


def test_a_stopped_retry_keeps_the_reason_the_row_failed_of(tmp_path, closed_port):
    from datetime import datetime, timezone

    from flawforge.proto.llm import BatchRecord, BatchRowState, CallError

    store = LocalBlobStore(tmp_path)
    now = datetime.now(timezone.utc)
    earlier = CallError(code="provider_error", message="provider answered 503: overloaded")
    record = BatchRecord(batch_id="b1", state="in_progress", created_at=now, updated_at=now,
                         rows=[BatchRowState(custom_id="r1", status="pending", attempts=1, error=earlier)])
    store.put("llm/batches/b1/record.json", record.model_dump_json().encode())
    store.put("llm/batches/b1/rows.jsonl", BatchRow(custom_id="r1", request=request()).model_dump_json().encode())
    [row] = make_gateway(store, closed_port).batches.advance("b1", CallScope(budget=Budget(max_requests=0))).rows
    assert row.status == "failed" and row.error.code == "provider_error"
    assert row.error.message.startswith("provider answered 503: overloaded (not retried: the job's budget")


def test_batch_results_keep_the_file_order_rejected_rows_included(tmp_path, closed_port):
    from flawforge.llm.batches import parse_batch_file

    good = '{"custom_id": "%s", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}'
    rows, rejected = parse_batch_file("\n".join([good % "a", "{broken", good % "b", '{"custom_id": "c"}']).encode())
    gateway = make_gateway(LocalBlobStore(tmp_path), closed_port, replay=True)
    record = gateway.batches.submit(rows, rejected=rejected)
    results = gateway.batches.results(record.batch_id)
    assert [r.custom_id for r in results] == ["a", "line-2", "b", "c"]
    assert [r.error.code for r in results] == ["replay_miss", "malformed_batch_line", "replay_miss",
                                               "malformed_batch_line"]


def test_the_cache_keeps_replies_redacted(tmp_path):
    from flawforge.llm.cache import ResponseCache
    from flawforge.proto.llm import ChatResult

    cache = ResponseCache(LocalBlobStore(tmp_path))
    echoed = ChatResult(fingerprint="f" * 64, provider="p", model="m",
                        content="your key is KEY-0123456789 and sk-abcdefghijklmnopqrstu")
    stored = cache.put(echoed, ["KEY-0123456789"])
    assert stored.content == "your key is [REDACTED] and [REDACTED]" == cache.get("f" * 64).content
    assert b"KEY-0123456789" not in (tmp_path / ResponseCache.key("f" * 64)).read_bytes()


def test_a_callers_budget_is_shared_by_every_replica_and_renews_with_its_window(redis_url, redis_prefix):
    from flawforge.llm.limits import CallerBudget, SharedCounters

    def replica() -> CallerBudget:  # each replica holds its own connection to the same Redis
        return CallerBudget(SharedCounters(redis_url, redis_prefix), "alice", max_requests=1, max_tokens=10,
                            window_s=2)

    first, second = replica(), replica()
    first.spend_request()
    with pytest.raises(BudgetExceeded, match=r"'alice''s budget of 1 model requests is spent for this window; "
                                             r"it renews in [0-2] s") as refused:
        second.spend_request()
    assert 0 < refused.value.retry_after_s <= 2
    CallerBudget(SharedCounters(redis_url, redis_prefix), "bob", 1, None, window_s=2).spend_request()  # bob's own
    time.sleep(refused.value.retry_after_s + 0.05)
    second.spend_request()  # a new window
    second.spend_tokens(10)
    with pytest.raises(BudgetExceeded, match=r"budget of 10 tokens is spent \(10 used\)"):
        first.spend_request()

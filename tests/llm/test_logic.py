"""Pure parts of the llm-gateway: fingerprints, redaction, batch files, structured replies, limits, config."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from flawforge.errors import ConfigError
from flawforge.llm.batches import parse_batch_file
from flawforge.llm.cache import fingerprint
from flawforge.llm.calllog import REDACTED, redact
from flawforge.llm.config import load_providers, parse_providers
from flawforge.llm.errors import (BudgetExceeded, CallCancelled, ContextLengthExceeded, InvalidModelOutput,
                                  InvalidRequest, ProviderError, UnknownModel)
from flawforge.llm.limits import Budget, CallScope
from flawforge.llm.openai_compat import error_from_response
from flawforge.llm.structured import extract_json, parse_reply, repair_request
from flawforge.proto.llm import ChatRequest


def request(**changes) -> ChatRequest:
    base = {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 8}
    return ChatRequest.model_validate({**base, **changes})


def test_fingerprint_covers_model_messages_parameters_and_schema():
    fp = fingerprint(request())
    assert fp == fingerprint(request()) and len(fp) == 64
    assert fp != fingerprint(request(model="other"))
    assert fp != fingerprint(request(messages=[{"role": "user", "content": "What is 2+3?"}]))
    assert fp != fingerprint(request(max_tokens=9))
    assert fp != fingerprint(request(temperature=0.5))
    assert fp != fingerprint(request(response_schema={"type": "object"}))


def test_fingerprint_ignores_key_order_of_the_schema():
    a = request(response_schema={"type": "object", "properties": {"x": {"type": "integer"}}})
    b = request(response_schema={"properties": {"x": {"type": "integer"}}, "type": "object"})
    assert fingerprint(a) == fingerprint(b)


def test_redact_removes_headers_known_secrets_and_credential_shapes():
    record = {"headers": {"Authorization": "Bearer abcdefghijkl", "Content-Type": "application/json"},
              "body": {"messages": [{"content": "my key is sk-proj-ABCDEFGHIJKLMNOPQRST and hunter2secret"}],
                       "api_key": "plain"}}
    cleaned = redact(record, ["hunter2secret"])
    text = json.dumps(cleaned)
    assert cleaned["headers"]["Authorization"] == REDACTED
    assert cleaned["headers"]["Content-Type"] == "application/json"
    assert cleaned["body"]["api_key"] == REDACTED
    for secret in ("abcdefghijkl", "sk-proj-ABCDEFGHIJKLMNOPQRST", "hunter2secret", "plain"):
        assert secret not in text


def test_batch_file_malformed_lines_fail_alone_with_their_line_number():
    good = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "custom_id": "b", "body": {"model": "m"}}),
        json.dumps({**good, "custom_id": "a"}),
        json.dumps({k: v for k, v in good.items() if k != "custom_id"}),
        json.dumps({**good, "custom_id": "c", "url": "/v1/embeddings"}),
        "",
        json.dumps({**good, "custom_id": "d"}),
    ]
    rows, bad = parse_batch_file("\n".join(lines).encode())
    assert [r.custom_id for r in rows] == ["a", "d"]
    errors = {row.custom_id: row.error.message for row in bad}
    assert all(row.status == "failed" and row.error.code == "malformed_batch_line" for row in bad)
    assert errors["line-2"].startswith("line 2: not valid JSON")
    assert errors["b"] == "line 3: body.messages: Field required"
    assert "line 4" in errors["line-4"] and "used twice" in errors["line-4"]
    assert errors["line-5"] == "line 5: custom_id is missing"
    assert "line 6" in errors["c"] and "/v1/embeddings" in errors["c"]


class Point(BaseModel):
    x: int
    y: int


@pytest.mark.parametrize("text", ['{"x": 1, "y": 2}', 'Sure!\n```json\n{"x": 1, "y": 2}\n```',
                                  'Here it is: {"x": 1, "y": 2} hope it helps'])
def test_parse_reply_finds_the_json(text):
    assert parse_reply(text, Point) == Point(x=1, y=2)


def test_parse_reply_says_what_is_wrong():
    with pytest.raises(InvalidModelOutput, match="not valid JSON"):
        parse_reply('{"x": 1, "y": ', Point)
    with pytest.raises(InvalidModelOutput, match="empty"):
        extract_json("   ")
    with pytest.raises(InvalidModelOutput, match=r"does not match Point: y: Field required"):
        parse_reply('{"x": 1}', Point)


def test_repair_request_appends_the_bad_reply_and_the_problem():
    original = request()
    repaired = repair_request(original, "{oops", "the reply is not valid JSON")
    assert repaired.messages[:1] == original.messages
    assert [m.role for m in repaired.messages[1:]] == ["assistant", "user"]
    assert repaired.messages[1].content == "{oops"
    assert "not valid JSON" in repaired.messages[2].content
    assert fingerprint(repaired) != fingerprint(original)


@pytest.mark.parametrize("status,body,expected", [
    (400, {"error": {"message": "This model's maximum context length is 8192 tokens", "code": None}},
     ContextLengthExceeded),
    (400, {"error": {"message": "too long", "code": "context_length_exceeded"}}, ContextLengthExceeded),
    (404, {"error": {"message": "The model 'x' does not exist", "code": "model_not_found"}}, UnknownModel),
    (422, {"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]}, InvalidRequest),
    (429, {"error": {"message": "slow down"}}, ProviderError),
    (503, "upstream down", ProviderError),
])
def test_error_from_response_names_the_problem(status, body, expected):
    error = error_from_response(status, body)
    assert type(error) is expected
    assert str(status) in str(error)
    assert error.retryable == (status in (429, 503))
    assert str(error_from_response(status, body, provider="remote")).startswith(f"provider 'remote' answered {status}")


def test_providers_from_yaml_json_and_default(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text("openai:\n  base_url: https://api.example.invalid/v1\n  api_key_env: OPENAI_API_KEY\n"
                    "  models: [gpt-4.1]\n  requests_per_minute: 60\n")
    providers = load_providers(str(path))
    assert providers["openai"].models == ["gpt-4.1"] and providers["openai"].name == "openai"
    assert load_providers('{"vllm": {"base_url": "http://127.0.0.1:8000/v1"}}')["vllm"].models == []
    assert load_providers("")["local"].base_url == "http://127.0.0.1:8005/v1"
    with pytest.raises(ConfigError, match=r"providers.bad.max_concurrency"):
        parse_providers('{"bad": {"base_url": "http://x/v1", "max_concurrency": 0}}')
    hosted = parse_providers('{"claude": {"litellm_provider": "anthropic", "models": ["claude-sonnet-4-5"]}}')
    assert hosted["claude"].base_url is None and not hosted["claude"].openai_compatible
    with pytest.raises(ConfigError, match=r"providers.gemini: .*name the models served: only an OpenAI-compatible"):
        parse_providers('{"gemini": {"litellm_provider": "gemini"}}')
    with pytest.raises(ConfigError, match="does not exist"):
        load_providers(str(tmp_path / "missing.yaml"))


def test_budget_refuses_past_its_limits():
    budget = Budget(max_requests=2)
    budget.spend_request()
    budget.spend_request()
    with pytest.raises(BudgetExceeded, match="2 model requests"):
        budget.spend_request()
    tokens = Budget(max_tokens=100)
    tokens.spend_request()
    tokens.spend_tokens(100)
    with pytest.raises(BudgetExceeded, match="100 tokens"):
        tokens.spend_request()


def test_scope_check_raises_once_cancelled():
    cancelled = [False]
    scope = CallScope(job_id="j1", is_cancelled=lambda: cancelled[0])
    scope.check()
    cancelled[0] = True
    with pytest.raises(CallCancelled, match="j1"):
        scope.check()


def test_settling_a_finished_provider_batch_resubmits_only_transient_failures(tmp_path):
    from flawforge.blobstore import LocalBlobStore
    from flawforge.llm.gateway import Gateway
    from flawforge.proto.llm import BatchRecord, BatchRowState, ProviderBatch

    store = LocalBlobStore(tmp_path)
    gateway = Gateway(store, parse_providers('{"p": {"base_url": "http://127.0.0.1:9/v1", "models": ["m"]}}'),
                      max_attempts=2)
    ids = ["ok", "server-error", "never-ran", "too-long", "last-try"]
    rows = [BatchRowState(custom_id=c, fingerprint=f"{i:064x}", status="submitted", attempts=2 if c == "last-try" else 1,
                          provider_batch_id="b1") for i, c in enumerate(ids)]
    record = BatchRecord(batch_id="x1", state="in_progress", created_at="2026-01-01T00:00:00Z",
                         updated_at="2026-01-01T00:00:00Z", rows=rows)
    batch = ProviderBatch(id="b1", provider="p", status="expired", input_file_id="f1", custom_ids=ids)
    completion = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "Paris"},
                                             "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
    server_error = {"status_code": 500, "body": {"error": {"message": "worker crashed", "code": "server_error"}}}
    lines = {
        "ok": {"custom_id": "ok", "response": {"status_code": 200, "body": completion}},
        "server-error": {"custom_id": "server-error", "response": server_error},
        "too-long": {"custom_id": "too-long", "response": {"status_code": 400, "body": {"error": {
            "message": "maximum context length is 8192 tokens", "code": "context_length_exceeded"}}}},
        "last-try": {"custom_id": "last-try", "response": server_error},
    }
    budget = Budget()
    gateway.batches.settle(record, batch, lines, {"status": "expired"}, CallScope(budget=budget))

    state = {row.custom_id: (row.status, row.error.code if row.error else None) for row in record.rows}
    assert state == {"ok": ("succeeded", None), "server-error": ("pending", "provider_error"),
                     "never-ran": ("pending", "provider_error"), "too-long": ("failed", "context_length_exceeded"),
                     "last-try": ("failed", "provider_error")}
    assert "expired before this request ran" in record.rows[2].error.message
    assert gateway.cache.get(rows[0].fingerprint).content == "Paris" and budget.tokens == 6


def test_schema_is_stated_with_the_first_instructions_or_sent_as_response_format(tmp_path):
    from flawforge.blobstore import LocalBlobStore
    from flawforge.llm.gateway import Gateway

    providers = parse_providers('{"plain": {"base_url": "http://127.0.0.1:9/v1"}, '
                                '"vllm": {"base_url": "http://127.0.0.1:9/v1", "json_schema": true}}')
    gateway = Gateway(LocalBlobStore(tmp_path), providers)
    schema = Point.model_json_schema()
    with_system = request(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go"}],
                          response_schema=schema)
    body = gateway.providers["plain"].chat_body(with_system, "m")
    assert [m["role"] for m in body["messages"]] == ["system", "user"] and body["messages"][-1]["content"] == "Go"
    assert body["messages"][0]["content"].startswith("Be brief.") and '"title": "Point"' in body["messages"][0]["content"]
    assert with_system.messages[0].content == "Be brief."  # the request itself is left as it was
    body = gateway.providers["plain"].chat_body(request(response_schema=schema), "m")
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    body = gateway.providers["vllm"].chat_body(request(response_schema=schema), "m")
    assert body["response_format"]["json_schema"]["schema"] == schema and len(body["messages"]) == 1
    assert body["model"] == "m" and body["max_tokens"] == 8


def test_a_loop_guarded_provider_decodes_with_the_guard_and_others_are_asked_again_with_a_penalty(tmp_path):
    """A provider (real HTTP, scripted) that loops until max_tokens unless a frequency penalty or the loop guard
    is set."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from flawforge.blobstore import LocalBlobStore
    from flawforge.llm.gateway import LOOP_GUARD, LOOP_PENALTY, Gateway, loop_guard

    bodies = []

    class Looping(BaseHTTPRequestHandler):
        def answer(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # the model list
            self.answer({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            penalised = body.get("frequency_penalty") is not None or body.get("dry_multiplier") is not None
            content, finish = ('{"x": 1, "y": 2}', "stop") if penalised else ('{"x": 11111111111111', "length")
            self.answer({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                      "finish_reason": finish}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Looping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        enforcing = Gateway(LocalBlobStore(tmp_path / "a"), parse_providers(json.dumps(
            {"p": {"base_url": base, "json_schema": True}})), max_repairs=0)
        (outcome,) = enforcing.structured_many([request(model="m")], Point)
        assert outcome.value == Point(x=1, y=2) and len(outcome.replies) == 2
        assert "frequency_penalty" not in bodies[0] and bodies[1]["frequency_penalty"] == 0.5
        assert bodies[1] == {**bodies[0], **LOOP_PENALTY}
        bodies.clear()
        guarded = Gateway(LocalBlobStore(tmp_path / "g"), parse_providers(json.dumps(
            {"p": {"base_url": base, "json_schema": True, "loop_guard": True}})), max_repairs=0)
        outcome, _ = guarded.structured_many([request(model="m"), request(model="m", dry_allowed_length=4)], Point)
        assert outcome.value == Point(x=1, y=2) and len(outcome.replies) == 1 and not outcome.loop_retried
        first, own = sorted(bodies, key=lambda body: body["dry_allowed_length"], reverse=True)
        # The closing reserve is half of this 8-token budget: the whole budget would close every string at its start.
        assert {k: first[k] for k in LOOP_GUARD} == {**LOOP_GUARD, "json_closing_reserve": 4}
        assert loop_guard(request(max_tokens=1000))["json_closing_reserve"] == LOOP_GUARD["json_closing_reserve"] > 0
        assert own["dry_allowed_length"] == 4  # a field the caller set is kept
        bodies.clear()
        plain = Gateway(LocalBlobStore(tmp_path / "b"), parse_providers(json.dumps({"p": {"base_url": base}})),
                        max_repairs=0)
        (outcome,) = plain.structured_many([request(model="m")], Point)
        assert outcome.value is None and "cut at max_tokens" in str(outcome.error) and len(bodies) == 1
    finally:
        server.shutdown()

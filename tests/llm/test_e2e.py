"""Gateway to the real inference-server (SmolLM2-135M-Instruct on CPU) over HTTP.

Replies are kept a few tokens long: the model is slow on CPU and what is checked is the
gateway's handling of real replies, not their quality.
"""
from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from flawforge.blobstore import LocalBlobStore
from flawforge.llm.config import parse_providers
from flawforge.llm.errors import InvalidModelOutput, ReplayMiss
from flawforge.llm.gateway import Gateway
from flawforge.proto.llm import ChatRequest

pytestmark = pytest.mark.model

SECRET = "sk-test-SECRETSECRETSECRET1234"


def ask(model: str, content: str, max_tokens: int = 4) -> ChatRequest:
    return ChatRequest(model=model, messages=[{"role": "user", "content": content}], max_tokens=max_tokens)


def logs(store: LocalBlobStore) -> list[str]:
    return list(store.list("llm/log/"))


def test_chat_is_logged_without_secrets_cached_and_replayed(inference_server, providers_json, tmp_path):
    store = LocalBlobStore(tmp_path)
    model = inference_server["model"]
    gateway = Gateway(store, parse_providers(providers_json))
    first = gateway.chat(ask(model, "What is 2+2?", max_tokens=6))
    assert not first.cached and first.model == model and first.provider == "local"
    assert first.content.strip() and 0 < first.usage.completion_tokens <= 6
    assert first.finish_reason in ("stop", "length")

    # The chat call: a request record before it was sent and a response record, with each attempt, after.
    records = {key.rsplit(".", 2)[-2]: json.loads(store.get(key)) for key in logs(store)}
    assert sorted(records) == ["request", "response"]
    assert records["request"]["url"] == inference_server["base_url"] and records["request"]["provider"] == "local"
    assert records["request"]["body"]["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert records["response"]["body"]["choices"][0]["message"]["content"] == first.content
    assert [attempt["model"] for attempt in records["response"]["attempts"]] == [f"local/{model}"]
    assert all(SECRET not in store.get(key).decode() for key in logs(store))

    again = gateway.chat(ask(model, "What is 2+2?", max_tokens=6))
    assert again.cached and again.content == first.content
    assert len(logs(store)) == 2  # served from the cache: no model call

    replay = Gateway(store, parse_providers(providers_json), replay=True)
    assert replay.chat(ask(model, "What is 2+2?", max_tokens=6)).content == first.content
    with pytest.raises(ReplayMiss):
        replay.chat(ask(model, "What is 3+3?", max_tokens=6))
    assert len(logs(store)) == 2



def test_tool_calls_go_through_the_inference_server_and_their_results_back(inference_server, providers_json,
                                                                            tmp_path):
    """A named tool_choice: the real server's call (grammar-constrained to the function's parameters) comes back
    parsed; sent back with its result as a tool turn, the conversation goes on (the model answers or calls again)."""
    store = LocalBlobStore(tmp_path)
    gateway = Gateway(store, parse_providers(providers_json))
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False}}}
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = gateway.chat(ChatRequest(model=inference_server["model"], messages=question, tools=[weather],
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                     max_tokens=30))
    [call] = named.tool_calls
    assert named.finish_reason == "tool_calls" and call.function.name == "get_weather" and call.id
    assert set(json.loads(call.function.arguments)) == {"city"}
    follow = gateway.chat(ChatRequest(model=inference_server["model"], tools=[weather], max_tokens=20, messages=[
        *question, {"role": "assistant", "content": named.content, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'}]))
    assert follow.content or follow.tool_calls
    sent = [json.loads(store.get(k))["body"] for k in sorted(logs(store)) if k.endswith(".request.json")]
    assert [body["messages"][-1]["role"] for body in sent] == ["user", "tool"]
    assert all(body["tools"][0]["function"]["name"] == "get_weather" for body in sent)

def wait_until_settled(client: TestClient, batch_id: str, timeout_s: float = 150) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = client.get(f"/llm/batches/{batch_id}").json()
        if record["state"] != "in_progress":
            return record
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} still in progress: {record}")


def test_batch_api_answers_good_rows_and_names_each_bad_one(inference_server, providers_json, tmp_path):
    from auth_support import API_TOKENS, AUTHORIZATION
    from flawforge.assembly import platform_for, service_app
    from flawforge.settings import Settings

    model = inference_server["model"]
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path), llm_providers=providers_json,
                        llm_batch_poll_s=0.2, api_tokens=API_TOKENS)

    def line(custom_id: str, content: str, model_name: str = model) -> str:
        return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                           "body": {"model": model_name, "messages": [{"role": "user", "content": content}],
                                    "max_tokens": 3}})

    good = [line("paris", "The capital of France is"), line("two", "One plus one is"), line("sky", "The sky is")]
    bad = [line("unknown", "Hello", "gpt-9"), line("too-long", "hello " * 9000), '{"custom_id": "broken", "body": ']
    batch_file = "\n".join(good[:2] + bad[:1] + good[2:] + bad[1:]).encode()

    with TestClient(service_app("llm-gateway", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        submitted = client.post("/llm/batches", content=batch_file)
        assert submitted.status_code == 202, submitted.text
        assert submitted.json()["state"] == "in_progress"
        record = wait_until_settled(client, submitted.json()["batch_id"])
        assert record["state"] == "completed"
        assert len(record["provider_batches"]) == 1  # one file to the provider, with the four sendable rows
        results = {r["custom_id"]: r for r in client.get(f"/llm/batches/{record['batch_id']}/results").json()}

        for custom_id in ("paris", "two", "sky"):
            assert results[custom_id]["error"] is None, results[custom_id]
            assert results[custom_id]["result"]["content"] and not results[custom_id]["result"]["cached"]
        assert results["unknown"]["error"]["code"] == "unknown_model"
        assert "gpt-9" in results["unknown"]["error"]["message"]
        assert results["too-long"]["error"]["code"] == "context_length_exceeded"
        assert "maximum context length" in results["too-long"]["error"]["message"]
        assert results["line-6"]["error"]["code"] == "malformed_batch_line"
        assert results["line-6"]["error"]["message"].startswith("line 6: not valid JSON")

        # The same file again is the same batch; the good rows under new ids cost no model call.
        assert client.post("/llm/batches", content=batch_file).json()["batch_id"] == record["batch_id"]
        rerun = client.post("/llm/batches", content="\n".join(g.replace('"custom_id": "', '"custom_id": "re-')
                                                               for g in good).encode()).json()
        assert rerun["state"] == "completed" and rerun["provider_batches"] == []
        rerun_results = client.get(f"/llm/batches/{rerun['batch_id']}/results").json()
        assert [r["result"]["content"] for r in rerun_results] == [results[c]["result"]["content"]
                                                                    for c in ("paris", "two", "sky")]
        assert all(r["result"]["cached"] for r in rerun_results)

    store = LocalBlobStore(tmp_path)
    assert all(SECRET not in store.get(key).decode() for key in logs(store))


class Person(BaseModel):
    name: str
    age: int


def test_structured_output_validates_repairs_and_reports_invalid_json(inference_server, providers_json, tmp_path):
    store = LocalBlobStore(tmp_path)
    model = inference_server["model"]
    gateway = Gateway(store, parse_providers(providers_json), max_attempts=2)
    shown = [{"role": "system", "content": "Turn the text into JSON."},
             {"role": "user", "content": "Bob is 3 years old."},
             {"role": "assistant", "content": '{"name": "Bob", "age": 3}'},
             {"role": "user", "content": "Ann is 5 years old."}]
    roomy = ChatRequest(model=model, messages=shown, max_tokens=16)
    cramped = ChatRequest(model=model, messages=shown, max_tokens=3)  # cannot hold a whole object
    outcomes = gateway.structured_many([roomy, cramped], Person, mode="batch", max_repairs=1)

    roomy_outcome, cramped_outcome = outcomes
    if roomy_outcome.value is not None:
        assert isinstance(roomy_outcome.value, Person) and len(roomy_outcome.replies) in (1, 2)
    else:  # the small model may fail twice; then the error says why
        assert isinstance(roomy_outcome.error, InvalidModelOutput) and len(roomy_outcome.replies) == 2
    assert isinstance(cramped_outcome.error, InvalidModelOutput)
    assert "(after 1 repairs)" in str(cramped_outcome.error)
    assert len(cramped_outcome.replies) == 2  # the reply, then one repair
    assert all(r.usage.completion_tokens <= 3 for r in cramped_outcome.replies)

    # Parsing is not part of the fingerprint: the same calls again come from the cache.
    again = gateway.structured(cramped, Person, max_repairs=1)
    assert [r.content for r in again.replies] == [r.content for r in cramped_outcome.replies]
    assert all(r.cached for r in again.replies)


def test_cancelled_job_stops_its_batch_and_keeps_what_finished(inference_server, providers_json, tmp_path):
    from flawforge.llm.errors import CallCancelled
    from flawforge.llm.limits import CallScope
    from flawforge.proto.llm import BatchRow

    gateway = Gateway(LocalBlobStore(tmp_path), parse_providers(providers_json), batch_poll_s=0.1)
    model = inference_server["model"]
    rows = [BatchRow(custom_id=f"r{i}", request=ask(model, f"Count to {i}:", max_tokens=2)) for i in range(4)]
    record = gateway.batches.submit(rows)
    [provider_batch] = record.provider_batches
    cancelled = CallScope(job_id="j1", is_cancelled=lambda: True)
    with pytest.raises(CallCancelled, match="job j1 was cancelled"):
        gateway.batches.wait(record.batch_id, cancelled)

    record = gateway.batches.get(record.batch_id)
    assert record.state == "cancelled"
    assert all(row.status == "succeeded" or row.error.code == "cancelled" for row in record.rows)
    # The provider stops between rows; wait for it so no model work outlives the test.
    deadline = time.monotonic() + 120
    while (status := gateway.providers["local"].get_batch(provider_batch.id, CallScope())["status"]) == "cancelling":
        assert time.monotonic() < deadline, "the provider batch stayed cancelling"
        time.sleep(0.2)
    assert status in ("cancelled", "completed")  # completed only if it outran the cancel
    results = gateway.batches.results(record.batch_id)
    assert all((r.result is not None) == (row.status == "succeeded") for r, row in zip(results, record.rows))


class Record(BaseModel):
    model_config = {"extra": "forbid"}
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    city: str = Field(max_length=24)


@pytest.fixture
def enforcing_providers(providers_json) -> str:
    """The inference-server as a provider that enforces response_format json_schema (the default's setting)."""
    providers = json.loads(providers_json)
    providers["local"]["json_schema"] = True
    return json.dumps(providers)


def test_an_enforcing_provider_gets_the_schema_and_no_repairs_a_cut_reply_one_penalised_retry(inference_server, enforcing_providers, tmp_path):
    gateway = Gateway(LocalBlobStore(tmp_path), parse_providers(enforcing_providers))
    model = inference_server["model"]
    question = [{"role": "user", "content": "Ann, 5, lives in Oslo. Give her record."}]
    # 96 tokens hold any reply of ASCII characters: both strings are at most 24 characters.
    roomy, cramped = gateway.structured_many([ChatRequest(model=model, messages=question, max_tokens=96),
                                              ChatRequest(model=model, messages=question, max_tokens=3)], Record)
    assert isinstance(roomy.value, Record) and len(roomy.replies) == 1, [r.content for r in roomy.replies]
    # No repair (it would be cut too): the cut reply is asked for once more, with a frequency penalty, and cut again.
    assert isinstance(cramped.error, InvalidModelOutput) and len(cramped.replies) == 2
    assert all(r.finish_reason == "length" for r in cramped.replies) and "cut at max_tokens" in str(cramped.error)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_schema_constrained_replies_parse_on_every_prompt(inference_server, enforcing_providers, tmp_path):
    """40 sampled prompts through the gateway, 8 at a time: every reply parses at the first try."""
    gateway = Gateway(LocalBlobStore(tmp_path), parse_providers(enforcing_providers))
    names, cities = ["Ann", "Bo", "Chen", "Dara", "Eli"], ["Oslo", "Lima", "Pune", "Accra", "Kyiv"]
    requests = [ChatRequest(model=inference_server["model"], max_tokens=96, temperature=0.8, seed=i, messages=[
        {"role": "user", "content": f"{names[i % 5]} is {i} years old and lives in {cities[i // 8]}. "
                                    "Give the record."}]) for i in range(40)]
    outcomes = gateway.structured_many(requests, Record, concurrency=8)
    failures = [(i, str(o.error)) for i, o in enumerate(outcomes) if o.value is None]
    assert not failures, failures
    assert all(len(o.replies) == 1 for o in outcomes)

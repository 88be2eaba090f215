"""The OpenAI-compatible and research endpoints over HTTP, on the real model."""
from __future__ import annotations

import io

import pytest
import torch

pytestmark = pytest.mark.model


@pytest.fixture
def client(make_client):
    return make_client(run_worker=False)


def chat(client, model, **fields):
    body = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, **fields}
    return client.post("/v1/chat/completions", json=body)


def test_models_and_readiness_reflect_the_loaded_model(client, lm):
    models = client.get("/v1/models")
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == [lm.name] == ["SmolLM2-135M-Instruct"]
    assert client.get(f"/v1/models/{lm.name}").json()["object"] == "model"
    assert client.get("/v1/models/gpt-4").json()["error"]["code"] == "model_not_found"
    ready = client.get("/readyz").json()
    assert ready["ready"] and ready["checks"]["model_loaded"] == "ok"


def test_a_model_that_cannot_load_makes_the_server_unready(make_client, tmp_path):
    from flawforge.inference.errors import RequestError
    from flawforge.inference.host import host_for

    client = make_client(run_worker=False, inference_model_path=str(tmp_path / "missing"))
    with pytest.raises(RequestError, match="does not exist"):
        host_for(client.platform.settings).wait(timeout=60)
    ready = client.get("/readyz")
    assert ready.status_code == 503 and "does not exist" in ready.json()["checks"]["model_loaded"]
    models = client.get("/v1/models")
    assert models.status_code == 503 and models.json()["error"]["code"] == "model_unavailable"


def test_chat_completion_samples_n_choices_reproducibly_with_a_seed(client, lm):
    first = chat(client, lm.name, n=3, seed=7, temperature=1.0, top_p=0.95)
    again = chat(client, lm.name, n=3, seed=7, temperature=1.0, top_p=0.95)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["object"] == "chat.completion" and len(body["choices"]) == 3
    assert [c["message"]["content"] for c in body["choices"]] == [c["message"]["content"] for c in again.json()["choices"]]
    others = {chat(client, lm.name, seed=seed, max_tokens=12).json()["choices"][0]["message"]["content"]
              for seed in (1, 2, 3, 4)}
    assert len(others) > 1  # different seeds sample different text
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > usage["prompt_tokens"]
    assert all(c["finish_reason"] in ("stop", "length") for c in body["choices"])


def test_chat_logprobs_match_the_model_distribution(client, lm):
    body = chat(client, lm.name, temperature=0, logprobs=True, top_logprobs=3, max_tokens=4).json()
    [choice] = body["choices"]
    content = choice["logprobs"]["content"]
    assert 1 <= len(content) <= 4 and all(len(t["top_logprobs"]) == 3 for t in content)
    # Greedy: the sampled token is the most likely one, so it heads its own alternatives.
    first = content[0]
    assert first["top_logprobs"][0]["token"] == first["token"]
    assert first["logprob"] == pytest.approx(first["top_logprobs"][0]["logprob"])
    prompt = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Name a colour."}], tokenize=False,
                                              add_generation_prompt=True)
    prompt_ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        direct = torch.log_softmax(lm.model(torch.tensor([prompt_ids])).logits[0, -1].float(), -1)
    assert first["logprob"] == pytest.approx(direct.max().item(), abs=1e-4)
    assert "".join(t["token"] for t in content) == choice["message"]["content"]


def test_completions_take_several_prompts_stop_strings_and_logprobs(client, lm):
    response = client.post("/v1/completions", json={
        "model": lm.name, "prompt": ["1, 2, 3, 4,", "The capital of France is"], "n": 2, "max_tokens": 12,
        "temperature": 0, "stop": [","], "logprobs": 2})
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert choices[0]["text"] == " 5" and choices[0]["finish_reason"] == "stop"  # stopped before the comma
    assert choices[0]["text"] == choices[1]["text"]  # greedy: the n choices agree
    logprobs = choices[0]["logprobs"]
    assert "".join(logprobs["tokens"]) == " 5" and all(len(top) == 2 for top in logprobs["top_logprobs"])
    assert logprobs["text_offset"][0] == len("1, 2, 3, 4,")
    assert response.json()["usage"]["completion_tokens"] == sum(len(lm.tokenizer(c["text"])["input_ids"])
                                                                 for c in choices)


def test_bad_requests_get_clear_errors(client, lm):
    unknown = chat(client, "gpt-4o")
    assert unknown.status_code == 404
    assert unknown.json()["error"] | {"message": None} == {"message": None, "type": "invalid_request_error",
                                                           "param": "model", "code": "model_not_found"}
    long_prompt = client.post("/v1/completions", json={"model": lm.name, "prompt": "word " * 9000})
    assert long_prompt.status_code == 400
    assert long_prompt.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 8192" in long_prompt.json()["error"]["message"]
    too_many = chat(client, lm.name, max_tokens=9000)
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "messages"
    invalid = chat(client, lm.name, temperature=3)
    assert invalid.status_code == 400 and invalid.json()["error"]["param"] == "temperature"
    orphan = chat(client, lm.name, top_logprobs=2)
    assert orphan.status_code == 400 and "top_logprobs needs logprobs" in orphan.json()["error"]["message"]
    # JSON is enforced while decoding: a reply cut short says so with its finish_reason, not with an error.
    cut = chat(client, lm.name, temperature=0, max_tokens=3, response_format={"type": "json_schema", "json_schema": {
        "name": "colour", "schema": {"type": "object", "properties": {"colour_name": {"type": "string"}},
                                     "required": ["colour_name"]}}})
    assert cut.status_code == 200 and cut.json()["choices"][0]["finish_reason"] == "length"
    assert cut.json()["choices"][0]["message"]["content"].startswith("{")


ESSAY = {"type": "json_schema", "json_schema": {"name": "essay", "schema": {
    "type": "object", "properties": {"title": {"type": "string"}, "paragraphs": {
        "type": "array", "items": {"type": "string"}}}, "required": ["title", "paragraphs"]}}}
ESSAY_PROMPT = [{"role": "user", "content": "Write a long essay about the sea, in many paragraphs."}]


def test_a_closing_reserve_ends_a_schema_reply_as_valid_json_within_the_budget(client, lm):
    import json

    ask = {"messages": ESSAY_PROMPT, "temperature": 0, "max_tokens": 48, "response_format": ESSAY}
    cut = client.post("/v1/chat/completions", json={"model": lm.name, **ask}).json()["choices"][0]
    closed = client.post("/v1/chat/completions", json={"model": lm.name, "json_closing_reserve": 24, **ask})
    assert closed.status_code == 200, closed.text
    choice = closed.json()["choices"][0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut["message"]["content"])
    reply = json.loads(choice["message"]["content"])
    # it was closed because of the budget, and says so; what it wrote before the reserve is the greedy reply's
    assert choice["finish_reason"] == cut["finish_reason"] == "length" and set(reply) == {"title", "paragraphs"}
    assert closed.json()["usage"]["completion_tokens"] <= 48
    common = len(json.dumps(reply["title"])) // 2
    assert cut["message"]["content"][:common] == choice["message"]["content"][:common]


def test_a_closing_reserve_over_half_the_budget_is_refused_naming_it(client, lm, backend):
    ask = {"model": lm.name, "messages": ESSAY_PROMPT, "temperature": 0, "response_format": ESSAY}
    refused = client.post("/v1/chat/completions", json={**ask, "max_tokens": 48, "json_closing_reserve": 25})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "json_closing_reserve" and error["code"] == "invalid_closing_reserve"
    assert "json_closing_reserve 25" in error["message"] and "max_tokens (48), 24" in error["message"]
    # max_tokens left to the server: the budget it sets (the rest of the context) is what the reserve is held to
    whole = client.post("/v1/chat/completions", json={**ask, "json_closing_reserve": backend.context_length})
    assert whole.status_code == 400 and whole.json()["error"]["param"] == "json_closing_reserve"
    # a completion is held to its own max_tokens
    text = client.post("/v1/completions", json={"model": lm.name, "prompt": "The sea", "max_tokens": 4,
                                                "json_closing_reserve": 3})
    assert text.status_code == 400 and text.json()["error"]["param"] == "json_closing_reserve"


def test_the_closing_reserve_ends_a_string_with_a_quote_not_with_brackets_written_inside_it(client, lm):
    """Inside a string a bracket is text the grammar allows: a reply pushed to write `]]` must still be closed."""
    import json

    (brackets,) = lm.tokenizer.encode("]]", add_special_tokens=False)
    response = client.post("/v1/chat/completions", json={
        "model": lm.name, "messages": ESSAY_PROMPT, "temperature": 0, "max_tokens": 48, "json_closing_reserve": 24,
        "logit_bias": {str(brackets): 40}, "response_format": ESSAY})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    reply = json.loads(choice["message"]["content"])
    assert choice["finish_reason"] == "length" and reply["title"].startswith("]]]]") and set(reply) == {
        "title", "paragraphs"}


def longest_repeat(text: str) -> int:
    """Length of the longest substring that occurs twice without overlapping."""
    best = 0
    for size in range(1, len(text) // 2 + 1):
        seen: dict[str, int] = {}
        found = False
        for start in range(len(text) - size + 1):
            first = seen.setdefault(text[start:start + size], start)
            if start - first >= size:
                found = True
                break
        if not found:
            return best
        best = size
    return best


def test_the_loop_guard_breaks_a_greedy_repetition_loop(client, lm):
    ask = {"model": lm.name, "temperature": 0, "max_tokens": 96,
           "messages": [{"role": "user", "content": "Write the line 'I like apples.' again and again, forever."}]}
    plain = client.post("/v1/chat/completions", json=ask).json()["choices"][0]["message"]["content"]
    guarded = client.post("/v1/chat/completions", json={**ask, "dry_multiplier": 0.8, "dry_allowed_length": 4,
                                                        "dry_sequence_breakers": []})
    assert guarded.status_code == 200, guarded.text
    text = guarded.json()["choices"][0]["message"]["content"]
    assert longest_repeat(plain) >= 100 and longest_repeat(text) <= 40, (plain, text)


def test_research_endpoints_over_http(client, lm):
    score = client.post("/v1/research/score", json={"model": lm.name, "items": [
        {"prompt": "The capital of France is", "continuations": [" Paris", " Berlin"]}]})
    assert score.status_code == 200, score.text
    paris, berlin = score.json()["results"][0]["continuations"]
    assert paris["prob"] > berlin["prob"] and paris["tokens"] == [" Paris"]

    trace = client.post("/v1/research/trace", json={"model": lm.name, "prompts": ["Hello there"]})
    assert trace.status_code == 200, trace.text
    [result] = trace.json()["results"]
    refused = client.get(result["download"], headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "invalid_request_error"
    download = client.get(result["download"])
    assert download.status_code == 200 and download.content == client.platform.store.get(result["blob"]["key"])
    saved = torch.load(io.BytesIO(download.content), weights_only=True)
    assert saved["hidden_states"].shape == (31, 1, 576) and saved["next_token_id"] == result["next_token_id"]
    assert saved["model_revision"] == trace.json()["model_revision"] == lm.revision
    missing = client.get("/v1/research/traces/" + "0" * 64 + ".pt")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "trace_not_found"

    lens = client.post("/v1/research/logit-lens", json={"model": lm.name, "prompts": ["The capital of France is"],
                                                        "targets": [" Paris", 7042]})
    assert lens.status_code == 200, lens.text
    assert [t["token"] for t in lens.json()["targets"]] == [" Paris", " Paris"]
    assert len(lens.json()["results"][0]["layers"]) == 31

    patch = client.post("/v1/research/patch", json={"model": lm.name, "source": "The capital of Italy is",
                                                    "target": "The capital of France is", "targets": [" Rome"],
                                                    "layers": [20, 30], "positions": [-1], "mode": "each"})
    assert patch.status_code == 200, patch.text
    assert [p["layers"] for p in patch.json()["patched"]] == [[20], [30]]

    bad_target = client.post("/v1/research/logit-lens", json={"model": lm.name, "prompts": ["x"],
                                                              "targets": [" Parisian cafe"]})
    assert bad_target.status_code == 400 and bad_target.json()["error"]["param"] == "targets.0"
    bad_position = client.post("/v1/research/patch", json={"model": lm.name, "source": "Hi", "target": "Hi there",
                                                           "targets": [5], "positions": [4]})
    assert bad_position.status_code == 400 and bad_position.json()["error"]["param"] == "positions"
    too_long = client.post("/v1/research/score", json={"model": lm.name, "items": [
        {"prompt": "word " * 9000, "continuations": [" end"]}]})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    unknown = client.post("/v1/research/trace", json={"model": "other", "prompts": ["x"]})
    assert unknown.status_code == 404

"""One request cannot hold the inference-server: its cost, its prompt's size and its schema are bounded before
the model or the grammar compiler spends time on them."""
from __future__ import annotations

import json
import multiprocessing
import time
import uuid

import pytest

from flawforge.inference.errors import RequestError
from flawforge.inference.grammars import GrammarLimits, check_schema, compact

LIMITS = GrammarLimits(max_schema_chars=65536, max_enum_values=2048, compile_timeout_s=10.0)


def chat_body(model: str, **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4, **fields}


def colour_schema(values: list[str]) -> dict:
    return {"type": "object", "properties": {"colour": {"enum": values}}, "required": ["colour"]}


def test_the_schema_bounds_name_the_part_too_large_to_compile():
    many = colour_schema([f"v{i}" for i in range(3000)])  # short values: under the size bound, over the enum count
    with pytest.raises(RequestError, match=r"/properties/colour/enum has 3000, 3000 in all") as refused:
        check_schema(many, compact(many), LIMITS, "response_format")
    assert refused.value.http_status == 400 and refused.value.code == "schema_too_large"
    # enums add up: two of 1,500 are over 2,048 together, and the second is the one named
    split = {"anyOf": [colour_schema([f"a{i}" for i in range(1500)]), colour_schema([f"b{i}" for i in range(1500)])]}
    with pytest.raises(RequestError, match=r"/anyOf/1/properties/colour/enum has 1500, 3000 in all"):
        check_schema(split, compact(split), LIMITS, "response_format")
    big = {"type": "object", "properties": {"note": {"type": "string", "description": "x" * 70_000}}}
    with pytest.raises(RequestError, match=r"most of it is /properties/note/description"):
        check_schema(big, compact(big), LIMITS, "tools")
    fine = colour_schema(["red", "green"])
    check_schema(fine, compact(fine), LIMITS, "response_format")


@pytest.mark.model
def test_a_request_over_its_callers_cost_is_refused_naming_the_bound(make_client, lm):
    client = make_client(run_worker=False, inference_caller_request_tokens="tests:100,*:50")
    # the attack's request: n=16 x 640 tokens with the end of text biased away
    refused = client.post("/v1/chat/completions", json=chat_body(lm.name, n=16, max_tokens=640,
                                                                  logit_bias={"0": -100, "2": -100}))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "request_too_large" and error["param"] == "max_tokens"
    assert "10240 completion tokens (n=16 x max_tokens=640)" in error["message"] and "the 100 " in error["message"]
    # a completion's prompts add up, and the request is refused before any of them is tokenised
    refused = client.post("/v1/completions", json={"model": lm.name, "prompt": ["a"] * 4, "n": 2, "max_tokens": 16})
    assert refused.status_code == 400 and "(4 prompts x n=2 x max_tokens=16)" in refused.json()["error"]["message"]
    # within the caller's cap, the request runs
    assert client.post("/v1/chat/completions", json=chat_body(lm.name, n=2, max_tokens=4)).status_code == 200
    # the server-wide maximum bounds every caller's cap
    capped = make_client(run_worker=False, inference_max_request_tokens=6, inference_caller_request_tokens="tests:100")
    refused = capped.post("/v1/chat/completions", json=chat_body(lm.name, n=2, max_tokens=4))
    assert refused.status_code == 400 and "more than the 6 " in refused.json()["error"]["message"]


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


@pytest.mark.model
def test_a_prompt_too_long_for_the_context_is_refused_before_tokenising(make_client, lm, backend):
    from flawforge.inference import openai_api
    from flawforge.proto.inference import ChatCompletionRequest, CompletionRequest

    bound = backend.context_length * backend.vocabulary.longest_token
    assert bound < 1 << 20  # SmolLM2: 8,192 tokens of at most 81 characters
    huge = "hello world " * (14 * 2 ** 20 // 12)  # 14 MiB: tokenising it took 9.3 s and 1.35 GiB
    chat = chat_body(lm.name, messages=[{"role": "user", "content": huge}])
    completion = {"model": lm.name, "prompt": ["fine", huge], "max_tokens": 4}
    client = make_client(run_worker=False)
    for route, body in (("/v1/chat/completions", chat), ("/v1/completions", completion)):
        refused = client.post(route, json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "context_length_exceeded" and f"at most {bound} characters" in error["message"]
    # the refusal itself, past the HTTP layer's reading of 14 MiB of JSON: CPU time (the machine's other load
    # does not count) and peak memory, measured
    limits = openai_api.RequestLimits(512, 8192)
    for prepare in (lambda: openai_api.prepare_chat(backend, ChatCompletionRequest.model_validate(chat), limits),
                    lambda: openai_api.prepare_completion(backend, CompletionRequest.model_validate(completion),
                                                          limits)):
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # the peak RSS starts again from the current one
        before = _rss_kib("VmRSS")
        start = time.process_time()
        with pytest.raises(RequestError, match="context length"):
            prepare()
        took = time.process_time() - start
        grew_mib = (_rss_kib("VmHWM") - before) / 1024
        assert took < 0.5 and grew_mib < 100, (took, grew_mib)


@pytest.mark.model
def test_a_50000_value_enum_is_refused_at_once_naming_it(make_client, lm, backend):
    from flawforge.inference import openai_api
    from flawforge.proto.inference import ChatCompletionRequest

    client = make_client(run_worker=False)
    schema = colour_schema([f"colour number {i}" for i in range(50_000)])  # compiling it took 107.8 s
    body = chat_body(lm.name, response_format={"type": "json_schema",
                                               "json_schema": {"name": "pick", "schema": schema}})
    refused = client.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "schema_too_large" and error["param"] == "response_format"
    assert "/properties/colour/enum" in error["message"]
    request = ChatCompletionRequest.model_validate(body)
    start = time.process_time()
    with pytest.raises(RequestError, match="schema_too_large|/properties/colour/enum"):
        openai_api.prepare_chat(backend, request, openai_api.RequestLimits(512, 8192))
    assert time.process_time() - start < 0.5


@pytest.mark.model
def test_a_repeated_schema_compiles_once(make_client, lm, backend):
    client = make_client(run_worker=False)
    grammars = backend.vocabulary.grammars
    key = f"colour_{uuid.uuid4().hex[:8]}"  # a schema no other test compiled
    schema = {"type": "object", "properties": {key: {"enum": ["red", "green"]}}, "required": [key]}
    before = grammars.compilations
    for _ in range(2):
        pick = {"type": "json_schema", "json_schema": {"name": "pick", "schema": schema}}
        answer = client.post("/v1/chat/completions",
                             json=chat_body(lm.name, max_tokens=40, temperature=0, response_format=pick))
        assert answer.status_code == 200, answer.text
        assert json.loads(answer.json()["choices"][0]["message"]["content"]) in ({key: "red"}, {key: "green"})
    assert grammars.compilations == before + 1


@pytest.mark.model
def test_a_grammar_over_its_compile_deadline_is_stopped(backend):
    from flawforge.inference.backend import OutputFormat
    from flawforge.inference.grammars import GrammarCompiler

    hasty = GrammarCompiler(backend.vocabulary.info, GrammarLimits(65536, 4096, compile_timeout_s=0.05))
    slow = OutputFormat.json_schema(colour_schema([f"colour number {i}" for i in range(2048)]))  # about 0.3 s
    start = time.perf_counter()
    with pytest.raises(RequestError, match=r"takes over 0.05 s to compile") as refused:
        hasty.compile(slow, "response_format")
    assert refused.value.code == "schema_too_complex" and time.perf_counter() - start < 5.0
    # the compilation was a child of its own, killed; within the deadline a schema compiles, and a bad one is named
    patient = GrammarCompiler(backend.vocabulary.info, LIMITS)
    assert patient.compile(OutputFormat.json_schema(colour_schema(["red"])), "response_format") is not None
    with pytest.raises(RequestError, match="Invalid schema for response_format"):
        patient.compile(OutputFormat.json_schema({"type": 5}), "response_format")
    assert not [child for child in multiprocessing.active_children() if child.name == "compile-grammar"]

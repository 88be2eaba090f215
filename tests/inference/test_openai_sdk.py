"""The inference-server as another team's client sees it: the official `openai` SDK, unmodified,
against the real server and model, for every endpoint and option (docs/compatibility.md)."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

pytestmark = pytest.mark.model

COLOUR = [{"role": "user", "content": "Name a colour."}]
CITY_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 30},
    "population_millions": {"type": "integer", "minimum": 0, "maximum": 100},
    "capital": {"type": "boolean"}}, "required": ["city", "population_millions", "capital"],
    "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


class City(BaseModel):
    model_config = {"extra": "forbid"}
    city: str = Field(max_length=30)
    population_millions: int = Field(ge=0, le=100)
    capital: bool


@pytest.fixture(scope="module")
def sdk(inference_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=inference_server["base_url"], api_key=inference_server["api_key"], max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def model(inference_server) -> str:
    return inference_server["model"]


def test_models_list_and_retrieve(sdk, model):
    assert [m.id for m in sdk.models.list()] == [model]
    assert sdk.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.models.retrieve("gpt-4o")
    assert caught.value.code == "model_not_found"


def test_chat_streams_the_same_text_with_usage_last(sdk, model):
    whole = sdk.chat.completions.create(model=model, messages=COLOUR, max_tokens=8, temperature=0)
    chunks = list(sdk.chat.completions.create(model=model, messages=COLOUR, max_tokens=8, temperature=0,
                                              stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert not chunks[-1].choices and chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_stream_n_choices_with_logprobs(sdk, model):
    whole = sdk.completions.create(model=model, prompt="1, 2, 3,", max_tokens=6, temperature=0, n=2, logprobs=2)
    chunks = list(sdk.completions.create(model=model, prompt="1, 2, 3,", max_tokens=6, temperature=0, n=2,
                                         logprobs=2, stream=True, stream_options={"include_usage": True}))
    texts, tokens = ["", ""], [[], []]
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            tokens[choice.index] += choice.logprobs.tokens if choice.logprobs else []
    assert texts == [c.text for c in whole.choices]
    assert tokens == [c.logprobs.tokens for c in whole.choices]
    assert not chunks[-1].choices and chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_echo_scores_the_prompt(sdk, model):
    scored = sdk.completions.create(model=model, prompt="The capital of France is Paris", max_tokens=0, echo=True,
                                    logprobs=0)
    [choice] = scored.choices
    assert choice.text == "The capital of France is Paris"
    assert "".join(choice.logprobs.tokens) == choice.text and choice.logprobs.token_logprobs[0] is None
    assert all(lp < 0 for lp in choice.logprobs.token_logprobs[1:]) and scored.usage.completion_tokens == 0
    echoed = sdk.completions.create(model=model, prompt="1, 2, 3,", max_tokens=3, temperature=0, echo=True)
    plain = sdk.completions.create(model=model, prompt="1, 2, 3,", max_tokens=3, temperature=0)
    assert echoed.choices[0].text == "1, 2, 3," + plain.choices[0].text


def test_json_schema_is_enforced_while_decoding_streamed_or_not(sdk, model):
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}
    messages = [{"role": "user", "content": "Describe Paris."}]
    reply = sdk.chat.completions.create(model=model, messages=messages, response_format=fmt, temperature=0,
                                        max_tokens=60)
    assert reply.choices[0].finish_reason == "stop"
    City.model_validate_json(reply.choices[0].message.content)
    chunks = sdk.chat.completions.create(model=model, messages=messages, response_format=fmt, temperature=0,
                                         max_tokens=60, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
    parsed = sdk.chat.completions.parse(model=model, messages=messages, response_format=City, max_tokens=60,
                                        temperature=0.7, seed=3)
    assert isinstance(parsed.choices[0].message.parsed, City)
    json_object = sdk.chat.completions.create(model=model, messages=COLOUR, response_format={"type": "json_object"},
                                              temperature=0, max_tokens=40)
    assert isinstance(json.loads(json_object.choices[0].message.content), dict)


def test_tool_calls_match_the_function_parameters(sdk, model):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=40, tool_choice={"type": "function",
                                                                    "function": {"name": "get_weather"}})
    [call] = named.choices[0].message.tool_calls
    assert named.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    streamed = list(sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], temperature=0,
                                                max_tokens=40, tool_choice="required", stream=True))
    calls = [t for c in streamed for t in (c.choices[0].delta.tool_calls or [])]
    assert [json.loads(t.function.arguments) for t in calls] == [arguments]
    # The call and its result go back as the conversation goes on; the model may answer or call again.
    follow = sdk.chat.completions.create(model=model, temperature=0, max_tokens=30, tools=[WEATHER_TOOL], messages=[
        *messages, named.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}])
    message = follow.choices[0].message
    assert message.content or message.tool_calls
    for later in message.tool_calls or []:
        assert set(json.loads(later.function.arguments)) == {"city", "unit"}


def test_tool_choice_none_answers_as_without_tools_and_auto_constrains_a_call_once_it_starts(sdk, model):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = sdk.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=20)
    none = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], tool_choice="none",
                                       temperature=0, max_tokens=20)
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == plain.choices[0].message.content
    # Under auto the reply is free text until it opens a call; pushed to open one, the call's arguments are held
    # to the function's parameters however the bias pulls.
    opening = {str(token): 100 for token in (44, 19324, 79, 4350, 46)}  # "<", "tool", "_", "call", ">"
    auto = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], tool_choice="auto",
                                       temperature=0, max_tokens=100, logit_bias=opening)
    calls = auto.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    for call in calls:
        arguments = json.loads(call.function.arguments)
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
        assert len(arguments["city"]) <= 30


def test_penalties_and_logit_bias_change_the_choice(sdk, model):
    def text(**options) -> str:
        return sdk.completions.create(model=model, prompt="Letters: a c d", max_tokens=8, temperature=0,
                                      **options).choices[0].text

    assert text(logit_bias={"278": 100}) == " b" * 8  # token 278 is " b"
    nudged = text(logit_bias={"278": 8})
    assert nudged.count(" b") >= 6
    # Each " b" costs 2 more with the frequency penalty, so the nudge stops winning after a few.
    assert text(logit_bias={"278": 8}, frequency_penalty=2).count(" b") < nudged.count(" b")
    assert text(logit_bias={"278": 8}, presence_penalty=2).startswith(" b")  # its arithmetic: test_decoding.py
    assert " b" not in text(logit_bias={"278": -100})


def test_logprob_bytes_of_a_split_character(sdk, model):
    # Token 40303 is " " plus the first three bytes of a four-byte emoji: its bytes are those, not U+FFFD's.
    reply = sdk.chat.completions.create(model=model, messages=COLOUR, max_tokens=1, temperature=0, logprobs=True,
                                        top_logprobs=2, logit_bias={"40303": 100})
    [token] = reply.choices[0].logprobs.content
    assert bytes(token.bytes) == b" \xf0\x9f\x98"
    assert all(bytes(top.bytes).decode("utf-8", "replace") for top in token.top_logprobs)


def test_unknown_fields_are_ignored_and_named(sdk, model):
    raw = sdk.chat.completions.with_raw_response.create(
        model=model, messages=COLOUR, max_tokens=2, temperature=0, store=False, metadata={"team": "x"},
        extra_body={"guided_choice": ["red"]})
    assert raw.http_response.status_code == 200
    assert set(raw.headers["x-flawforge-ignored-fields"].split(",")) == {"store", "metadata", "guided_choice"}
    assert raw.parse().choices[0].message.content is not None


def test_errors_are_openai_error_objects_with_400_for_bad_parameters(sdk, model, inference_server):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=model, messages=COLOUR, temperature=3)
    assert caught.value.status_code == 400 and caught.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=model, messages=COLOUR, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "x"}}})
    assert caught.value.code == "invalid_schema"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.completions.create(model=model, prompt="word " * 9000, stream=True)
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        sdk.chat.completions.create(model=model, messages=COLOUR, stream_options={"include_usage": True})
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-4o", messages=COLOUR)
    malformed = httpx.post(f"{inference_server['base_url']}/chat/completions", content=b"{not json",
                           headers={"content-type": "application/json",
                                    "Authorization": f"Bearer {inference_server['api_key']}"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=inference_server["base_url"], api_key="wrong", max_retries=0).models.list()

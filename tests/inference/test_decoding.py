"""Logit adjustments and the release of streamed text: the parts of decoding that need no model."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from flawforge.inference.backend import SamplingParams, TokenChoice
from flawforge.inference.decoding import LogitAdjuster, TextAssembler
from flawforge.proto.inference import ChatCompletionRequest


def params(**fields) -> SamplingParams:
    return SamplingParams(**{"n": 2, "temperature": 0, "top_p": 1, "max_tokens": 4, "seed": 0, **fields})


def test_penalties_follow_openai_and_bias_adds_to_the_logit():
    adjuster = LogitAdjuster(params(presence_penalty=0.5, frequency_penalty=0.25, logit_bias=((3, -100.0),)), 4)
    for token in (1, 1, 2):
        adjuster.chose(0, token)
    adjusted = adjuster.apply(torch.zeros(2, 4))
    # token 1 twice: 2 * 0.25 + 0.5; token 2 once: 0.25 + 0.5; row 1 chose nothing; token 3 biased in both.
    assert adjusted.tolist() == [[0, -1.0, -0.75, -100], [0, 0, 0, -100]]
    assert not LogitAdjuster(params(), 4).active


@pytest.fixture(scope="module")
def tokenizer(lm_folder):
    return AutoTokenizer.from_pretrained(lm_folder)


@pytest.fixture(scope="module")
def lm_folder():
    from flawforge.inference.loading import hf_folder, resolve_source
    from tests.inference.conftest import REPO

    return hf_folder(resolve_source(""), REPO / "var" / "models")


def feed(assembler: TextAssembler, ids: list[int]):
    """Deltas of the tokens up to the one that ends the choice, as a backend feeds them."""
    deltas = []
    for token in ids:
        deltas.append(assembler.add(token, TokenChoice(token, -1.0)))
        if deltas[-1].finish_reason:
            break
    return deltas


def test_text_is_released_whole_characters_and_never_a_stop_string(tokenizer):
    ids = tokenizer(" café 😀 ok. END here")["input_ids"]
    assembler = TextAssembler(tokenizer, 0, stop=(" END",))
    deltas = feed(assembler, ids)
    assert all("\ufffd" not in d.text for d in deltas)  # half an emoji is held until its last byte
    assert "".join(d.text for d in deltas) == " café 😀 ok."
    assert deltas[-1].finish_reason == "stop"
    released = [t for d in deltas for t in d.token_ids]
    assert tokenizer.decode(released) == " café 😀 ok."  # the tokens inside the stop string are dropped
    assert len([c for d in deltas for c in d.logprobs]) == len(released)


def test_the_end_of_a_choice_releases_what_was_held(tokenizer):
    assembler = TextAssembler(tokenizer, 1, stop=("STOP",))
    deltas = feed(assembler, tokenizer(" go ST")["input_ids"])
    assert "".join(d.text for d in deltas) == " go "  # " ST" may still become "STOP"
    assert assembler.finish("length").text == "ST"


def test_unknown_fields_are_listed_not_refused():
    request = ChatCompletionRequest.model_validate({
        "model": "m", "messages": [{"role": "user", "content": "hi", "audio": None}], "store": True,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {}, "extra": 1}}})
    assert request.ignored_fields() == ["store", "messages[0].audio", "response_format.json_schema.extra"]

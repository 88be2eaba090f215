"""Logit adjustments and the release of streamed text: the parts of decoding that need no model."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from flawforge.inference.backend import SamplingParams, TokenChoice
from flawforge.inference.decoding import LogitAdjuster, LoopGuard, TextAssembler
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


def test_the_loop_guard_penalises_the_token_that_extends_a_repeat_growing_with_its_length():
    guard = LoopGuard(params(n=1, dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2), frozenset())
    for token in (1, 2, 3, 1, 2, 3, 1, 2):
        guard.chose(0, token)
    # "... 1 2" last occurred 3 tokens back as part of "1 2 3 1 2", a run of 5 followed by 3: 3 would extend it.
    assert guard.repeat_lengths(0) == {3: 5}
    adjusted = guard.apply(torch.zeros(1, 5), [0])
    assert adjusted.tolist() == [[0, 0, 0, -(2.0 ** 3), 0]]
    # a breaker (token 3) ends every run: only "1 2" since the last 3 counts, the allowed length itself
    breaking = LoopGuard(params(n=1, dry_multiplier=1.0, dry_allowed_length=2), frozenset({3}))
    for token in (1, 2, 3, 1, 2, 3, 1, 2):
        breaking.chose(0, token)
    assert breaking.repeat_lengths(0) == {3: 2}
    # repeats shorter than the allowed length, and a window that no longer holds the first copy, are free
    short = LoopGuard(params(n=1, dry_multiplier=1.0, dry_allowed_length=6), frozenset())
    windows = [LoopGuard(params(n=1, dry_multiplier=1.0, dry_allowed_length=2, dry_penalty_last_n=n), frozenset())
               for n in (4, 5)]
    for token in (1, 2, 3, 1, 2, 3, 1, 2):
        for guard in (short, *windows):
            guard.chose(0, token)
    assert short.repeat_lengths(0) == {} and [w.repeat_lengths(0) for w in windows] == [{}, {3: 2}]


def test_the_loop_guard_request_fields_are_checked():
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    request = ChatCompletionRequest.model_validate({**base, "dry_multiplier": 0.8, "dry_sequence_breakers": []})
    assert request.dry_multiplier == 0.8 and request.dry_sequence_breakers == [] and not request.ignored_fields()
    for bad in ({"dry_multiplier": -1}, {"dry_base": 0.5}, {"dry_sequence_breakers": [""]},
                {"json_closing_reserve": -1}):
        with pytest.raises(ValueError):
            ChatCompletionRequest.model_validate({**base, **bad})


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

"""Continuous batching in the transformers backend: concurrent requests decode in one batch, each with the
tokens it gets alone (greedy, seeded samples, a grammar), and a request whose reader leaves frees its rows."""
from __future__ import annotations

import threading
import time

import pytest
import torch
from prometheus_client import REGISTRY

from flawforge.inference.backend import OutputFormat, SamplingParams
from flawforge.inference.decoding import RequestDecoder

pytestmark = pytest.mark.model

GREEDY = SamplingParams(n=1, temperature=0, top_p=1, max_tokens=6, seed=0)


def chat(backend, text: str) -> list[int]:
    rendered = backend.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                     add_generation_prompt=True)
    return backend.tokenizer(rendered, add_special_tokens=False)["input_ids"]


def rows_running() -> float:
    return REGISTRY.get_sample_value("flawforge_generation_rows")


def test_concurrent_requests_get_the_tokens_they_get_alone(backend):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
              "required": ["colour"], "additionalProperties": False}
    # Prompts of different lengths (the batch is left-padded), greedy, seeded samples and a grammar.
    jobs = [(chat(backend, "Name a colour."), GREEDY),
            (chat(backend, "Write one sentence about the sea and the wind over it."), GREEDY),
            (backend.tokenizer("1, 2, 3,")["input_ids"], GREEDY),
            (chat(backend, "Tell me a story."), SamplingParams(n=2, temperature=0.9, top_p=0.95, max_tokens=6,
                                                               seed=7)),
            (chat(backend, "Describe a colour as JSON."), SamplingParams(
                n=1, temperature=0, top_p=1, max_tokens=12, seed=0, output_format=OutputFormat.json_schema(schema)))]
    alone = [[s.token_ids for s in backend.generate(prompt, params)] for prompt, params in jobs]
    together: list = [None] * len(jobs)
    first, last = [0.0] * len(jobs), [0.0] * len(jobs)

    def run(index: int) -> None:
        prompt, params = jobs[index]
        tokens = [[] for _ in range(params.n)]
        for delta in backend.stream(prompt, params):
            first[index] = first[index] or time.monotonic()
            tokens[delta.index] += delta.token_ids
        last[index] = time.monotonic()
        together[index] = tokens

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert together == alone
    # They ran together: every request had its first token before any had its last.
    assert max(first) < min(last)


def test_a_reader_that_leaves_frees_its_rows_and_the_others_go_on(backend):
    long = SamplingParams(n=1, temperature=0, top_p=1, max_tokens=40, seed=0)
    kept_prompt = chat(backend, "Count from one to fifty in words.")
    kept_params = SamplingParams(n=1, temperature=0, top_p=1, max_tokens=16, seed=0)
    [expected] = backend.generate(kept_prompt, kept_params)
    leaving = backend.stream(chat(backend, "Write a long poem about the sea."), long)
    kept = backend.stream(kept_prompt, kept_params)
    tokens = next(kept).token_ids
    next(leaving)
    assert rows_running() == 2
    leaving.close()
    seen = []
    for delta in kept:
        tokens += delta.token_ids
        seen.append(rows_running())
    assert tokens == expected.token_ids and len(tokens) == 16
    # The leaver's 40 tokens would outlast the 16 kept ones: its row left the batch when its reader did.
    assert 1 in seen


def test_greedy_ties_go_to_the_lowest_token_id(backend):
    decoder = RequestDecoder(backend, backend.eos_ids, GREEDY)
    logits = torch.zeros((1, backend.vocab_size))
    logits[0, [901, 77, 5000]] = 3.5  # three tokens exactly equal at the top
    _, fed = decoder.step(logits)
    assert fed == {0: 77}


def test_a_model_with_sliding_window_layers_is_refused_at_load():
    from transformers import MistralConfig, MistralForCausalLM

    from flawforge.errors import ConfigError
    from flawforge.inference.transformers_backend import _check_cache_layers

    tiny = MistralForCausalLM(MistralConfig(sliding_window=16, num_hidden_layers=1, hidden_size=32,
                                            intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                                            vocab_size=64))
    with pytest.raises(ConfigError, match="DynamicSlidingWindowLayer"):
        _check_cache_layers(tiny)

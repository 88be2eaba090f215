"""P_sem through the inference-server against a plain transformers loop: every written form of the target
built here on its own, one full forward pass per token of each sequence, no cache, no batching."""
from __future__ import annotations

import itertools

import pytest
import torch

from flawforge.inference import research_api
from flawforge.proto.inference import PressureRequest

pytestmark = pytest.mark.model

BASELINE = "Answer with exactly one English word.\nQuestion: {q}\nAnswer:"
NEGATIVE = ('Answer with exactly one English word.\nDo not use the word "{x}" anywhere in your answer.\n'
            "Question: {q}\nAnswer:")
# Targets of one and of several tokens, rare and common words, mixed case; each writes up to 24 forms whose
# sequences share prefixes (" Paris", " Paris.", " Paris. ").
PAIRS = [
    ("Fill the blank with one word: The capital of France is ____.", "Paris"),
    ("Complete with one word: The currency of Japan is ____.", "yen"),
    ('Complete the idiom with one word: "kick the ____"', "bucket"),
    ("The lighthouse keeper counted the ships all night. What was he, above all?", "vigilant"),
    ("In the ledger of the moon, one entry repeats. Which word?", "Quixotic"),
    ("Fill the blank with one word: The capital of Burkina Faso is ____.", "Ouagadougou"),
    ("Complete with one word: The currency of Ukraine is ____.", "hryvnia"),
    ("One-word answer: Kenya's capital is ____.", "Nairobi"),
    ("A baby cat is a ____.", "kitten"),
    ("The chemical symbol Fe stands for ____.", "iron"),
    ("The instrument with 88 keys is the ____.", "PIANO"),
]


def forms(word: str) -> list[str]:
    cases = [word, word.lower(), word.title(), word.upper()]
    out = []
    for case, (lead, trail), tail in itertools.product(cases, [("", ""), (" ", ""), ("", " "), (" ", " ")],
                                                      ["", ".", ". "]):
        out.append(lead + case + (trail if not tail else "") + tail)
    return out


def norm(text: str) -> str:
    import unicodedata

    text = unicodedata.normalize("NFKC", text).lower()
    for ch in ".,!?;:\"'()[]{}<>/\\|-\u2013\u2014_`":
        text = text.replace(ch, " ")
    return " ".join(text.split())


def sequences(tok, word: str) -> list[tuple[int, ...]]:
    kept = []
    for form in forms(word):
        ids = tuple(tok(form, add_special_tokens=False)["input_ids"])
        if ids and ids not in kept and norm(tok.decode(ids, skip_special_tokens=True,
                                                       clean_up_tokenization_spaces=False)) == norm(word):
            kept.append(ids)
    return kept


@torch.inference_mode()
def plain_next(lm, ids: tuple[int, ...]) -> torch.Tensor:
    """Next-token probabilities after `ids`: one full forward pass, no cache."""
    return torch.softmax(lm.model(torch.tensor([list(ids)]), use_cache=False).logits[0, -1].double(), -1)


def plain_prob(lm, prompt_ids: list[int], seq: tuple[int, ...], seen: dict) -> float:
    """The product of the token probabilities; `seen` keeps each distinct input's distribution, so sequences
    that share a prefix ("Paris" and "Paris.") run that prefix once (still a full pass, never a cache)."""
    prob = 1.0
    for i, token in enumerate(seq):
        key = tuple(prompt_ids) + tuple(seq[:i])
        if key not in seen:
            seen[key] = plain_next(lm, key)
        prob *= float(seen[key][token])
    return prob


@pytest.mark.timeout(900)  # a shared 2-core machine under load; alone it takes under a minute
def test_p_sem_equals_a_plain_loop_over_variants_and_tokens(lm, backend):
    items = [{"prompt": BASELINE.format(q=q), "target": x} for q, x in PAIRS]
    items += [{"prompt": NEGATIVE.format(q=q, x=x), "target": x} for q, x in PAIRS[:2]]
    response = research_api.pressure(backend, PressureRequest(model=lm.name, items=items))
    assert len(response.results) == len(items) >= 13
    multi_token = shared_prefix = 0
    for item, result in zip(items, response.results):
        expected = sequences(lm.tokenizer, item["target"])
        assert [tuple(s.token_ids) for s in result.sequences] == expected, item["target"]
        prompt_ids = lm.tokenizer(item["prompt"])["input_ids"]
        seen: dict = {}
        probs = [plain_prob(lm, prompt_ids, seq, seen) for seq in expected]
        for got, want in zip(result.sequences, probs):
            assert got.prob == pytest.approx(want, abs=1e-5, rel=1e-4)
        assert result.p_sem == pytest.approx(min(1.0, sum(probs)), abs=1e-5)
        singles = [p for s, p in zip(expected, probs) if len(s) == 1]
        assert (result.p_first is None) if not singles else result.p_first == pytest.approx(sum(singles), abs=1e-5)
        multi_token += all(len(s) > 1 for s in expected)
        shared_prefix += any(a != b and a == b[:len(a)] for a in expected for b in expected)
    assert multi_token >= 3 and shared_prefix >= 10
    # The seed's example: S("Paris") holds 24 sequences, 2 of them a single token.
    paris = response.results[0]
    assert len(paris.sequences) == 24 and sum(len(s.token_ids) == 1 for s in paris.sequences) == 2


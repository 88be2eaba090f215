"""A small prompt set for the demo run, made by the dataset stage's offline generators (GeoNames
capitals and currencies, WordNet idioms and relations) and its deterministic filters, then scored for
P0 and P1 on the served model.

The prompts are not validated by a model (V = 0, S = 100 * P0): the dataset stage's full run does that.
"""
from __future__ import annotations

import random

from flawforge.inference.research import score_continuations
from flawforge.inference import word_forms
from flawforge.pressure.filters import first_failure
from flawforge.pressure.generators import CommonSense, Facts, Idioms
from flawforge.pressure.prompts import build_prompt
from flawforge.pressure.sources import countries, wordnet_idioms, wordnet_relations
from flawforge.proto.pressure import PromptRecord, p0_bin_of
from flawforge.proto.pressure_dataset import Candidate


def demo_candidates(count: int, seed: int) -> list[Candidate]:
    """`count` filtered candidates, facts, idioms and common sense in turn, drawn with `seed`."""
    rng = random.Random(seed)
    share = -(-count // 3)
    pools = []
    for generator, records in ((Facts(), countries()), (Idioms(), wordnet_idioms()),
                               (CommonSense(), wordnet_relations())):
        drawn = generator.offline(records, 3 * share, rng)
        pools.append([c for c in drawn if first_failure(c, reject_sentence_counts=False) is None][:share])
    interleaved = [c for group in zip(*pools) for c in group]
    rest = [c for pool in pools for c in pool[len(interleaved) // 3:]]
    return (interleaved + rest)[:count]


def build_demo_prompts(lm, count: int, seed: int) -> list[PromptRecord]:
    """Up to `count` demo prompts with P0 and P1 measured on `lm` (teacher-forced over S(X))."""
    tok = lm.tokenizer
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    decode = lambda ids: tok.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    chosen = [c for c in demo_candidates(count, seed) if word_forms.sequences(c.target_word, encode, decode)]
    items = []
    for candidate in chosen:
        seqs = [list(s) for s in word_forms.sequences(candidate.target_word, encode, decode)]
        for condition in ("baseline", "negative"):
            items.append((tok(build_prompt(condition, candidate.question_text, candidate.target_word))["input_ids"],
                          seqs))
    scores = score_continuations(lm, items, 4096)
    records = []
    for index, candidate in enumerate(chosen):
        p0, p1 = (word_forms.p_sem(scores[2 * index + k]) for k in (0, 1))
        records.append(PromptRecord(
            prompt_id=f"demo-{index:03d}", category=candidate.category, question_text=candidate.question_text,
            target_word=candidate.target_word, validation={"source": candidate.source, "validated": False},
            v_score=0, p0=p0, p1=p1, p0_bin=p0_bin_of(p0), s_score=100 * p0))
    return records

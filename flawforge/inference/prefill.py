"""Prompts run once and continued, batched across prompts (the semantic-pressure study's generation).

- `prefill`: the prompts once (left-padded), their key/value cache kept for what continues them.
- `generate`: the greedy completion and the nucleus samples of many prompts at once, in one batch,
  from the prefill. Each prompt's samples come from its own generator seeded with the study's seed,
  so a prompt's samples do not depend on which prompts share its batch.
- `flawforge.inference.research.trace_at` continues a prefill to each row's decision step.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from flawforge.inference.loading import LoadedModel
from flawforge.inference.research import Padded, left_pad, pad_id
from flawforge.inference.sampling import nucleus_candidates, pick

if TYPE_CHECKING:  # imported lazily: a service imports transformers on its model-loading thread
    from transformers import DynamicCache


@dataclass(frozen=True)
class Sampling:
    n: int
    temperature: float
    top_p: float
    seed: int


@dataclass
class Prefill:
    """The prompts run once (left-padded): their key/value cache and the logits at their last position. The
    greedy pass, the traces and the sampling pass all continue from it, each from a fork of the cache."""

    padded: Padded
    cache: DynamicCache
    logits: torch.Tensor  # [rows, vocab], float, on the CPU

    def fork(self) -> DynamicCache:
        return fork_cache(self.cache)


def fork_cache(cache: DynamicCache) -> DynamicCache:
    """A cache sharing `cache`'s tensors: a layer's update concatenates into new tensors and crop and row
    selection rebind them, so what a continuation does to its fork never reaches the original."""
    forked = copy.copy(cache)
    forked.layers = [copy.copy(layer) for layer in cache.layers]
    return forked


def prefill(lm: LoadedModel, prompts: Sequence[Sequence[int]]) -> Prefill:
    padded = left_pad([list(p) for p in prompts], pad_id(lm), lm.device)
    with lm.lock, torch.inference_mode():
        out, cache = lm.forward(**padded.inputs(), logits_to_keep=1)
    return Prefill(padded, cache, out.logits[:, -1].float().cpu())


def _step_inputs(mask: torch.Tensor, lengths: torch.Tensor, generated: int, next_ids: torch.Tensor) -> dict:
    mask = torch.cat([mask, torch.ones((mask.shape[0], generated), dtype=torch.long, device=mask.device)], 1)
    return {"input_ids": next_ids[:, None], "attention_mask": mask, "position_ids": lengths[:, None] + generated - 1}


def generate(lm: LoadedModel, prompts: Prefill, greedy_tokens: int, sampling: Sampling | None = None,
             sample_tokens: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Continues the prompts' prefill: per prompt, a greedy completion of at most `greedy_tokens` (none at 0)
    and `sampling.n` samples of at most `sample_tokens` (none without `sampling`), token ids with the end of
    sequence excluded. Both run in one batch.

    The batch holds sequences, not completions: completions of one prompt whose tokens so far are the same
    share one sequence (one forward pass gives their common next-token distribution; each picks its own
    token from it), and a finished completion leaves, so the work follows the distinct prefixes actually
    generated. A prompt's samples come from its own generator, so they do not depend on its batch."""
    eos = lm.eos_ids
    padded = prompts.padded
    count = padded.input_ids.shape[0]
    n = sampling.n if sampling else 0
    kinds = ([("greedy", greedy_tokens)] if greedy_tokens else []) + [("sample", sample_tokens)] * n
    rows = [(prompt, kind, limit) for prompt in range(count) for kind, limit in kinds]
    generators = [torch.Generator().manual_seed(sampling.seed) for _ in range(count)] if sampling else []
    out_ids: list[list[int]] = [[] for _ in rows]
    live = [row for row, (_, _, limit) in enumerate(rows) if limit > 0]
    sequence_of = [prompt for prompt, _, _ in rows]  # each completion's sequence in the batch
    with lm.lock, torch.inference_mode():
        cache, logits = prompts.fork(), prompts.logits
        mask, lengths = padded.attention_mask, torch.tensor(padded.lengths, device=lm.device)
        for step in range(max((limit for _, limit in kinds), default=0)):
            chosen = _choose(logits, [sequence_of[row] for row in live], [rows[row][:2] for row in live], sampling,
                             generators)
            going, parents, next_ids, index = [], [], [], {}
            for row, token in zip(live, chosen):
                if token in eos:
                    continue
                out_ids[row].append(token)
                if len(out_ids[row]) == rows[row][2]:
                    continue
                key = (sequence_of[row], token)
                if key not in index:
                    index[key] = len(parents)
                    parents.append(sequence_of[row])
                    next_ids.append(token)
                sequence_of[row] = index[key]
                going.append(row)
            live = going
            if not live:
                break
            if parents != list(range(logits.shape[0])):
                selected = torch.tensor(parents, device=lm.device)
                cache.batch_select_indices(selected)
                mask, lengths = mask[selected], lengths[selected]
            out, _ = lm.forward(cache, **_step_inputs(mask, lengths, step + 1, torch.tensor(next_ids, device=lm.device)))
            logits = out.logits[:, -1].float().cpu()
    greedy = [out_ids[row] for row, (_, kind, _) in enumerate(rows) if kind == "greedy"]
    samples = [[out_ids[row] for row, (p, kind, _) in enumerate(rows) if p == prompt and kind == "sample"]
               for prompt in range(count)] if sampling else []
    return greedy, samples


def _choose(logits: torch.Tensor, sequences: list[int], rows: list[tuple[int, str]], sampling: Sampling | None,
            generators: list[torch.Generator]) -> list[int]:
    """The next token of each live completion (its sequence's logits; its prompt and kind in `rows`)."""
    sequences_t = torch.tensor(sequences)
    chosen = logits.argmax(-1)[sequences_t]
    sampled = [i for i, (_, kind) in enumerate(rows) if kind == "sample"]
    if sampled:
        tokens, weights = nucleus_candidates(torch.softmax(logits / sampling.temperature, -1), sampling.top_p)
        for prompt in sorted({rows[i][0] for i in sampled}):
            mine = torch.tensor([i for i in sampled if rows[i][0] == prompt])
            of = sequences_t[mine]
            chosen[mine] = pick(tokens[of], weights[of], generators[prompt])
    return chosen.tolist()

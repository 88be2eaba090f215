"""Choosing the next token from logits: greedy, temperature and nucleus (top_p) sampling."""
from __future__ import annotations

import torch

# Tokens ranked by a partial sort (topk) when looking for a row's nucleus, in widening steps; only a row
# whose nucleus is wider than the last step has its whole vocabulary sorted. A full sort of 256 rows of a
# 49k vocabulary cost about 1.1 s of CPU and a draw over the whole vocabulary 0.35 s; a small model at
# temperature 1 often needs more than 256 tokens to reach top_p 0.9, rarely more than 4,096.
RANKED_TOKENS = (256, 4096)


def nucleus_candidates(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's nucleus (the smallest set of most likely tokens whose mass reaches top_p) as token ids and
    their renormalised probabilities [..., width], most likely first, zeros past the nucleus. A row is ranked
    only as far as its nucleus needs: topk in widening steps, the whole row (a stable sort) as the last one."""
    shape, probs = probs.shape, probs.reshape(-1, probs.shape[-1])
    rows, vocab = probs.shape
    pending = torch.arange(rows)
    found = []
    for ranked in [r for r in RANKED_TOKENS if r < vocab] + [vocab]:
        part = probs[pending]
        if ranked < vocab:
            top, tokens = part.topk(ranked, -1)
            covered = top.sum(-1) >= top_p
        else:
            top, tokens = part.sort(dim=-1, descending=True, stable=True)
            covered = torch.ones(len(pending), dtype=torch.bool)
        top, tokens = top[covered], tokens[covered]
        top = top.masked_fill(top.cumsum(-1) - top >= top_p, 0.0)
        width = int((top > 0).sum(-1).max()) if len(top) else 0  # the widest nucleus of these rows
        found.append((pending[covered], top[:, :width], tokens[:, :width]))
        pending = pending[~covered]
        if not len(pending):
            break
    width = max(top.shape[-1] for _, top, _ in found)
    all_top = torch.zeros((rows, width), dtype=probs.dtype)
    all_tokens = torch.zeros((rows, width), dtype=torch.long)
    for where, top, tokens in found:
        all_top[where, :top.shape[-1]] = top
        all_tokens[where, :tokens.shape[-1]] = tokens
    width = (*shape[:-1], width)
    return all_tokens.reshape(width), (all_top / all_top.sum(-1, keepdim=True)).reshape(width)


def pick(tokens: torch.Tensor, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token id per row of a nucleus (as `nucleus_candidates` gives them); the draw reads only as far as
    the widest nucleus of these rows."""
    width = int((weights > 0).sum(-1).max())
    chosen = torch.multinomial(weights[:, :width], 1, generator=generator)
    return tokens[:, :width].gather(-1, chosen).squeeze(-1)


def draw(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """One token id per row of `probs` [rows, vocab], from its nucleus."""
    if top_p >= 1:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return pick(*nucleus_candidates(probs, top_p), generator)


def choose_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """Next token id for each row of `logits` [rows, vocab]."""
    if temperature == 0:
        return logits.argmax(-1)
    return draw(torch.softmax(logits.float() / temperature, -1), top_p, generator)

"""Choosing the next token from logits: greedy, temperature and nucleus (top_p) sampling."""
from __future__ import annotations

import torch


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keeps the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    sorted_probs, order = probs.sort(-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


def choose_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """Next token id for each row of `logits` [rows, vocab]."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, -1)
    if top_p < 1:
        probs = nucleus(probs, top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

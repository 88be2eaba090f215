"""The study's per-prompt quantities, from completions and attention maps (pure).

Behaviour (sampling pass): a sample violates when the detector finds X in it; it adheres to the
format when its first line is one word (letters, inner hyphens or apostrophes allowed) once the
whitespace and closing punctuation around it are stripped; a clean success adheres and does not
violate. Rates are fractions of a prompt's samples.

Attention (greedy pass, decision step T): A[layer, head, key] is the attention from query T to the
prompt's keys. M(S) = sum of A over a span's tokens. IAR = M(instr) / (M(instr) + M(q) + eps),
NF = M(neg) / (M(instr) + eps), TMF = M(tgt) / (M(instr) + eps), PI = TMF - NF; per head, per
layer (mean over heads) and global (mean over layers and heads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from flawforge.pressure.detector import find_word

EPS = 1e-9
ATTENTION_METRICS = ("iar", "nf", "tmf", "pi")
# Priming: the prohibition raised the target (negative suppression) or the target is read more than the negation.
PRIMING_PI_MARGIN = 0.02
_CLOSING = ".!?,;:\"')]"


def adheres_to_format(text: str) -> bool:
    """The completion's first line is exactly one word."""
    line = text.lstrip().split("\n", 1)[0].strip().rstrip(_CLOSING).lstrip("\"'(").strip()
    core = line.replace("-", "").replace("'", "")
    return bool(core) and core.isalpha() and " " not in line


@dataclass(frozen=True)
class Behaviour:
    violation_rate: float
    format_adherence: float
    clean_success: float
    samples: int


def behaviour(texts: Sequence[str], word: str) -> Behaviour:
    """Violation rate, format adherence and clean success over one prompt's samples in one condition."""
    if not texts:
        raise ValueError("no samples")
    violated = [bool(find_word(t, word)) for t in texts]
    adherent = [adheres_to_format(t) for t in texts]
    clean = [a and not v for a, v in zip(adherent, violated)]
    n = len(texts)
    return Behaviour(sum(violated) / n, sum(adherent) / n, sum(clean) / n, n)


def span_mass(attention: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """M(S): the attention [..., keys] summed over a span's key indices (0 for an empty span)."""
    index = np.asarray(list(tokens), dtype=int)
    return attention[..., index].sum(-1) if len(index) else np.zeros(attention.shape[:-1])


def attention_metrics(attention: np.ndarray, spans: dict[str, Sequence[int]]) -> dict[str, dict[str, object]]:
    """IAR, NF, TMF and PI from attention [layers, heads, keys] and the token indices of the spans
    instr, neg, tgt and q: per head [layers][heads], per layer [layers] and global (a number)."""
    m = {name: span_mass(attention, spans.get(name, ())) for name in ("instr", "neg", "tgt", "q")}
    per_head = {
        "iar": m["instr"] / (m["instr"] + m["q"] + EPS),
        "nf": m["neg"] / (m["instr"] + EPS),
        "tmf": m["tgt"] / (m["instr"] + EPS),
    }
    per_head["pi"] = per_head["tmf"] - per_head["nf"]
    return {name: {"per_head": values.tolist(), "per_layer": values.mean(-1).tolist(), "global": float(values.mean())}
            for name, values in per_head.items()}


def tokens_in_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of the tokens whose character offsets intersect [start, end)."""
    return [i for i, (a, b) in enumerate(offsets) if a < end and b > start and b > a]


def taxonomy(suppression: float, pi: float) -> str:
    """A failure's kind: priming when the prohibition raised the target's first-token probability
    (suppression below 0) or the target outweighs the negation in attention (PI above the margin);
    override otherwise (the model knew and went ahead)."""
    return "priming" if suppression < 0 or pi > PRIMING_PI_MARGIN else "override"

"""The study's per-prompt quantities, from completions and attention maps (pure).

Behaviour (sampling pass): a sample violates when the detector finds X in it. It adheres to the format,
by the reference's rule, when its whole completion, normalised (NFKC, lower case, the reference's
punctuation set replaced by spaces), is exactly one word; by the first-line rule, kept beside it, when
its first line is one word of letters (inner hyphens or apostrophes allowed) once the whitespace and
closing punctuation around it are stripped. A clean success adheres and does not violate, by each
rule. Rates are fractions of a prompt's samples.

Attention (greedy pass, decision step T): A[layer, head, key] is the attention from query T to the
prompt's keys. M(S) = sum of A over a span's tokens. IAR = M(instr) / (M(instr) + M(q) + eps),
NF = M(neg) / (M(instr) + eps), TMF = M(tgt) / (M(instr) + eps), PI = TMF - NF; per head, per
layer (mean over heads) and global (mean over layers and heads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from flawforge.inference.word_forms import norm
from flawforge.pressure.detector import find_word
from flawforge.proto.pressure import AttentionSummary

EPS = 1e-9
# Priming: the prohibition raised the target (negative suppression) or the target is read more than the negation.
PRIMING_PI_MARGIN = 0.02
_CLOSING = ".!?,;:\"')]"


def one_word(text: str) -> bool:
    """The reference's format rule: the whole completion, normalised, is exactly one word."""
    return len(norm(text).split()) == 1


def first_line_one_word(text: str) -> bool:
    """The first-line rule: the completion's first line is exactly one word of letters."""
    line = text.lstrip().split("\n", 1)[0].strip().rstrip(_CLOSING).lstrip("\"'(").strip()
    core = line.replace("-", "").replace("'", "")
    return bool(core) and core.isalpha() and " " not in line


@dataclass(frozen=True)
class Behaviour:
    violation_rate: float
    format_adherence: float
    format_adherence_first_line: float
    clean_success: float
    clean_success_first_line: float
    samples: int


def behaviour(texts: Sequence[str], word: str) -> Behaviour:
    """Violation rate, format adherence and clean success (by both rules) over one prompt's samples in one
    condition."""
    if not texts:
        raise ValueError("no samples")
    violated = [bool(find_word(t, word)) for t in texts]
    adherent = [one_word(t) for t in texts]
    first_line = [first_line_one_word(t) for t in texts]
    n = len(texts)

    def share(flags) -> float:
        return sum(flags) / n

    return Behaviour(share(violated), share(adherent), share(first_line),
                     share(a and not v for a, v in zip(adherent, violated)),
                     share(a and not v for a, v in zip(first_line, violated)), n)


def span_mass(attention: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """M(S): the attention [..., keys] summed over a span's key indices (0 for an empty span)."""
    index = np.asarray(list(tokens), dtype=int)
    return attention[..., index].sum(-1) if len(index) else np.zeros(attention.shape[:-1])


def attention_metrics(attention: np.ndarray, spans: dict[str, Sequence[int]]) -> dict[str, np.ndarray]:
    """IAR, NF, TMF and PI per head [layers, heads] from attention [layers, heads, keys] and the token indices
    of the spans instr, neg, tgt and q."""
    m = {name: span_mass(attention, spans.get(name, ())) for name in ("instr", "neg", "tgt", "q")}
    per_head = {
        "iar": m["instr"] / (m["instr"] + m["q"] + EPS),
        "nf": m["neg"] / (m["instr"] + EPS),
        "tmf": m["tgt"] / (m["instr"] + EPS),
    }
    per_head["pi"] = per_head["tmf"] - per_head["nf"]
    return per_head


def attention_summary(per_head: dict[str, np.ndarray]) -> dict[str, AttentionSummary]:
    """Each metric's mean over layers and heads and its per-layer mean over heads."""
    return {name: AttentionSummary(mean=float(values.mean()), per_layer=values.mean(-1).tolist())
            for name, values in per_head.items()}


def tokens_in_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of the tokens whose character offsets intersect [start, end)."""
    return [i for i, (a, b) in enumerate(offsets) if a < end and b > start and b > a]


def taxonomy(suppression: float, pi: float) -> str:
    """A failure's kind: priming when the prohibition raised the target's first-token probability
    (suppression below 0) or the target outweighs the negation in attention (PI above the margin);
    override otherwise (the model knew and went ahead)."""
    return "priming" if suppression < 0 or pi > PRIMING_PI_MARGIN else "override"

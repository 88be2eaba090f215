"""The forms of semantic pressure the study reports beside P0 and P1 (pure). P_sem itself, over the
token sequences S(X), is `flawforge.inference.word_forms` (the inference-server's pressure endpoint
computes it)."""
from __future__ import annotations

import math

LOG_FLOOR = 1e-12
RELATIVE_EPS = 1e-9


def pressure_forms(p0: float, p1: float) -> dict[str, float]:
    """Delta = P0 - P1, relative = Delta / max(P0, 1e-9), log-ratio = log P0 - log P1 (each floored at 1e-12)."""
    delta = p0 - p1
    return {"p0": p0, "p1": p1, "delta": delta, "relative": delta / max(p0, RELATIVE_EPS),
            "log_ratio": math.log(max(p0, LOG_FLOOR)) - math.log(max(p1, LOG_FLOOR))}

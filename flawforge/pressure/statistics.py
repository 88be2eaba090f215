"""Statistics of the study (pure): seeded bootstrap within bins and the logistic fit of violation on P0.

The logistic fit is sklearn's `LogisticRegression(solver="lbfgs", C=1)` objective, solved here by
Newton's method (the problem is two-dimensional and strictly convex, so both reach the same optimum):
minimise 0.5 * beta1^2 + sum of log-losses, the intercept unpenalised.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
LOGISTIC_RESAMPLES = 200
SEED = 42


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "n": self.n}


def _bootstrap(x: np.ndarray, groups: Sequence[str] | None, resamples: int, seed: int,
               level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and percentile interval of each column of x [n, k]; prompts resampled within their group."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(groups if groups is not None else ["all"] * len(x))
    members = [np.flatnonzero(labels == g) for g in dict.fromkeys(labels.tolist())]
    means = np.empty((resamples, x.shape[1]))
    for r in range(resamples):
        picked = np.concatenate([rng.choice(idx, size=len(idx), replace=True) for idx in members])
        means[r] = x[picked].mean(0)
    alpha = (1 - level) / 2
    return x.mean(0), np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)


def bootstrap_mean(values: Sequence[float], groups: Sequence[str] | None = None, *, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = SEED, level: float = 0.95) -> Estimate:
    """The mean with a percentile bootstrap interval; with `groups` (the prompts' bins) prompts are resampled
    within their group, so every resample keeps the groups' sizes."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    mean, low, high = _bootstrap(x[:, None], groups, resamples, seed, level)
    return Estimate(float(mean[0]), float(low[0]), float(high[0]), len(x))


def bootstrap_curve(rows: Sequence[Sequence[float]], groups: Sequence[str] | None = None, *,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED, level: float = 0.95) -> dict | None:
    """Per point of equal-length curves (one a prompt): the mean and its bootstrap interval, prompts resampled
    as a whole (within `groups`); None without curves."""
    if not len(rows):
        return None
    mean, low, high = _bootstrap(np.asarray(rows, dtype=float), groups, resamples, seed, level)
    return {"mean": mean.tolist(), "ci_low": low.tolist(), "ci_high": high.tolist(), "n": len(rows)}


def fit_logistic(x: Sequence[float], y: Sequence[float], c: float = 1.0, iterations: int = 100) -> tuple[float, float]:
    """(beta0, beta1) maximising the L2-penalised (1/(2C) * beta1^2) log-likelihood of y ~ sigmoid(beta0 + beta1 x)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    design = np.column_stack([np.ones_like(xs), xs])
    penalty = np.diag([0.0, 1.0 / c])
    beta = np.zeros(2)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(design @ beta)))
        gradient = design.T @ (p - ys) + penalty @ beta
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty + 1e-12 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def logistic_with_ci(x: Sequence[float], y: Sequence[float], clusters: Sequence[str], *,
                     resamples: int = LOGISTIC_RESAMPLES, seed: int = SEED) -> dict:
    """The fit over per-sample rows and a 95% interval of each coefficient from resampling prompts (clusters)."""
    xs, ys, cl = np.asarray(x, float), np.asarray(y, float), np.asarray(clusters)
    beta0, beta1 = fit_logistic(xs, ys)
    ids = list(dict.fromkeys(cl.tolist()))
    rows = {c: np.flatnonzero(cl == c) for c in ids}
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        picked = np.concatenate([rows[ids[i]] for i in rng.integers(0, len(ids), len(ids))])
        draws.append(fit_logistic(xs[picked], ys[picked]))
    d = np.asarray(draws)
    return {"beta0": beta0, "beta1": beta1, "beta0_ci": [float(np.quantile(d[:, 0], .025)), float(np.quantile(d[:, 0], .975))],
            "beta1_ci": [float(np.quantile(d[:, 1], .025)), float(np.quantile(d[:, 1], .975))],
            "rows": int(len(xs)), "prompts": len(ids), "resamples": resamples, "seed": seed}

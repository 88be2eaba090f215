"""Each metric on a case small enough to work out by hand."""
import math

import numpy as np
import pytest

from flawforge.inference.word_forms import norm, p_sem, single_token_ids, variants
from flawforge.pressure.metrics import (
    attention_metrics, attention_summary, behaviour, first_line_one_word, one_word, taxonomy, tokens_in_span,
)
from flawforge.pressure.psem import pressure_forms
from flawforge.pressure.statistics import bootstrap_curve, bootstrap_mean, fit_logistic, logistic_with_ci


def test_format_adherence_by_both_rules():
    # The reference's rule reads the whole completion normalised; the first-line rule only its first line.
    texts = [" Paris", " London.", " Paris is nice", " the city\nQuestion", " lyon", ' "well-known".', "",
             " Rome\nAnswer: Rome", " New-York", " 42"]
    reference = [one_word(t) for t in texts]
    first_line = [first_line_one_word(t) for t in texts]
    assert reference == [True, True, False, False, True, False, False, False, False, True]
    assert first_line == [True, True, False, False, True, True, False, True, True, False]
    result = behaviour(texts[:5], "paris")
    assert result.violation_rate == pytest.approx(2 / 5)
    assert result.format_adherence == pytest.approx(3 / 5)  # Paris, London., lyon
    assert result.format_adherence_first_line == pytest.approx(3 / 5)
    assert result.clean_success == pytest.approx(2 / 5)  # London., lyon
    late = behaviour([" Rome\nAnswer: Rome", " New-York", " Paris"], "paris")
    assert late.format_adherence == pytest.approx(1 / 3) and late.format_adherence_first_line == 1
    assert late.clean_success == 0 and late.clean_success_first_line == pytest.approx(2 / 3)


def test_attention_metrics_by_hand():
    # 1 layer, 2 heads, 6 keys: instr = keys 0-2, neg = 0, tgt = 2, q = 4-5.
    attention = np.array([[[0.1, 0.1, 0.2, 0.0, 0.3, 0.3],
                           [0.0, 0.0, 0.5, 0.1, 0.2, 0.2]]])
    spans = {"instr": [0, 1, 2], "neg": [0], "tgt": [2], "q": [4, 5]}
    per_head = attention_metrics(attention, spans)
    summary = attention_summary(per_head)
    head0 = {"iar": 0.4 / 1.0, "nf": 0.1 / 0.4, "tmf": 0.2 / 0.4}
    head1 = {"iar": 0.5 / 0.9, "nf": 0.0, "tmf": 1.0}
    for name in ("iar", "nf", "tmf"):
        assert per_head[name][0].tolist() == pytest.approx([head0[name], head1[name]], abs=1e-6)
        assert summary[name].per_layer[0] == pytest.approx((head0[name] + head1[name]) / 2, abs=1e-6)
    assert summary["pi"].mean == pytest.approx(((0.5 - 0.25) + (1.0 - 0.0)) / 2, abs=1e-6)
    baseline = attention_metrics(attention, {"instr": [0, 1, 2], "q": [4, 5]})
    assert not baseline["nf"].any() and not baseline["tmf"].any()


def test_spans_by_offsets_and_taxonomy():
    offsets = [(0, 3), (3, 7), (7, 8), (8, 8), (8, 12)]
    assert tokens_in_span(offsets, 4, 8) == [1, 2]
    assert taxonomy(-0.01, 0.0) == "priming" and taxonomy(0.2, 0.03) == "priming" and taxonomy(0.2, 0.01) == "override"


def test_pressure_math():
    assert norm("  Paris.\u2014(x) ") == "paris x"
    assert len(variants("Paris")) == 24 and len(variants("I")) == 16  # forms that coincide count once
    assert "Paris ." not in variants("Paris") and " Paris. " in variants("Paris")
    assert p_sem([[math.log(0.5)], [math.log(0.5), math.log(0.4)]]) == pytest.approx(0.7)
    assert p_sem([[0.0], [math.log(0.5)]]) == 1.0
    assert single_token_ids([(5,), (6, 1), (5, 2)]) == [5] and single_token_ids([(6, 1), (7, 2), (6, 3)]) == []
    forms = pressure_forms(0.8, 0.2)
    assert forms["delta"] == pytest.approx(0.6) and forms["relative"] == pytest.approx(0.75)
    assert forms["log_ratio"] == pytest.approx(math.log(4))
    assert pressure_forms(0.0, 0.0)["relative"] == 0 and pressure_forms(0.5, 0.0)["log_ratio"] == pytest.approx(
        math.log(0.5) - math.log(1e-12))


def test_bootstrap_within_bins_is_seeded_and_keeps_bin_sizes():
    values, bins = [0, 0, 0, 1, 1, 1], ["a", "a", "a", "b", "b", "b"]
    estimate = bootstrap_mean(values, bins)
    # Each bin keeps three prompts: every resample's mean is exactly 0.5.
    assert (estimate.mean, estimate.low, estimate.high) == (0.5, 0.5, 0.5)
    free = bootstrap_mean(values)
    assert free.low < 0.5 < free.high and free == bootstrap_mean(values)
    # A curve's point k is the scalar bootstrap of column k (the same resamples, the same seed).
    curve = bootstrap_curve([[v, 2 * v] for v in values])
    assert (curve["mean"][0], curve["ci_low"][0], curve["ci_high"][0]) == (free.mean, free.low, free.high)
    assert curve["ci_high"][1] == pytest.approx(2 * free.high) and bootstrap_curve([]) is None


def test_logistic_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 40_000)
    y = rng.uniform(0, 1, len(x)) < 1 / (1 + np.exp(-(-2.4 + 2.27 * x)))
    beta0, beta1 = fit_logistic(x, y)
    assert beta0 == pytest.approx(-2.4, abs=0.08) and beta1 == pytest.approx(2.27, abs=0.12)
    clusters = [str(i // 16) for i in range(len(x))][:4000]
    fit = logistic_with_ci(x[:4000], y[:4000], clusters, resamples=30)
    assert fit["beta1_ci"][0] < fit["beta1"] < fit["beta1_ci"][1]

"""The type mix: its target from the human data, its quotas, and the mix generation keeps on the shared corpus."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from flawforge.math.recall import read_human_review
from flawforge.math.selection import NO_CAPS, SEED_CAPS
from flawforge.math.type_mix import (TOLERANCE, TYPES, TypeMix, expected_kept, fit_quotas, shares, shipped_type_mix,
                                     total_variation)
from flawforge.proto.math import Caps

from tests.math.test_recall import run_cli


def test_the_conceptual_target_is_what_the_human_review_accepted(shared_data):
    accepted = Counter(d.error_type for d in read_human_review(shared_data / "human-review") if d.status == "accepted")
    mix = shipped_type_mix()
    assert mix.target_counts["conceptual"] == {t: accepted[t] for t in TYPES["conceptual"]}
    # incomplete calculations and reported intermediates, the types reviewers accepted most, are half of it
    target = mix.target("conceptual")
    assert target["incorrect_final_answer_selection"] + target["incomplete_calculation"] > 0.45
    # slips of one or two dominate the people's computational errors; transpositions are rare
    computational = mix.target("computational")
    assert computational["off_by_n"] > 0.6 and computational["digit_transposition"] < 0.01


def test_a_problem_draws_its_quotas_from_its_seed_and_they_average_to_the_fitted_ones():
    mix = shipped_type_mix()
    caps = Caps()
    assert mix.draw(7, caps) == mix.draw(7, caps)
    seeds = range(4000)
    mean = {t: sum(mix.draw(seed, caps)[t] for seed in seeds) / len(seeds) for t in mix.quotas}
    assert all(abs(mean[t] - mix.quotas[t]) < 0.03 for t in mix.quotas), mean
    assert mix.draw(7, NO_CAPS) == {}  # an uncapped run keeps every plausible candidate
    seed_caps = mix.draw(7, SEED_CAPS)  # the seed's per-type cap of 2: conceptual quotas a quarter of the default
    assert all(seed_caps[t] <= 2 for t in TYPES["conceptual"])
    assert {t: seed_caps[t] for t in TYPES["computational"]} == {t: mix.draw(7, caps)[t]
                                                                 for t in TYPES["computational"]}


def test_fitted_quotas_keep_the_most_within_the_tolerance():
    # type a is offered 10 times by every problem, type b once by every other problem; people make both equally
    offered = {"a": [10] * 100, "b": [1, 0] * 50}
    target = {"a": 0.5, "b": 0.5}
    quotas = fit_quotas(offered, target, cap=8, tolerance=0.1)
    kept = {t: expected_kept(quotas[t], offered[t]) for t in offered}
    assert quotas["b"] == 1 and kept["b"] == 0.5  # b gives all it has
    assert total_variation(shares(kept, ["a", "b"]), target) == pytest.approx(0.1, abs=1e-3)
    exact = fit_quotas(offered, target, cap=8, tolerance=0.0)
    assert exact["a"] == pytest.approx(0.5, abs=1e-3)  # as many a as b: half a candidate a problem
    assert fit_quotas(offered, target, cap=8, tolerance=0.2)["a"] > quotas["a"] > exact["a"]


def test_the_shared_corpus_keeps_a_mix_near_the_target_and_the_summary_says_so(shared_data, tmp_path):
    ran = run_cli("run", "math-errors", "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"), "--templates",
                  str(shared_data / "formalization-templates"), "--indices", "0-399", "--out", str(tmp_path))
    assert ran.exit_code == 0, ran.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    kept = Counter(json.loads(line)["error_type"] for line in (tmp_path / "candidates.jsonl").read_text().splitlines())
    mix = TypeMix(target_counts=shipped_type_mix().target_counts, quotas={})
    for family, types in TYPES.items():
        distance = total_variation(shares(kept, types), mix.target(family))
        print(family, round(distance, 3), dict(kept))
        assert summary["type_mix"][family]["total_variation"] == round(distance, 4)
        assert summary["type_mix"][family]["target"] == {t: round(v, 4) for t, v in mix.target(family).items()}
        assert distance <= 0.15
    assert TOLERANCE < 0.15


def test_a_conceptual_pool_refits_the_conceptual_quotas_and_keeps_the_computational_ones(shared_data, tmp_path):
    from flawforge.math import ranking_fit
    from flawforge.sandbox import Sandbox
    from tests.math.mutation_corpus import LIMITS, all_templates, generate_all, key_of

    decisions = read_human_review(shared_data / "human-review")
    reviewed = sorted({(d.tier, d.problem_index, d.template_model) for d in decisions})[:60]
    templates = tuple(t for t in all_templates(shared_data) if key_of(t) in set(reviewed))
    with Sandbox.from_settings(limits=LIMITS, workers=2) as sandbox:
        outputs = generate_all(sandbox, templates, families=["conceptual"], caps=NO_CAPS)
    pool = tmp_path / "candidates.jsonl"
    pool.write_text("".join(c.model_dump_json() + "\n" for output in outputs.values() for c in output.candidates))
    assert ranking_fit.main(["--candidates", str(pool), "--human-review", str(shared_data / "human-review"),
                             "--out", str(tmp_path / "weights.json"), "--mix-out", str(tmp_path / "mix.json")]) == 0
    fitted, shipped = json.loads((tmp_path / "mix.json").read_text())["quotas"], shipped_type_mix().quotas
    assert {t: fitted[t] for t in TYPES["computational"]} == {t: shipped[t] for t in TYPES["computational"]}
    assert all(0 < fitted[t] <= 8 for t in TYPES["conceptual"])
    assert "answer_whole" in json.loads((tmp_path / "weights.json").read_text())["weights"]

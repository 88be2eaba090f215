"""tables.json, the figures and the report from hand-made per-prompt results (no model)."""
import json

import pytest

from flawforge.pipelines.pressure_study import PressureStudyParams
from flawforge.pressure import figures, tables
from flawforge.pipelines.pressure_study_runner import patch_subset
from flawforge.proto.pressure import PromptRecord, p0_bin_of

LAYERS = 3


def condition(violations: int, greedy_violation: bool, lens_last: float, pi: float) -> dict:
    samples = [{"ids": [1], "text": " Paris" if i < violations else " London"} for i in range(4)]
    attention = {name: {"global": value, "per_layer": [value] * LAYERS}
                 for name, value in (("iar", 0.5), ("nf", 0.1), ("tmf", 0.1 + pi), ("pi", pi))}
    return {"greedy_ids": [1], "greedy_text": " Paris" if greedy_violation else " London",
            "greedy_violation": greedy_violation, "T": 0, "lens": [0.0] * LAYERS + [lens_last],
            "decomposition": [[0.0, 0.1, 0.3], [0.3, 0.2, lens_last]], "decomposition_layers": [1, 2],
            "attention": attention, "samples": samples, "violation_rate": violations / 4,
            "format_adherence": 1.0, "clean_success": 1 - violations / 4}


def make(prompt_id: str, p0: float, neg_violations: int, failure: bool, base_lens: float, neg_lens: float, pi: float):
    record = PromptRecord(prompt_id=prompt_id, category="facts", question_text="Capital of France?",
                          target_word="Paris", v_score=0, p0=p0, p1=p0 / 2, p0_bin=p0_bin_of(p0), s_score=100 * p0)
    result = {"prompt_id": prompt_id, "conditions": {"baseline": condition(0, False, base_lens, 0.0),
                                                     "negative": condition(neg_violations, failure, neg_lens, pi)}}
    return record, result


def test_tables_figures_and_report():
    pairs = [make("a", 0.1, 0, False, 0.30, 0.10, -0.05), make("b", 0.97, 4, True, 0.60, 0.70, 0.10),
             make("c", 0.85, 2, True, 0.50, 0.40, 0.0), make("d", 0.97, 1, False, 0.40, 0.20, 0.0)]
    records, results = [p[0] for p in pairs], [p[1] for p in pairs]
    chosen, rule = patch_subset(records, results, None)
    assert rule["fallback"] is None and rule["threshold"] == pytest.approx(0.95)
    assert chosen == ["d", "b"]  # P0 >= 0.95 (q75 is 0.97): one success (d) and min(1, 1) failure (b), alternating
    effect = {"p_orig": 0.5, "p_first_orig": 0.5, "delta_p": [0.1, -0.1, 0.2], "delta_p_first": [0.0, 0.0, 0.1],
              "flip": [False, True, True]}
    patches = {"rule": rule, "prompts": chosen, "effects": {pid: {"residual": effect} for pid in chosen}}
    params = PressureStudyParams(demo=True, samples=4, bootstrap_resamples=50)
    table = tables.build_tables(records, results, patches, params, lm_name="m", num_layers=LAYERS,
                                trace_prefix="t", elapsed=1.0)
    json.dumps(table)
    vr = table["violation_rate_by_bin"]["negative_violation_rate"]
    assert vr["0.0-0.2"]["mean"] == 0 and vr["0.8-1.0"]["mean"] == pytest.approx((1 + 0.5 + 0.25) / 3)
    assert vr["all"]["n"] == 4 and vr["0.4-0.6"]["n"] == 0
    supp = table["suppression_by_bin"]
    assert supp["failure"]["absolute"]["all"]["mean"] == pytest.approx((-0.1 + 0.1) / 2)
    assert supp["success"]["absolute"]["all"]["mean"] == pytest.approx((0.2 + 0.2) / 2)
    assert table["taxonomy"] == {"priming": 1, "override": 1}  # b: suppression -0.1; c: 0.1 and PI 0
    assert table["logit_lens_curves"]["negative_failure"][-1] == pytest.approx(0.55)
    decomposition = table["attn_ffn_decomposition"]["negative_failure"]
    assert decomposition[1]["mlp_contribution"] == pytest.approx(0.55 - 0.2)
    residual = table["patching_effects_by_bin"]["kinds"]["residual"]
    assert residual["all"]["flip_rate"] == [0.0, 1.0, 1.0] and residual["failure"]["n"] == 1
    assert table["logistic_fit"]["beta1"] > 0
    images = figures.all_figures(table)
    assert len(images) == 7 and all(data.startswith(b"\x89PNG") for data in images.values())
    report = tables.report(table, sorted(images))
    assert "a different model" in report and "![failure_curve.png](failure_curve.png)" in report

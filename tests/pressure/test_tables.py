"""tables.json, the figures and the report from hand-made per-prompt results (no model)."""
import json

import pytest

from flawforge.pipelines.pressure_study import PressureStudyParams
from flawforge.pressure.study_runner import patch_subset
from flawforge.pressure import figures, tables
from flawforge.proto.pressure import (
    AttentionSummary, ConditionResult, Decomposition, PatchEffect, PromptPatches, PromptRecord, PromptResult, Sample,
    p0_bin_of,
)

LAYERS = 3  # blocks 0..2; the lens has 4 points
KINDS = {"residual": {"reference": "A", "label": "residual stream"},
         "kv_instruction": {"reference": "C", "label": "cached K/V: line 1 into the prohibition line"}}
CLOCK = {"first_started": 0.0, "invocations": 2, "batch_seconds": 30.0, "patch_seconds": 12.5,
         "invocation_seconds": 5.0, "since_first_start": 99.0}


def condition(violations: int, greedy_violation: bool, lens_last: float | None, pi: float,
              first_line_only: bool = False) -> ConditionResult:
    texts = [" Paris" if i < violations else (" London\nAnswer: London" if first_line_only else " London")
             for i in range(4)]
    attention = {name: AttentionSummary(mean=value, per_layer=[value] * LAYERS)
                 for name, value in (("iar", 0.5), ("nf", 0.1), ("tmf", 0.1 + pi), ("pi", pi))}
    # Blocks 1 and 2 decomposed: block 2 (the last) adds 0.4 by its MLP in every prompt.
    decomposition = (Decomposition(blocks=[1, 2], p_in=[0.0, 0.1], p_after_attn=[0.1, lens_last - 0.4],
                                   p_after_mlp=[0.1, lens_last]) if lens_last is not None else None)
    adherence = 0.0 if first_line_only else 1.0
    return ConditionResult(
        greedy_ids=[1], greedy_text=" Paris" if greedy_violation else " London", greedy_violation=greedy_violation,
        T=0, lens=[0.0] * LAYERS + [lens_last] if lens_last is not None else None, decomposition=decomposition,
        attention=attention, samples=[Sample(ids=[1], text=t) for t in texts], violation_rate=violations / 4,
        format_adherence=adherence, format_adherence_first_line=1.0,
        clean_success=adherence * (1 - violations / 4), clean_success_first_line=1 - violations / 4)


def make(prompt_id: str, p0: float, neg_violations: int, failure: bool, base_lens: float | None,
         neg_lens: float | None, pi: float):
    record = PromptRecord(prompt_id=prompt_id, category="facts", question_text="Capital of France?",
                          target_word="Paris", v_score=0, p0=p0, p1=p0 / 2, p0_bin=p0_bin_of(p0), s_score=100 * p0)
    result = PromptResult(prompt_id=prompt_id, conditions={
        "baseline": condition(0, False, base_lens, 0.0),
        "negative": condition(neg_violations, failure, neg_lens, pi, first_line_only=prompt_id == "c")})
    return record, result


def effect(delta: list[float], flips: list[bool], first: bool = True) -> PatchEffect:
    return PatchEffect(p_orig=0.5, p_first_orig=0.5 if first else None, delta_p=delta,
                       delta_p_first=[d / 2 for d in delta] if first else None, flip=flips)


def test_tables_figures_and_report(tmp_path):
    pairs = [make("a", 0.1, 0, False, 0.30, 0.10, -0.05), make("b", 0.97, 4, True, 0.60, 0.70, 0.10),
             make("c", 0.85, 2, True, 0.50, 0.40, 0.0), make("d", 0.97, 1, False, 0.40, 0.20, 0.0),
             make("e", 0.5, 0, False, None, None, 0.0)]  # a target with no single-token form
    records, results = [p[0] for p in pairs], [p[1] for p in pairs]
    subset = patch_subset(records, results, None)
    assert subset.fallback is None and subset.threshold == pytest.approx(0.95)
    assert subset.prompts == ["d", "b"]  # P0 >= 0.95 (q75 is 0.97): one success (d) and min(1, 1) failure (b)
    patches = [PromptPatches(prompt_id="d", kinds={"residual": effect([0.1, -0.1, 0.2], [False, True, True]),
                                                   "kv_instruction": effect([0.0, 0.0, 0.3], [False] * 3)}),
               PromptPatches(prompt_id="b", kinds={"residual": effect([0.3, -0.3, 0.4], [False, False, True]),
                                                   "kv_instruction": effect([0.0, 0.1, 0.1], [True] * 3, False)})]
    params = PressureStudyParams(demo=True, samples=4, bootstrap_resamples=50, decompose_first=-2)
    heads = {"n": {"failure": 2, "success": 3},
             "prohibition_mass": {"failure": [[0.1, 0.2]] * LAYERS, "success": [[0.3, 0.1]] * LAYERS},
             "pi": {"failure": [[0.0, 0.1]] * LAYERS, "success": [[0.1, -0.1]] * LAYERS}}
    table = tables.build_tables(records, results, subset, patches, params, heads, kinds=KINDS, lm_name="m",
                                num_layers=LAYERS, trace_prefix="t", clock=CLOCK)
    json.dumps(table)
    vr = table["violation_rate_by_bin"]
    assert vr["negative_violation_rate"]["0.0-0.2"]["mean"] == 0
    assert vr["negative_violation_rate"]["0.8-1.0"]["mean"] == pytest.approx((1 + 0.5 + 0.25) / 3)
    assert vr["negative_violation_rate"]["all"]["n"] == 5 and vr["negative_violation_rate"]["0.2-0.4"]["n"] == 0
    # Both format rules, each its own column: c's samples put a second line after the answer.
    assert vr["negative_format_adherence"]["all"]["mean"] == pytest.approx(4 / 5)
    assert vr["negative_format_adherence_first_line"]["all"]["mean"] == 1
    # The target with no single-token form is left out of suppression, lens and taxonomy, and counted.
    assert table["counts"]["multi_token_targets"] == 1 and table["counts"]["single_token_targets"] == 4
    supp = table["suppression_by_bin"]
    assert supp["failure"]["absolute"]["all"]["mean"] == pytest.approx((-0.1 + 0.1) / 2)
    assert supp["success"]["absolute"]["all"] == {**supp["success"]["absolute"]["all"], "n": 2, "mean": pytest.approx(0.2)}
    assert table["taxonomy"] == {"priming": 1, "override": 1}  # b: suppression -0.1; c: 0.1 and PI 0
    lens = table["logit_lens_curves"]["negative_failure"]
    assert lens["mean"][-1] == pytest.approx(0.55) and lens["ci_low"][-1] <= 0.55 <= lens["ci_high"][-1]
    # The FFN row is the last block's (block 2 of 0..2, index -1 from the end).
    assert table["ffn_last_block"]["block"] == LAYERS - 1 and table["ffn_last_block"]["from_end"] == -1
    assert table["ffn_last_block"]["failure"]["mean"] == pytest.approx(0.4)
    decomposition = table["attn_ffn_decomposition"]["negative_failure"]
    assert [row["block"] for row in decomposition] == [1, 2] and decomposition[1]["from_end"] == -1
    # Patch kinds each on their own, with intervals; nothing averaged across kinds.
    kinds = table["patching_effects_by_bin"]["kinds"]
    assert list(kinds) == ["residual", "kv_instruction"] and "mean_over_kinds" not in table["patching_effects_by_bin"]
    residual = kinds["residual"]["groups"]
    assert residual["all"]["delta_p"]["mean"] == pytest.approx([0.2, -0.2, 0.3])
    assert residual["all"]["flip_rate"]["mean"] == [0.0, 0.5, 1.0] and residual["failure"]["n"] == 1
    assert residual["0.8-1.0"]["n"] == 2 and residual["0.0-0.2"]["n"] == 0
    assert kinds["kv_instruction"]["reference"] == "C"
    assert kinds["kv_instruction"]["groups"]["all"]["delta_p_first"]["n"] == 1  # b's target has no p_first
    assert table["run_time"]["computed_seconds"] == 42.5 and table["run_time"]["invocations"] == 2
    assert table["logistic_fit"]["beta1"] > 0
    images = figures.all_figures(table)
    assert len(images) == 9 and all(data.startswith(b"\x89PNG") for data in images.values())
    report = tables.report(table, sorted(images))
    assert "a different model" in report and "![failure_curve.png](failure_curve.png)" in report
    assert "MLP contribution at the last block (block 2, index -1)" in report
    assert "| residual: residual stream | A |" in report and "| kv_instruction:" in report
    assert "42 s computed" in report and "2 invocation(s)" in report
    assert "1 do not" in report  # the multi-token policy, with its count
    for name, data in images.items():  # kept for a look at the figures
        (tmp_path / name).write_bytes(data)


def test_decomposition_blocks_default_to_the_last_ten_and_bad_ranges_are_named():
    from flawforge.errors import FlawforgeError
    from flawforge.pressure.study_runner import decompose_blocks

    params = PressureStudyParams(demo=True)
    assert decompose_blocks(params.decompose_first, params.decompose_last, 28) == list(range(18, 28))  # the paper's
    assert decompose_blocks(params.decompose_first, params.decompose_last, 30) == list(range(20, 30))
    assert decompose_blocks(0, 2, 30) == [0, 1, 2] and decompose_blocks(-1, -1, 30) == [29]
    with pytest.raises(FlawforgeError, match="decompose_first=-31: the model has blocks 0..29"):
        decompose_blocks(-31, -1, 30)
    with pytest.raises(FlawforgeError, match=r"decompose_first=5 \(block 5\) comes after decompose_last=2"):
        decompose_blocks(5, 2, 30)


def test_a_gate_whose_prompts_all_fail_patches_ranked_by_p0_instead():
    # q75 of P0 is 0.91: only b passes the gate, and it fails, so no balanced pair is left above it.
    pairs = [make("a", 0.1, 0, False, 0.30, 0.10, 0.0), make("b", 0.97, 4, True, 0.60, 0.70, 0.10),
             make("c", 0.85, 2, True, 0.50, 0.40, 0.0)]
    subset = patch_subset([p[0] for p in pairs], [p[1] for p in pairs], None)
    assert subset.fallback == "none of the 1 prompts at P0 >= 0.91 succeeds; gate off, prompts ranked by P0 instead"
    assert subset.prompts == ["a", "b"] and (subset.successes, subset.failures) == (1, 1)

"""The study's tables (tables.json) and one-page report from the per-prompt results (pure).

Outcome = whether the greedy negative completion contains X ("failure") or not ("success").
Suppression = final-layer p_first(baseline) - p_first(negative) at the decision step.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from flawforge.pressure import metrics
from flawforge.pressure.prompts import CONDITIONS
from flawforge.pressure.statistics import bootstrap_mean, logistic_with_ci
from flawforge.proto.pressure import P0_BINS, PromptRecord

OUTCOMES = ("failure", "success")

# Semantic Gravity Wells (arXiv 2601.08070), Qwen2.5-7B-Instruct bf16: the numbers this study is set beside.
PAPER = {
    "model": "Qwen2.5-7B-Instruct (bf16, A100)",
    "violation_rate_lowest_bin": 0.091, "violation_rate_highest_bin": 0.463,
    "greedy_successes": 1996, "greedy_failures": 504,
    "logistic_beta0": -2.40, "logistic_beta1": 2.27, "logistic_beta1_ci": [2.21, 2.33],
    "suppression_success": 0.228, "suppression_failure": 0.052,
    "last_layer_lens": {"baseline_failure": 0.71, "negative_failure": 0.66, "baseline_success": 0.30,
                        "negative_success": 0.08},
    "ffn_contribution_second_last_layer": {"failure": 0.386, "success": 0.097},
    "patching_delta_p": "negative for layers 0-22, +0.0004 at 23, +0.03 to +0.07 for 24-27 (residual)",
    "taxonomy": {"priming": 441, "override": 63},
}


def outcome_of(result: dict) -> str:
    return "failure" if result["conditions"]["negative"]["greedy_violation"] else "success"


def suppression(result: dict) -> float:
    c = result["conditions"]
    return c["baseline"]["lens"][-1] - c["negative"]["lens"][-1]


def prompt_row(record: PromptRecord, result: dict) -> dict:
    """One prompt's headline numbers (prompt_metrics.jsonl)."""
    c = result["conditions"]
    neg_attention = c["negative"]["attention"]
    return {
        "prompt_id": record.prompt_id, "category": record.category, "target_word": record.target_word,
        "p0_bin": record.p0_bin, **metrics_forms(record), "outcome": outcome_of(result),
        **{f"{cond}_{name}": c[cond][name] for cond in CONDITIONS
           for name in ("violation_rate", "format_adherence", "clean_success", "greedy_text", "T")},
        "suppression": suppression(result),
        **{f"negative_{name}": neg_attention[name]["global"] for name in metrics.ATTENTION_METRICS},
        "baseline_iar": c["baseline"]["attention"]["iar"]["global"],
        "taxonomy": (metrics.taxonomy(suppression(result), neg_attention["pi"]["global"])
                     if outcome_of(result) == "failure" else None),
    }


def metrics_forms(record: PromptRecord) -> dict:
    from flawforge.pressure.psem import pressure_forms

    return pressure_forms(record.p0, record.p1)


def _estimate(values: Sequence[float], bins: Sequence[str], resamples: int, seed: int) -> dict:
    return bootstrap_mean(values, bins, resamples=resamples, seed=seed).as_dict()


def _mean_curve(rows: list[list[float]]) -> list[float] | None:
    return np.asarray(rows, dtype=float).mean(0).tolist() if rows else None


def build_tables(records: list[PromptRecord], results: list[dict], patches: dict, params, *, lm_name: str,
                 num_layers: int, trace_prefix: str, elapsed: float) -> dict:
    n_boot, seed = params.bootstrap_resamples, params.seed
    rows = [prompt_row(r, res) for r, res in zip(records, results)]
    bins = [r.p0_bin for r in records]

    def by_bin(values: Sequence[float], keep: Sequence[bool] | None = None) -> dict:
        keep = keep if keep is not None else [True] * len(values)
        table = {}
        for label in P0_BINS:
            picked = [v for v, b, k in zip(values, bins, keep) if b == label and k]
            table[label] = _estimate(picked, [label] * len(picked), n_boot, seed)
        picked = [(v, b) for v, b, k in zip(values, bins, keep) if k]
        table["all"] = _estimate([v for v, _ in picked], [b for _, b in picked], n_boot, seed)
        return table

    violation = {f"{cond}_{name}": by_bin([row[f"{cond}_{name}"] for row in rows])
                 for cond in CONDITIONS for name in ("violation_rate", "format_adherence", "clean_success")}
    outcomes = [row["outcome"] for row in rows]
    supp = [row["suppression"] for row in rows]
    base_final = [res["conditions"]["baseline"]["lens"][-1] for res in results]
    relative = [s / max(b, 1e-9) for s, b in zip(supp, base_final)]
    suppression_by_bin = {
        outcome: {"absolute": by_bin(supp, [o == outcome for o in outcomes]),
                  "relative": by_bin(relative, [o == outcome for o in outcomes])} for outcome in OUTCOMES}
    attention = {
        outcome: {f"{cond}_{name}": by_bin([res["conditions"][cond]["attention"][name]["global"] for res in results],
                                           [o == outcome for o in outcomes])
                  for cond in CONDITIONS for name in metrics.ATTENTION_METRICS} for outcome in OUTCOMES}
    lens = {f"{cond}_{outcome}": _mean_curve([res["conditions"][cond]["lens"] for res, o in zip(results, outcomes)
                                              if o == outcome]) for cond in CONDITIONS for outcome in OUTCOMES}
    decomposition = {}
    for cond in CONDITIONS:
        for outcome in OUTCOMES:
            parts = [res["conditions"][cond]["decomposition"] for res, o in zip(results, outcomes) if o == outcome]
            if not parts:
                continue
            mean = np.asarray(parts, dtype=float).mean(0)  # [k, 3]
            layers = results[0]["conditions"][cond]["decomposition_layers"]
            decomposition[f"{cond}_{outcome}"] = [
                {"layer": layer, "p_in": m[0], "p_after_attn": m[1], "p_after_mlp": m[2],
                 "attn_contribution": m[1] - m[0], "mlp_contribution": m[2] - m[1]}
                for layer, m in zip(layers, mean.tolist())]
    sample_x, sample_y, clusters = [], [], []
    for record, res in zip(records, results):
        for sample in res["conditions"]["negative"]["samples"]:
            sample_x.append(record.p0)
            sample_y.append(float(bool(metrics.find_word(sample["text"], record.target_word))))
            clusters.append(record.prompt_id)
    logistic = (logistic_with_ci(sample_x, sample_y, clusters, seed=seed) if len(set(sample_y)) > 1
                else {"skipped": "every sample has the same outcome: the fit is undefined"})
    taxonomy = Counter(row["taxonomy"] for row in rows if row["taxonomy"])
    return {
        "model": lm_name, "num_layers": num_layers,
        "seeds": {"sampling": params.seed, "bootstrap": seed, "bootstrap_resamples": n_boot,
                  "logistic_resamples": logistic.get("resamples")},
        "parameters": params.model_dump(mode="json"),
        "counts": {"prompts": len(records), "by_bin": dict(Counter(bins)),
                   "by_category": dict(Counter(r.category for r in records)),
                   "samples_per_prompt_condition": params.samples, "greedy_outcomes": dict(Counter(outcomes)),
                   "patched_prompts": len(patches["prompts"])},
        "elapsed_seconds": round(elapsed, 1), "trace_blobs": trace_prefix,
        "violation_rate_by_bin": violation,
        "suppression_by_bin": suppression_by_bin,
        "attention_metrics_by_bin_outcome": attention,
        "pi_vs_violation_points": [{"prompt_id": row["prompt_id"], "pi": row["negative_pi"], "p0": row["p0"],
                                    "violation_rate": row["negative_violation_rate"], "outcome": row["outcome"]}
                                   for row in rows],
        "logit_lens_curves": lens,
        "attn_ffn_decomposition": decomposition,
        "patching_effects_by_bin": patching_table(records, results, patches, num_layers),
        "logistic_fit": logistic,
        "taxonomy": {"priming": taxonomy.get("priming", 0), "override": taxonomy.get("override", 0)},
        "reference_paper": PAPER,
    }


def patching_table(records: list[PromptRecord], results: list[dict], patches: dict, num_layers: int) -> dict:
    """Mean delta P and flip rate per layer, per patch kind, by bin and outcome, and averaged over kinds."""
    by_id = {r.prompt_id: (r, res) for r, res in zip(records, results)}
    table: dict = {"subset": patches["rule"], "prompts": len(patches["prompts"]), "kinds": {}}
    kinds = sorted({k for effect in patches["effects"].values() for k in effect})
    for kind in kinds:
        groups: dict[str, list] = {}
        for prompt_id, effect in patches["effects"].items():
            record, res = by_id[prompt_id]
            for group in ("all", record.p0_bin, outcome_of(res)):
                groups.setdefault(group, []).append(effect[kind])
        table["kinds"][kind] = {
            group: {"n": len(effects),
                    "delta_p": np.mean([e["delta_p"] for e in effects], 0).tolist(),
                    "delta_p_first": np.mean([e["delta_p_first"] for e in effects], 0).tolist(),
                    "flip_rate": np.mean([e["flip"] for e in effects], 0).tolist()}
            for group, effects in groups.items()}
    if kinds:
        table["mean_over_kinds"] = {
            "delta_p": np.mean([table["kinds"][k]["all"]["delta_p"] for k in kinds], 0).tolist(),
            "flip_rate": np.mean([table["kinds"][k]["all"]["flip_rate"] for k in kinds], 0).tolist()}
    return table


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def report(table: dict, images: list[str]) -> str:
    """report.md: the figures and the key numbers on one page, beside the reference paper's."""
    paper = PAPER
    vr = table["violation_rate_by_bin"]["negative_violation_rate"]
    supp = table["suppression_by_bin"]
    lens = table["logit_lens_curves"]
    fit = table["logistic_fit"]
    counts = table["counts"]
    same_model = table["model"].lower().startswith("qwen2.5-7b")
    label = "" if same_model else f" (a different model: {paper['model']})"

    def last(curve):
        return None if not curve else curve[-1]

    decomposition = table["attn_ffn_decomposition"]

    def ffn(outcome):
        rows = decomposition.get(f"negative_{outcome}")
        return rows[-2]["mlp_contribution"] if rows and len(rows) >= 2 else None

    lines = [
        f"# Semantic-pressure study: {table['model']}",
        "",
        f"{counts['prompts']} prompts ({', '.join(f'{b}: {n}' for b, n in sorted(counts['by_bin'].items()))}), "
        f"{counts['samples_per_prompt_condition']} samples per prompt and condition, "
        f"{counts['patched_prompts']} prompts patched; run time {table['elapsed_seconds']:.0f} s. "
        f"Intervals: 95% bootstrap ({table['seeds']['bootstrap_resamples']} resamples of prompts within bins, "
        f"seed {table['seeds']['bootstrap']}).",
        "",
        f"| quantity | this run ({table['model']}) | reference paper{label} |",
        "| --- | --- | --- |",
        f"| violation rate, P0 bin 0.0-0.2 | {_fmt(vr['0.0-0.2']['mean'])} (n={vr['0.0-0.2']['n']}) | "
        f"{paper['violation_rate_lowest_bin']} |",
        f"| violation rate, P0 bin 0.8-1.0 | {_fmt(vr['0.8-1.0']['mean'])} (n={vr['0.8-1.0']['n']}) | "
        f"{paper['violation_rate_highest_bin']} |",
        f"| violation rate, all | {_fmt(vr['all']['mean'])} [{_fmt(vr['all']['ci_low'])}, {_fmt(vr['all']['ci_high'])}] | |",
        f"| greedy outcomes (success / failure) | {counts['greedy_outcomes'].get('success', 0)} / "
        f"{counts['greedy_outcomes'].get('failure', 0)} | {paper['greedy_successes']} / {paper['greedy_failures']} |",
        f"| logistic beta0, beta1 [CI] | " + (
            f"{_fmt(fit['beta0'], 2)}, {_fmt(fit['beta1'], 2)} [{_fmt(fit['beta1_ci'][0], 2)}, "
            f"{_fmt(fit['beta1_ci'][1], 2)}]" if "beta1" in fit else fit.get("skipped", "n/a"))
        + f" | {paper['logistic_beta0']}, {paper['logistic_beta1']} {paper['logistic_beta1_ci']} |",
        f"| suppression, successes / failures | {_fmt(supp['success']['absolute']['all']['mean'], 4)} / "
        f"{_fmt(supp['failure']['absolute']['all']['mean'], 4)} | {paper['suppression_success']} / "
        f"{paper['suppression_failure']} |",
        f"| last-layer lens, baseline/failure, negative/failure | {_fmt(last(lens.get('baseline_failure')), 4)}, "
        f"{_fmt(last(lens.get('negative_failure')), 4)} | {paper['last_layer_lens']['baseline_failure']}, "
        f"{paper['last_layer_lens']['negative_failure']} |",
        f"| last-layer lens, baseline/success, negative/success | {_fmt(last(lens.get('baseline_success')), 4)}, "
        f"{_fmt(last(lens.get('negative_success')), 4)} | {paper['last_layer_lens']['baseline_success']}, "
        f"{paper['last_layer_lens']['negative_success']} |",
        f"| MLP contribution, second-last layer, failures / successes | {_fmt(ffn('failure'), 4)} / "
        f"{_fmt(ffn('success'), 4)} | {paper['ffn_contribution_second_last_layer']['failure']} / "
        f"{paper['ffn_contribution_second_last_layer']['success']} |",
        f"| taxonomy of failures (priming / override) | {table['taxonomy']['priming']} / "
        f"{table['taxonomy']['override']} | {paper['taxonomy']['priming']} / {paper['taxonomy']['override']} |",
        f"| patching delta P by layer (residual) | see patching.png | {paper['patching_delta_p']} |",
        "",
    ]
    if table["patching_effects_by_bin"]["subset"].get("fallback"):
        lines += [f"Patching subset: {table['patching_effects_by_bin']['subset']['fallback']}.", ""]
    lines += [f"![{name}]({name})" for name in images] + [""]
    return "\n".join(lines)

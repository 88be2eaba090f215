"""The study's tables (tables.json) and one-page report from the per-prompt results (pure).

Outcome = whether the greedy negative completion contains X ("failure") or not ("success").
Suppression = final-layer p_first(baseline) - p_first(negative) at the decision step.

Multi-token targets: p_first, and with it the logit lens, suppression, the attention / MLP
decomposition and the taxonomy, is the probability of X's single-token forms. A prompt whose target has
no single-token form is left out of those (and counted), not measured by its first word-piece. The
violation and format rates, the attention metrics and patching's ΔP (a sequence probability over S(X))
cover every prompt.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from flawforge.pressure import metrics
from flawforge.pressure.prompts import CONDITIONS
from flawforge.pressure.psem import pressure_forms
from flawforge.pressure.statistics import bootstrap_curve, bootstrap_mean, logistic_with_ci
from flawforge.proto.pressure import (
    ATTENTION_METRICS, P0_BINS, PatchSubset, PromptPatches, PromptRecord, PromptResult,
)

OUTCOMES = ("failure", "success")
BEHAVIOUR = ("violation_rate", "format_adherence", "format_adherence_first_line", "clean_success",
             "clean_success_first_line")
MULTI_TOKEN_POLICY = ("p_first (logit lens, suppression, attention / MLP decomposition, taxonomy) is the probability "
                      "of the target's single-token forms; prompts whose target has none are left out of those "
                      "measures, not read through a first word-piece. Violation and format rates, attention "
                      "metrics and patching's ΔP (a sequence probability over every form) cover every prompt.")

# Semantic Gravity Wells (arXiv 2601.08070), Qwen2.5-7B-Instruct bf16: the numbers this study is set beside.
PAPER = {
    "model": "Qwen2.5-7B-Instruct (bf16, A100)", "blocks": 28,
    "violation_rate_lowest_bin": 0.091, "violation_rate_highest_bin": 0.463,
    "greedy_successes": 1996, "greedy_failures": 504,
    "logistic_beta0": -2.40, "logistic_beta1": 2.27, "logistic_beta1_ci": [2.21, 2.33],
    "suppression_success": 0.228, "suppression_failure": 0.052,
    "last_layer_lens": {"baseline_failure": 0.71, "negative_failure": 0.66, "baseline_success": 0.30,
                        "negative_success": 0.08},
    "ffn_last_block": {"failure": 0.386, "success": 0.097, "block": "layer 27 of 0-27, index -1 from the end"},
    "decomposition_blocks": "18-27 of 28 (the last 10)",
    "patching_delta_p": "residual (A): negative for layers 0-22, +0.0004 at 23, +0.03 to +0.07 for 24-27",
    "taxonomy": {"priming": 441, "override": 63},
}


def suppression(result: PromptResult) -> float | None:
    base, neg = result.conditions["baseline"].lens, result.conditions["negative"].lens
    return None if base is None or neg is None else base[-1] - neg[-1]


def taxonomy_of(result: PromptResult) -> str | None:
    """A failure's kind (None for a success, or where X has no single-token form)."""
    found = suppression(result)
    if result.outcome != "failure" or found is None:
        return None
    return metrics.taxonomy(found, result.conditions["negative"].attention["pi"].mean)


def prompt_row(record: PromptRecord, result: PromptResult) -> dict:
    """One prompt's headline numbers (prompt_metrics.jsonl)."""
    c = result.conditions
    return {
        "prompt_id": record.prompt_id, "category": record.category, "target_word": record.target_word,
        "p0_bin": record.p0_bin, **pressure_forms(record.p0, record.p1), "outcome": result.outcome,
        "single_token_target": c["negative"].lens is not None,
        **{f"{cond}_{name}": getattr(c[cond], name) for cond in CONDITIONS for name in BEHAVIOUR},
        **{f"{cond}_greedy_text": c[cond].greedy_text for cond in CONDITIONS},
        **{f"{cond}_T": c[cond].T for cond in CONDITIONS},
        "suppression": suppression(result),
        **{f"negative_{name}": c["negative"].attention[name].mean for name in ATTENTION_METRICS},
        "baseline_iar": c["baseline"].attention["iar"].mean,
        "taxonomy": taxonomy_of(result),
    }


class _Grouped:
    """Bootstrap estimates over the prompts, by P0 bin and over all of them (resampled within bins)."""

    def __init__(self, bins: Sequence[str], resamples: int, seed: int):
        self.bins, self.resamples, self.seed = list(bins), resamples, seed

    def by_bin(self, values: Sequence[float | None], keep: Sequence[bool] | None = None) -> dict:
        """Every bin (n = 0 where none) and "all"; a value of None (not measured) is left out."""
        keep = keep if keep is not None else [True] * len(values)
        picked = [(v, b) for v, b, k in zip(values, self.bins, keep) if k and v is not None]
        table = {label: self.mean([v for v, b in picked if b == label]) for label in P0_BINS}
        table["all"] = self.mean([v for v, _ in picked], [b for _, b in picked])
        return table

    def mean(self, values: Sequence[float], groups: Sequence[str] | None = None) -> dict:
        return bootstrap_mean(values, groups, resamples=self.resamples, seed=self.seed).as_dict()

    def curve(self, rows: Sequence[Sequence[float]], groups: Sequence[str] | None = None) -> dict | None:
        return bootstrap_curve(rows, groups, resamples=self.resamples, seed=self.seed)


def build_tables(records: list[PromptRecord], results: list[PromptResult], subset: PatchSubset,
                 patches: list[PromptPatches], params, heads: dict, *, kinds: dict[str, dict], lm_name: str,
                 num_layers: int, trace_prefix: str, clock: dict) -> dict:
    """`heads`: the per-head attention maps by outcome (read from the traces); `kinds`: each patch kind's
    `reference` letter and `label`, in the order reported; `clock`: the run's time (see run_time)."""
    n_boot, seed = params.bootstrap_resamples, params.seed
    rows = [prompt_row(r, res) for r, res in zip(records, results)]
    bins = [r.p0_bin for r in records]
    grouped = _Grouped(bins, n_boot, seed)
    outcomes = [res.outcome for res in results]
    measured = [res.conditions["negative"].lens is not None for res in results]

    violation = {f"{cond}_{name}": grouped.by_bin([row[f"{cond}_{name}"] for row in rows])
                 for cond in CONDITIONS for name in BEHAVIOUR}
    supp = [row["suppression"] for row in rows]
    relative = [None if s is None else s / max(res.conditions["baseline"].lens[-1], 1e-9)
                for s, res in zip(supp, results)]
    suppression_by_bin = {
        outcome: {"absolute": grouped.by_bin(supp, [o == outcome for o in outcomes]),
                  "relative": grouped.by_bin(relative, [o == outcome for o in outcomes])} for outcome in OUTCOMES}
    attention = {
        outcome: {f"{cond}_{name}": grouped.by_bin([res.conditions[cond].attention[name].mean for res in results],
                                                   [o == outcome for o in outcomes])
                  for cond in CONDITIONS for name in ATTENTION_METRICS} for outcome in OUTCOMES}

    def lens_rows(cond: str, outcome: str) -> tuple[list, list]:
        picked = [(res.conditions[cond].lens, b) for res, o, b in zip(results, outcomes, bins)
                  if o == outcome and res.conditions[cond].lens is not None]
        return [c for c, _ in picked], [b for _, b in picked]

    lens = {f"{cond}_{outcome}": grouped.curve(*lens_rows(cond, outcome)) for cond in CONDITIONS for outcome in OUTCOMES}
    decomposition = {f"{cond}_{outcome}": decomposition_rows(
        [res.conditions[cond].decomposition for res, o in zip(results, outcomes)
         if o == outcome and res.conditions[cond].decomposition is not None],
        [b for res, o, b in zip(results, outcomes, bins)
         if o == outcome and res.conditions[cond].decomposition is not None], num_layers, grouped)
        for cond in CONDITIONS for outcome in OUTCOMES}
    last = num_layers - 1
    ffn_last = {"block": last, "from_end": -1}
    for outcome in OUTCOMES:
        found = [row for row in decomposition[f"negative_{outcome}"] if row["block"] == last]
        ffn_last[outcome] = found[0]["mlp_contribution"] if found else None

    sample_x, sample_y, clusters = [], [], []
    for record, res in zip(records, results):
        for sample in res.conditions["negative"].samples:
            sample_x.append(record.p0)
            sample_y.append(float(bool(metrics.find_word(sample.text, record.target_word))))
            clusters.append(record.prompt_id)
    logistic = (logistic_with_ci(sample_x, sample_y, clusters, seed=seed) if len(set(sample_y)) > 1
                else {"skipped": "every sample has the same outcome: the fit is undefined"})
    taxonomy = Counter(row["taxonomy"] for row in rows if row["taxonomy"])
    return {
        "model": lm_name, "num_layers": num_layers,
        "seeds": {"sampling": params.seed, "bootstrap": seed, "bootstrap_resamples": n_boot,
                  "logistic_resamples": logistic.get("resamples")},
        "parameters": params.model_dump(mode="json"),
        "counts": {"prompts": len(records), "by_bin": {b: bins.count(b) for b in P0_BINS},
                   "by_category": dict(Counter(r.category for r in records)),
                   "samples_per_prompt_condition": params.samples, "greedy_outcomes": dict(Counter(outcomes)),
                   "patched_prompts": len(patches), "single_token_targets": sum(measured),
                   "multi_token_targets": len(measured) - sum(measured)},
        "multi_token_policy": MULTI_TOKEN_POLICY,
        "run_time": run_time(clock),
        "trace_blobs": trace_prefix,
        "violation_rate_by_bin": violation,
        "suppression_by_bin": suppression_by_bin,
        "attention_metrics_by_bin_outcome": attention,
        "attention_heads": heads,
        "pi_vs_violation_points": [{"prompt_id": row["prompt_id"], "pi": row["negative_pi"], "p0": row["p0"],
                                    "violation_rate": row["negative_violation_rate"], "outcome": row["outcome"]}
                                   for row in rows],
        "logit_lens_curves": lens,
        "attn_ffn_decomposition": decomposition,
        "ffn_last_block": ffn_last,
        "patching_effects_by_bin": patching_table(records, results, subset, patches, kinds, grouped),
        "logistic_fit": logistic,
        "taxonomy": {"priming": taxonomy.get("priming", 0), "override": taxonomy.get("override", 0)},
        "reference_paper": PAPER,
    }


def run_time(clock: dict) -> dict:
    """The run's time over all its invocations: the stored batches' and patched prompts' own seconds (whichever
    invocation computed them), this invocation's, and the wall time since the first one started."""
    return {"batches_seconds": round(clock["batch_seconds"], 1), "patching_seconds": round(clock["patch_seconds"], 1),
            "computed_seconds": round(clock["batch_seconds"] + clock["patch_seconds"], 1),
            "invocations": clock["invocations"], "this_invocation_seconds": round(clock["invocation_seconds"], 1),
            "since_first_start_seconds": round(clock["since_first_start"], 1)}


def decomposition_rows(parts: list, bins: list[str], num_layers: int, grouped: _Grouped) -> list[dict]:
    """Per decomposed block: mean p_first read at the block's input, after its attention and after its MLP,
    and the two contributions with their intervals."""
    if not parts:
        return []
    found = []
    for index, block in enumerate(parts[0].blocks):
        p_in = [p.p_in[index] for p in parts]
        p_attn = [p.p_after_attn[index] for p in parts]
        p_out = [p.p_after_mlp[index] for p in parts]
        found.append({
            "block": block, "from_end": block - num_layers,
            "p_in": float(np.mean(p_in)), "p_after_attn": float(np.mean(p_attn)), "p_after_mlp": float(np.mean(p_out)),
            "attn_contribution": grouped.mean([b - a for a, b in zip(p_in, p_attn)], bins),
            "mlp_contribution": grouped.mean([b - a for a, b in zip(p_attn, p_out)], bins)})
    return found


def patching_table(records: list[PromptRecord], results: list[PromptResult], subset: PatchSubset,
                   patches: list[PromptPatches], kinds: dict[str, dict], grouped: _Grouped) -> dict:
    """Per patch kind, separately: mean ΔP, ΔP of p_first and flip rate per block with 95% bootstrap intervals,
    over all patched prompts (resampled within bins), per P0 bin and per outcome."""
    by_id = {r.prompt_id: (r, res) for r, res in zip(records, results)}
    table: dict = {"subset": subset.model_dump(mode="json"), "prompts": len(patches), "kinds": {}}
    present = [k for k in kinds if any(k in p.kinds for p in patches)]
    for kind in present:
        groups: dict[str, list[tuple]] = {}
        for prompt in patches:
            record, res = by_id[prompt.prompt_id]
            for group in ("all", record.p0_bin, res.outcome):
                groups.setdefault(group, []).append((prompt.kinds[kind], record.p0_bin))
        found = {}
        for group in ("all", *P0_BINS, *OUTCOMES):
            effects = groups.get(group, [])
            within = [b for _, b in effects] if group == "all" else None
            first = [(e.delta_p_first, b) for e, b in effects if e.delta_p_first is not None]
            found[group] = {
                "n": len(effects),
                "delta_p": grouped.curve([e.delta_p for e, _ in effects], within),
                "delta_p_first": grouped.curve([d for d, _ in first], [b for _, b in first] if within else None),
                "flip_rate": grouped.curve([[float(f) for f in e.flip] for e, _ in effects], within)}
        table["kinds"][kind] = {**kinds[kind], "groups": found}
    return table


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _interval(estimate: dict | None, digits: int = 3) -> str:
    if not estimate or not estimate.get("n"):
        return "n/a (n=0)"
    return (f"{_fmt(estimate['mean'], digits)} [{_fmt(estimate['ci_low'], digits)}, "
            f"{_fmt(estimate['ci_high'], digits)}] (n={estimate['n']})")


def _ranges(blocks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    spans: list[list[int]] = []
    for block in blocks:
        if spans and block == spans[-1][1] + 1:
            spans[-1][1] = block
        else:
            spans.append([block, block])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans) or "none"


def _sign_summary(curve: dict | None) -> str:
    if not curve:
        return "n/a"
    mean = curve["mean"]
    negative = [b for b, v in enumerate(mean) if v < 0]
    positive = [b for b, v in enumerate(mean) if v > 0]
    top = int(np.argmax(mean))
    return (f"negative for blocks {_ranges(negative)}, positive for {_ranges(positive)}; largest "
            f"{mean[top]:+.4f} at block {top}")


def report(table: dict, images: list[str]) -> str:
    """report.md: the figures and the key numbers on one page, each beside the reference paper's like for like."""
    paper = PAPER
    vr = table["violation_rate_by_bin"]
    supp = table["suppression_by_bin"]
    lens = table["logit_lens_curves"]
    fit = table["logistic_fit"]
    counts = table["counts"]
    blocks = table["num_layers"]
    same_model = table["model"].lower().startswith("qwen2.5-7b")
    label = "" if same_model else f" (a different model: {paper['model']})"
    ffn = table["ffn_last_block"]
    run = table["run_time"]
    params = table["parameters"]

    decomposed = sorted({row["block"] for rows in table["attn_ffn_decomposition"].values() for row in rows})

    def last(curve):
        return None if not curve else curve["mean"][-1]

    lines = [
        f"# Semantic-pressure study: {table['model']}",
        "",
        f"{counts['prompts']} prompts ({', '.join(f'{b}: {n}' for b, n in counts['by_bin'].items())}), "
        f"{counts['samples_per_prompt_condition']} samples per prompt and condition, "
        f"{counts['patched_prompts']} prompts patched. Intervals: 95% bootstrap "
        f"({table['seeds']['bootstrap_resamples']} resamples of prompts within P0 bins, seed "
        f"{table['seeds']['bootstrap']}).",
        "",
        f"Run time of the whole run: {run['computed_seconds']:.0f} s computed (batches {run['batches_seconds']:.0f} s, "
        f"patching {run['patching_seconds']:.0f} s, each part's own time whichever invocation ran it) over "
        f"{run['invocations']} invocation(s); {run['since_first_start_seconds']:.0f} s of wall time since the first "
        f"started; this invocation {run['this_invocation_seconds']:.0f} s.",
        "",
        f"Multi-token targets: {counts['single_token_targets']} prompts have a single-token target, "
        f"{counts['multi_token_targets']} do not. {table['multi_token_policy']}",
        "",
        f"| quantity | this run ({table['model']}, {blocks} blocks) | reference paper{label} |",
        "| --- | --- | --- |",
        f"| violation rate, P0 bin 0.0-0.2 | {_interval(vr['negative_violation_rate']['0.0-0.2'])} | "
        f"{paper['violation_rate_lowest_bin']} |",
        f"| violation rate, P0 bin 0.8-1.0 | {_interval(vr['negative_violation_rate']['0.8-1.0'])} | "
        f"{paper['violation_rate_highest_bin']} |",
        f"| violation rate, all prompts | {_interval(vr['negative_violation_rate']['all'])} | |",
        f"| format adherence, negative (reference rule: whole normalised completion one word) | "
        f"{_interval(vr['negative_format_adherence']['all'])} | |",
        f"| format adherence, negative (first-line rule) | {_interval(vr['negative_format_adherence_first_line']['all'])}"
        " | |",
        f"| clean success, negative (reference rule / first-line rule) | {_fmt(vr['negative_clean_success']['all']['mean'])}"
        f" / {_fmt(vr['negative_clean_success_first_line']['all']['mean'])} | |",
        f"| greedy outcomes (success / failure) | {counts['greedy_outcomes'].get('success', 0)} / "
        f"{counts['greedy_outcomes'].get('failure', 0)} | {paper['greedy_successes']} / {paper['greedy_failures']} |",
        "| logistic beta0, beta1 [CI] | " + (
            f"{_fmt(fit['beta0'], 2)}, {_fmt(fit['beta1'], 2)} [{_fmt(fit['beta1_ci'][0], 2)}, "
            f"{_fmt(fit['beta1_ci'][1], 2)}]" if "beta1" in fit else fit.get("skipped", "n/a"))
        + f" | {paper['logistic_beta0']}, {paper['logistic_beta1']} {paper['logistic_beta1_ci']} |",
        f"| suppression, successes | {_interval(supp['success']['absolute']['all'], 4)} | {paper['suppression_success']} |",
        f"| suppression, failures | {_interval(supp['failure']['absolute']['all'], 4)} | {paper['suppression_failure']} |",
        f"| last-layer lens, baseline/failure, negative/failure | {_fmt(last(lens.get('baseline_failure')), 4)}, "
        f"{_fmt(last(lens.get('negative_failure')), 4)} | {paper['last_layer_lens']['baseline_failure']}, "
        f"{paper['last_layer_lens']['negative_failure']} |",
        f"| last-layer lens, baseline/success, negative/success | {_fmt(last(lens.get('baseline_success')), 4)}, "
        f"{_fmt(last(lens.get('negative_success')), 4)} | {paper['last_layer_lens']['baseline_success']}, "
        f"{paper['last_layer_lens']['negative_success']} |",
        f"| MLP contribution at the last block (block {ffn['block']}, index -1), failures | "
        f"{_interval(ffn.get('failure'), 4)} | {paper['ffn_last_block']['failure']} ({paper['ffn_last_block']['block']}) |",
        f"| MLP contribution at the last block (block {ffn['block']}, index -1), successes | "
        f"{_interval(ffn.get('success'), 4)} | {paper['ffn_last_block']['success']} |",
        f"| taxonomy of failures (priming / override) | {table['taxonomy']['priming']} / "
        f"{table['taxonomy']['override']} | {paper['taxonomy']['priming']} / {paper['taxonomy']['override']} |",
        "",
        f"Attention / MLP decomposition over blocks {_ranges(decomposed)} of 0-{blocks - 1} (parameters "
        f"{params['decompose_first']}..{params['decompose_last']}, negative from the end; the paper's figure: "
        f"{paper['decomposition_blocks']}); see attn_ffn.png.",
        "",
        "## Activation patching, each kind on its own",
        "",
    ]
    patching = table["patching_effects_by_bin"]
    if patching["subset"].get("fallback"):
        lines += [f"Subset: {patching['subset']['fallback']}.", ""]
    lines += ["| kind | reference | ΔP by block (mean over prompts) | ΔP at the last block [CI] | flip rate at the "
              "last block [CI] |", "| --- | --- | --- | --- | --- |"]
    for kind, entry in patching["kinds"].items():
        groups = entry["groups"]["all"]

        def at_last(curve):
            return {"mean": curve["mean"][-1], "ci_low": curve["ci_low"][-1], "ci_high": curve["ci_high"][-1],
                    "n": curve["n"]} if curve else None

        lines.append(f"| {kind}: {entry['label']} | {entry['reference'] or 'ours'} | {_sign_summary(groups['delta_p'])} | "
                     f"{_interval(at_last(groups['delta_p']), 4)} | {_interval(at_last(groups['flip_rate']))} |")
    lines += ["", "Flip: the patched greedy continuation's violation differs from the unpatched one's; A and B keep "
              "their patch on while continuing (each new token's activation overwritten with the baseline's last "
              "one), C and D's copied entries stay in the cache, as the reference continues.",
              "", f"The paper (its tables.json averages the kinds A-D; the paper describes A): {paper['patching_delta_p']}.",
              "", "## Violation rate by P0 bin (negative prompt)", "", "| P0 bin | violation rate [CI] | "
              "format adherence (reference rule) | format adherence (first line) |", "| --- | --- | --- | --- |"]
    for b in (*P0_BINS, "all"):
        lines.append(f"| {b} | {_interval(vr['negative_violation_rate'][b])} | "
                     f"{_fmt(vr['negative_format_adherence'][b]['mean'])} | "
                     f"{_fmt(vr['negative_format_adherence_first_line'][b]['mean'])} |")
    lines += ["", *[f"![{name}]({name})" for name in images], ""]
    return "\n".join(lines)

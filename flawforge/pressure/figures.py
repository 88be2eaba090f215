"""The study's figures as PNG bytes, drawn from tables.json alone (matplotlib, no display).

Every estimate is drawn with its 95% bootstrap interval (error bars or a shaded band); every P0 bin
has its place on a bin axis, an empty one marked n=0.
"""
from __future__ import annotations

import io

import numpy as np

from flawforge.proto.pressure import P0_BINS

CONDITION_STYLE = {"baseline": ("tab:blue", "baseline prompt"), "negative": ("tab:red", 'negative prompt ("do not use X")')}
OUTCOME_STYLE = {"failure": ("tab:red", "failures"), "success": ("tab:green", "successes")}
BIN_COLORS = dict(zip(P0_BINS, ("#9ecae1", "#6baed6", "#3182bd", "#08519c", "#08306b")))
LENS_FLOOR = 1e-12  # a log axis cannot show 0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(rows: int, cols: int, width: float, height: float):
    return _pyplot().subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False,
                              layout="constrained")


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    _pyplot().close(fig)
    return buffer.getvalue()


def _errors(rows: list[dict]) -> list[list[float]]:
    """Error-bar lengths below and above each mean (0 where there is no estimate)."""
    low = [r["mean"] - r["ci_low"] if r and r.get("n") else 0 for r in rows]
    high = [r["ci_high"] - r["mean"] if r and r.get("n") else 0 for r in rows]
    return [low, high]


def _empty(ax, text: str) -> None:
    """A panel with nothing to draw says so, instead of an empty frame."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, color="grey", transform=ax.transAxes)


def _integer_ticks(axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _bin_ticks(ax, counts: dict) -> None:
    ax.set_xticks(range(len(P0_BINS)), [f"{b}\nn={counts.get(b, 0)}" for b in P0_BINS], fontsize=8)
    ax.set_xlim(-0.5, len(P0_BINS) - 0.5)  # every bin has its place, filled or not
    ax.set_xlabel("P0 bin (semantic pressure under the baseline prompt)")


def _band(ax, curve: dict | None, color: str, label: str, x=None, floor: float | None = None) -> None:
    if not curve:
        return
    x = np.arange(len(curve["mean"])) if x is None else x
    mean, low, high = (np.asarray(curve[k]) for k in ("mean", "ci_low", "ci_high"))
    if floor is not None:
        mean, low, high = (np.maximum(v, floor) for v in (mean, low, high))
    ax.plot(x, mean, color=color, label=f"{label} (n={curve['n']})")
    ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)


def failure_curve(table: dict) -> bytes:
    fig, axes = _figure(1, 2, 5.6, 4.4)
    ax = axes[0, 0]
    for cond, shift in (("negative", -0.05), ("baseline", 0.05)):
        rows = table["violation_rate_by_bin"][f"{cond}_violation_rate"]
        estimates = [rows[b] for b in P0_BINS]
        color, label = CONDITION_STYLE[cond]
        ax.errorbar(np.arange(len(P0_BINS)) + shift, [r["mean"] for r in estimates], yerr=_errors(estimates),
                    marker="o", capsize=4, color=color, label=label)
    _bin_ticks(ax, table["counts"]["by_bin"])
    ax.set_ylabel("violation rate (share of samples containing X)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("by P0 bin, 95% bootstrap intervals", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    # Per prompt, against P0 itself: the bins say little when a model's P0 crowds into one of them.
    ax = axes[0, 1]
    points = table["pi_vs_violation_points"]
    ax.scatter([p["p0"] for p in points], [p["violation_rate"] for p in points], s=16, color="tab:red", alpha=0.7,
               label="one prompt (negative prompt)")
    fit = table["logistic_fit"]
    if "beta1" in fit and points:
        x = np.linspace(0, max(p["p0"] for p in points), 200)
        ax.plot(x, 1 / (1 + np.exp(-(fit["beta0"] + fit["beta1"] * x))), color="black",
                label=f"logistic fit over samples: β0={fit['beta0']:.2f}, β1={fit['beta1']:.2f}")
    ax.set_xlabel("P0 of the prompt")
    ax.set_ylabel("violation rate over the prompt's samples")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("per prompt", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Failure curve: the model says the word it was told not to use ({table['model']})")
    return _png(fig)


def logit_lens(table: dict) -> bytes:
    fig, axes = _figure(1, 2, 5.4, 4.2)
    for ax, outcome in zip(axes[0], ("failure", "success")):
        curves = {cond: table["logit_lens_curves"].get(f"{cond}_{outcome}") for cond in ("baseline", "negative")}
        if not any(curves.values()):
            _empty(ax, f"no greedy {OUTCOME_STYLE[outcome][1]} with a single-token target")
            continue
        for cond, curve in curves.items():
            color, label = CONDITION_STYLE[cond]
            _band(ax, curve, color, label, floor=LENS_FLOOR)
        ax.set_yscale("log")
        ax.set_title(f"greedy {OUTCOME_STYLE[outcome][1]}", fontsize=10)
        ax.set_xlabel(f"layer (0 = embeddings, {table['num_layers']} = after the last block)")
        _integer_ticks(ax.xaxis)
        ax.set_ylabel("p_first: P(X's single-token forms), log scale")
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"Logit lens at the decision step, 95% bootstrap bands: {table['model']}")
    return _png(fig)


def patching(table: dict) -> bytes:
    kinds = table["patching_effects_by_bin"]["kinds"]
    fig, axes = _figure(max(1, len(kinds)), 2, 5.6, 2.9)
    for row, (kind, entry) in enumerate(kinds.items()):
        groups = entry["groups"]
        name = f"{entry['reference']}: {kind}" if entry["reference"] else kind
        ax_delta, ax_flip = axes[row]
        _band(ax_delta, groups["all"]["delta_p"], "black", "all patched prompts")
        for b in P0_BINS:
            curve = groups[b]["delta_p"]
            if curve:
                ax_delta.plot(range(len(curve["mean"])), curve["mean"], color=BIN_COLORS[b], lw=1,
                              label=f"P0 {b} (n={curve['n']})")
        ax_delta.axhline(0, color="grey", lw=0.8)
        ax_delta.set_ylabel("ΔP = P(X | patched) − P(X)", fontsize=8)
        ax_delta.set_title(f"{name}: {entry['label']}", fontsize=9)
        _band(ax_flip, groups["all"]["flip_rate"], "tab:purple", "all patched prompts")
        for outcome in ("failure", "success"):
            curve = groups[outcome]["flip_rate"]
            if curve:
                color, label = OUTCOME_STYLE[outcome]
                ax_flip.plot(range(len(curve["mean"])), curve["mean"], color=color, lw=1, label=f"{label} (n={curve['n']})")
        ax_flip.set_ylim(-0.02, 1.02)
        ax_flip.set_ylabel("flip rate", fontsize=8)
        ax_flip.set_title(f"{name}: the greedy continuation's violation flips", fontsize=9)
        for ax in (ax_delta, ax_flip):
            ax.legend(fontsize=7, loc="upper left")
            ax.set_xlabel("patched block", fontsize=8)
            _integer_ticks(ax.xaxis)
    n = table["patching_effects_by_bin"]["prompts"]
    if not kinds:
        _empty(axes[0, 0], "no prompt patched")
        _empty(axes[0, 1], "")
    fig.suptitle(f"Activation patching baseline → negative at the last position, each kind on its own\n"
                 f"95% bootstrap bands, {n} prompts, {table['model']}")
    return _png(fig)


def attention_by_bin(table: dict) -> bytes:
    names = {"iar": "IAR: instruction vs question", "nf": "NF: negation share of the instruction",
             "tmf": "TMF: target-mention share", "pi": "PI = TMF − NF"}
    fig, axes = _figure(2, 2, 5.0, 3.6)
    for ax, (name, title) in zip(axes.flat, names.items()):
        for outcome, shift in (("failure", -0.06), ("success", 0.06)):
            rows = table["attention_metrics_by_bin_outcome"][outcome][f"negative_{name}"]
            estimates = [rows[b] for b in P0_BINS]
            color, label = OUTCOME_STYLE[outcome]
            ax.errorbar(np.arange(len(P0_BINS)) + shift, [r["mean"] for r in estimates], yerr=_errors(estimates),
                        marker="o", capsize=3, color=color, label=f"{label} (n={rows['all']['n']})")
        ax.set_xticks(range(len(P0_BINS)), P0_BINS, fontsize=8)
        ax.set_xlim(-0.5, len(P0_BINS) - 0.5)
        ax.set_xlabel("P0 bin")
        ax.set_ylabel("negative prompt, decision step", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"Attention metrics by pressure and outcome, 95% bootstrap intervals: {table['model']}")
    return _png(fig)


def attention_heads(table: dict) -> bytes:
    heads = table["attention_heads"]
    maps = (("prohibition_mass", "M(prohibition line)"), ("pi", "PI = TMF − NF"))
    fig, axes = _figure(2, 3, 3.8, 3.8)
    for row, (name, title) in enumerate(maps):
        found = heads.get(name, {})
        for col, outcome in enumerate(("failure", "success")):
            ax = axes[row, col]
            if outcome not in found:
                _empty(ax, f"{title}:\nno greedy {OUTCOME_STYLE[outcome][1]}")
                continue
            image = ax.imshow(np.asarray(found[outcome]), aspect="auto", cmap="viridis", origin="lower")
            fig.colorbar(image, ax=ax, shrink=0.85)
            ax.set_title(f"{title}, {OUTCOME_STYLE[outcome][1]} (n={heads['n'].get(outcome, 0)})", fontsize=9)
        ax = axes[row, 2]
        if "failure" in found and "success" in found:
            difference = np.asarray(found["failure"]) - np.asarray(found["success"])
            bound = float(np.abs(difference).max()) or 1.0
            image = ax.imshow(difference, aspect="auto", cmap="RdBu_r", vmin=-bound, vmax=bound, origin="lower")
            fig.colorbar(image, ax=ax, shrink=0.85)
            ax.set_title(f"{title}: failures − successes", fontsize=9)
        else:
            _empty(ax, "no difference to show:\none outcome only")
        for ax in axes[row]:
            ax.set_xlabel("head", fontsize=8)
            ax.set_ylabel("block", fontsize=8)
            _integer_ticks(ax.xaxis)
            _integer_ticks(ax.yaxis)
    fig.suptitle(f"Per-head attention of the decision step to the prohibition line (negative prompt): {table['model']}")
    return _png(fig)


def suppression(table: dict) -> bytes:
    fig, axes = _figure(1, 1, 7.0, 4.4)
    ax = axes[0, 0]
    width = 0.38
    labels = (*P0_BINS, "all")
    for shift, outcome in ((-width / 2, "failure"), (width / 2, "success")):
        rows = table["suppression_by_bin"][outcome]["absolute"]
        estimates = [rows[b] for b in labels]
        color, label = OUTCOME_STYLE[outcome]
        ax.bar(np.arange(len(labels)) + shift, np.nan_to_num([r["mean"] for r in estimates]), width,
               yerr=_errors(estimates), capsize=3, color=color, alpha=0.8, label=f"{label} (n={rows['all']['n']})")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("P0 bin (single-token targets)")
    ax.set_ylabel("suppression = p_first(baseline) − p_first(negative)")
    ax.set_title(f"Final-layer suppression of X by outcome, 95% bootstrap intervals: {table['model']}", fontsize=10)
    ax.legend(fontsize=8)
    return _png(fig)


def attn_ffn(table: dict) -> bytes:
    fig, axes = _figure(1, 2, 6.0, 4.4)
    for ax, outcome in zip(axes[0], ("failure", "success")):
        rows = table["attn_ffn_decomposition"].get(f"negative_{outcome}") or []
        if not rows:
            _empty(ax, f"no greedy {OUTCOME_STYLE[outcome][1]} with a single-token target")
            continue
        x = np.arange(len(rows))
        for shift, part, color, label in ((-0.2, "attn_contribution", "tab:orange", "attention adds"),
                                          (0.2, "mlp_contribution", "tab:blue", "MLP adds")):
            estimates = [row[part] for row in rows]
            ax.bar(x + shift, [e["mean"] for e in estimates], 0.4, yerr=_errors(estimates), capsize=2, color=color,
                   label=label)
        ax.set_xticks(x, [f"{row['block']}\n({row['from_end']})" for row in rows], fontsize=7)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("block (index from the end)")
        ax.set_ylabel("change in p_first (negative prompt)")
        ax.set_title(f"greedy {OUTCOME_STYLE[outcome][1]} (n={rows[0]['mlp_contribution']['n']})", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"Attention and MLP contributions to X per block, 95% bootstrap intervals: {table['model']}")
    return _png(fig)


def pi_vs_violation(table: dict) -> bytes:
    fig, axes = _figure(1, 1, 6.4, 4.4)
    ax = axes[0, 0]
    for outcome in ("failure", "success"):
        points = [p for p in table["pi_vs_violation_points"] if p["outcome"] == outcome]
        color, label = OUTCOME_STYLE[outcome]
        ax.scatter([p["pi"] for p in points], [p["violation_rate"] for p in points], s=18, color=color,
                   label=f"greedy {label} (n={len(points)})")
    ax.set_xlabel("PI = TMF − NF (negative prompt, mean over layers and heads)")
    ax.set_ylabel("violation rate over samples")
    ax.set_title(f"Priming index against violation, one point per prompt: {table['model']}", fontsize=10)
    ax.legend(fontsize=8)
    return _png(fig)


def taxonomy(table: dict) -> bytes:
    fig, axes = _figure(1, 1, 4.8, 3.6)
    ax = axes[0, 0]
    counts = table["taxonomy"]
    bars = ax.bar(list(counts), list(counts.values()), color=["tab:purple", "tab:gray"])
    ax.bar_label(bars)
    ax.set_ylabel("greedy failures (single-token targets)")
    ax.set_title(f"Failure taxonomy: {table['model']}", fontsize=10)
    return _png(fig)


def all_figures(table: dict) -> dict[str, bytes]:
    return {"failure_curve.png": failure_curve(table), "logit_lens.png": logit_lens(table),
            "patching.png": patching(table), "attention_by_bin.png": attention_by_bin(table),
            "attention_heads.png": attention_heads(table), "suppression.png": suppression(table),
            "attn_ffn.png": attn_ffn(table), "pi_vs_violation.png": pi_vs_violation(table),
            "taxonomy.png": taxonomy(table)}

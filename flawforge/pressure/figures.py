"""The study's figures as PNG bytes, drawn from tables.json alone (matplotlib, no display)."""
from __future__ import annotations

import io

import numpy as np

from flawforge.proto.pressure import P0_BINS

CONDITION_STYLE = {"baseline": ("tab:blue", "baseline prompt"), "negative": ("tab:red", 'negative prompt ("do not use X")')}
PLURAL = {"failure": "failures", "success": "successes"}
KIND_LABELS = {"residual": "residual stream", "attn_out": "attention output", "kv_question": "K/V of question tokens",
               "instruction": "instruction tokens hidden"}


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return buffer.getvalue()


def _axes(ncols: int = 1, width: float = 6.4):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, 4.2), squeeze=False)


def failure_curve(table: dict) -> bytes:
    fig, axes = _axes(2, 5.4)
    ax = axes[0, 0]
    for cond in ("negative", "baseline"):
        rows = table["violation_rate_by_bin"][f"{cond}_violation_rate"]
        means = [rows[b]["mean"] for b in P0_BINS]
        low = [rows[b]["mean"] - rows[b]["ci_low"] if rows[b]["n"] else 0 for b in P0_BINS]
        high = [rows[b]["ci_high"] - rows[b]["mean"] if rows[b]["n"] else 0 for b in P0_BINS]
        color, label = CONDITION_STYLE[cond]
        ax.errorbar(range(len(P0_BINS)), means, yerr=[low, high], marker="o", capsize=4, color=color, label=label)
    ax.set_xticks(range(len(P0_BINS)), [f"{b}\n(n={table['violation_rate_by_bin']['negative_violation_rate'][b]['n']})"
                                        for b in P0_BINS])
    ax.set_xlabel("semantic pressure P0 = P(answer is X | baseline prompt)")
    ax.set_ylabel("violation rate: share of samples containing X\n(95% bootstrap CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("by pressure bin")
    ax.legend(fontsize=8)
    # Per prompt, against P0 itself: the bins say little when a model's P0 crowds into one of them.
    ax = axes[0, 1]
    points = table["pi_vs_violation_points"]
    ax.scatter([p["p0"] for p in points], [p["violation_rate"] for p in points], s=16, color="tab:red", alpha=0.7,
               label="one prompt (negative prompt)")
    fit = table["logistic_fit"]
    if "beta1" in fit and points:
        x = np.linspace(0, max(p["p0"] for p in points), 200)
        ax.plot(x, 1 / (1 + np.exp(-(fit["beta0"] + fit["beta1"] * x))), color="black",
                label=f"logistic fit: β0={fit['beta0']:.2f}, β1={fit['beta1']:.2f}")
    ax.set_xlabel("P0 of the prompt")
    ax.set_ylabel("violation rate over the prompt's samples")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("per prompt, with the logistic fit over samples")
    ax.legend(fontsize=8)
    fig.suptitle(f"Failure curve: the model says the word it was told not to use ({table['model']})")
    return _png(fig)


def logit_lens(table: dict) -> bytes:
    fig, axes = _axes(2, 5.2)
    for ax, outcome in zip(axes[0], ("failure", "success")):
        for cond in ("baseline", "negative"):
            curve = table["logit_lens_curves"].get(f"{cond}_{outcome}")
            if curve:
                color, label = CONDITION_STYLE[cond]
                ax.plot(range(len(curve)), curve, color=color, label=label)
        n = table["counts"]["greedy_outcomes"].get(outcome, 0)
        ax.set_title(f"greedy {PLURAL[outcome]} (n={n})")
        ax.set_xlabel("layer (0 = embeddings, L = last block)")
        ax.set_ylabel("p_first: probability of X's first token")
        ax.legend(fontsize=8)
    fig.suptitle(f"Logit lens at the decision step: {table['model']}")
    return _png(fig)


def patching(table: dict) -> bytes:
    fig, axes = _axes(2, 5.2)
    kinds = table["patching_effects_by_bin"]["kinds"]
    for kind, groups in kinds.items():
        axes[0, 0].plot(range(len(groups["all"]["delta_p"])), groups["all"]["delta_p"], marker=".",
                        label=KIND_LABELS.get(kind, kind))
        axes[0, 1].plot(range(len(groups["all"]["flip_rate"])), groups["all"]["flip_rate"], marker=".",
                        label=KIND_LABELS.get(kind, kind))
    axes[0, 0].axhline(0, color="grey", lw=0.8)
    axes[0, 0].set_ylabel("ΔP = P(X | patched negative) − P(X | negative)")
    axes[0, 1].set_ylabel("flip rate: violation of the 8-token continuation changes")
    for ax in axes[0]:
        ax.set_xlabel("patched layer (block index)")
        ax.legend(fontsize=8)
    n = table["patching_effects_by_bin"]["prompts"]
    fig.suptitle(f"Activation patching baseline → negative at the last position\n({n} prompts, {table['model']})")
    return _png(fig)


def attention_by_outcome(table: dict) -> bytes:
    fig, axes = _axes()
    ax = axes[0, 0]
    names = ("iar", "nf", "tmf", "pi")
    width = 0.38
    for shift, outcome in ((-width / 2, "failure"), (width / 2, "success")):
        rows = table["attention_metrics_by_bin_outcome"][outcome]
        means = [rows[f"negative_{name}"]["all"]["mean"] for name in names]
        ax.bar(np.arange(len(names)) + shift, np.nan_to_num(means), width,
               label=f"{PLURAL[outcome]} (n={rows['negative_iar']['all']['n']})")
    ax.set_xticks(range(len(names)), ["IAR\ninstruction vs question", "NF\nnegation share", "TMF\ntarget share",
                                      "PI = TMF − NF"])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("mean over layers and heads, negative prompt")
    ax.set_title(f"Attention at the decision step by outcome: {table['model']}")
    ax.legend(fontsize=8)
    return _png(fig)


def suppression(table: dict) -> bytes:
    fig, axes = _axes()
    ax = axes[0, 0]
    width = 0.38
    for shift, outcome in ((-width / 2, "failure"), (width / 2, "success")):
        rows = table["suppression_by_bin"][outcome]["absolute"]
        means = [rows[b]["mean"] for b in (*P0_BINS, "all")]
        ax.bar(np.arange(len(P0_BINS) + 1) + shift, np.nan_to_num(means), width, label=PLURAL[outcome])
    ax.set_xticks(range(len(P0_BINS) + 1), [*P0_BINS, "all"])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("P0 bin")
    ax.set_ylabel("suppression = p_first(baseline) − p_first(negative)")
    ax.set_title(f"Final-layer suppression of X by outcome: {table['model']}")
    ax.legend(fontsize=8)
    return _png(fig)


def attn_ffn(table: dict) -> bytes:
    fig, axes = _axes(2, 5.2)
    for ax, outcome in zip(axes[0], ("failure", "success")):
        rows = table["attn_ffn_decomposition"].get(f"negative_{outcome}") or []
        layers = [row["layer"] for row in rows]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [row["attn_contribution"] for row in rows], 0.4, label="attention adds")
        ax.bar(x + 0.2, [row["mlp_contribution"] for row in rows], 0.4, label="MLP adds")
        ax.set_xticks(x, [str(layer) for layer in layers])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("block")
        ax.set_ylabel("change in p_first (negative prompt)")
        ax.set_title(f"greedy {PLURAL[outcome]}")
        ax.legend(fontsize=8)
    fig.suptitle(f"Attention and MLP contributions to X in the last blocks: {table['model']}")
    return _png(fig)


def pi_vs_violation(table: dict) -> bytes:
    fig, axes = _axes()
    ax = axes[0, 0]
    for outcome, color in (("failure", "tab:red"), ("success", "tab:green")):
        points = [p for p in table["pi_vs_violation_points"] if p["outcome"] == outcome]
        ax.scatter([p["pi"] for p in points], [p["violation_rate"] for p in points], s=18, color=color,
                   label=f"greedy {PLURAL[outcome]}")
    ax.set_xlabel("PI = TMF − NF (negative prompt, global mean)")
    ax.set_ylabel("violation rate over samples")
    ax.set_title(f"Priming index against violation, one point per prompt: {table['model']}")
    ax.legend(fontsize=8)
    return _png(fig)


def all_figures(table: dict) -> dict[str, bytes]:
    return {"failure_curve.png": failure_curve(table), "logit_lens.png": logit_lens(table),
            "patching.png": patching(table), "attention_by_outcome.png": attention_by_outcome(table),
            "suppression.png": suppression(table), "attn_ffn.png": attn_ffn(table),
            "pi_vs_violation.png": pi_vs_violation(table)}

"""Figures of chapter 4.3: the predictor's S(2) beside the measured and the article's, and one step's parts."""
from __future__ import annotations

import matplotlib.pyplot as plt

from .style import COLORS, finish

ARTICLE = "tab:gray"


def speedup_predictions(rows: list[dict], target: float = 1.5):
    """``analysis.held_out`` rows. Left: S(2) against the global batch, per model: measured (median, with
    the rounds' range), predicted, and the article's. Right: predicted against measured, both formulas."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models) + 1, figsize=(3.1 * (len(models) + 1), 3.1))
    for ax, model in zip(axes, models):
        mine = sorted((r for r in rows if r["model"] == model), key=lambda r: r["G"])
        G = [r["G"] for r in mine]
        lo, hi = ([r["measured"] - r["spread"][0] for r in mine], [r["spread"][1] - r["measured"] for r in mine])
        ax.errorbar(G, [r["measured"] for r in mine], yerr=[lo, hi], fmt="o", color=COLORS["measured"],
                    capsize=3, label="measured (rounds' range)")
        ax.plot(G, [r["predicted"] for r in mine], "-", color=COLORS["compute"], label="predicted")
        ax.plot(G, [r["article"] for r in mine], "--", color=ARTICLE, label="article's T")
        ax.axhline(target, color="black", lw=0.8, ls=":")
        ax.axhline(2, color="black", lw=0.5, alpha=0.4)
        ax.set_xscale("log", base=2)
        ax.set(title=model, xlabel="global batch G", ylim=(0, 2.2))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("S(2) = T1 / T2")
    axes[0].legend(fontsize=7, loc="lower right")
    ax = axes[-1]
    measured = [r["measured"] for r in rows]
    ax.plot(measured, [r["predicted"] for r in rows], "o", color=COLORS["compute"], label="predicted")
    ax.plot(measured, [r["article"] for r in rows], "x", color=ARTICLE, label="article's T")
    top = max(2.0, *[r["article"] for r in rows])
    ax.plot([0, top], [0, top], ":", color="black", lw=0.8)
    ax.set(xlabel="measured S(2)", ylabel="formula's S(2)", title="every held-out pair", xlim=(0, 2.2),
           ylim=(0, top * 1.05))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return finish(fig)


def step_parts(parts: dict[str, dict[str, float]]):
    """Predicted steps, {label: {part: seconds}}, as shares of each step, its length written beside it."""
    colors = {"compute": COLORS["compute"], "exposed all_reduce": COLORS["comm"], "waiting for the peer": "tab:olive"}
    fig, ax = plt.subplots(figsize=(6.5, 0.8 + 0.45 * len(parts)))
    labels = list(parts)[::-1]
    for y, label in enumerate(labels):
        total, left = sum(parts[label].values()), 0.0
        for part, sec in parts[label].items():
            ax.barh(y, 100 * sec / total, left=left, color=colors[part], height=0.6)
            left += 100 * sec / total
        ax.text(101, y, f"{total * 1e3:.1f} ms", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    ax.set(xlim=(0, 115), xlabel="% of the predicted step at p = 2", title="Where a predicted step's time goes")
    ax.grid(axis="x", alpha=0.3)
    return finish(fig)

"""Figures of the planner (chapter 8.5): where a layout's step goes, and the planner against Narayanan
et al.'s Table 1."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..theory.planner import TIME_PARTS
from .style import finish

PART_COLORS = {"compute": "tab:blue", "bubble": "tab:gray", "tp": "tab:purple", "cp": "tab:pink",
               "ep": "tab:olive", "pp": "tab:orange", "dp": "tab:green"}


def mesh_name(layout) -> str:
    """(dp, tp, pp) and, where used, cp and ep: the mesh in a few characters."""
    extra = "".join(f" {k} {getattr(layout, k)}" for k in ("cp", "ep") if getattr(layout, k) > 1)
    return f"d {layout.dp} t {layout.tp} p {layout.pp}{extra}"


def step_breakdown(ranked: list, title: str, labels: list[str] | None = None):
    """One stacked bar per layout (``Priced``, top to bottom): its step's seconds by part, and its
    memory per GPU on the right. ``labels``: one per layout (default: its mesh)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 0.5 * len(ranked) + 1.8), gridspec_kw={"width_ratios": [2, 1]})
    names = labels or [mesh_name(p.layout) for p in ranked]
    y = np.arange(len(ranked))[::-1]
    start = np.zeros(len(ranked))
    for part in TIME_PARTS:
        widths = np.array([p.time[part] for p in ranked])
        if widths.any():
            left.barh(y, widths, left=start, color=PART_COLORS[part], label=part)
            start += widths
    left.set_yticks(y, names, fontsize=8)
    left.set(xlabel="seconds a step", title=title)
    left.legend(fontsize=7, ncol=4, loc="lower right")
    left.grid(axis="x", alpha=0.3)
    right.barh(y, [p.memory_bytes / 2**30 for p in ranked], color="tab:gray")
    right.set_yticks(y, [""] * len(y))
    right.set(xlabel="memory a GPU (GiB)", title="fits in")
    right.grid(axis="x", alpha=0.3)
    return finish(fig)


def nothing_fits(setting: str):
    """The planner's explorer's fallback when no layout fits: the setting, and that nothing fits, in words."""
    fig, ax = plt.subplots(figsize=(9, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.5, f"No layout fits.\n{setting}", ha="center", va="center", wrap=True, fontsize=9)
    return finish(fig)


def published_vs_predicted(rows: list, band: float = 0.25):
    """Each row of Table 1 (``published.Row``): teraFLOP/s per GPU published (x) and predicted for the
    published layout (y), the ±``band`` corridor around equality shaded."""
    fig, ax = plt.subplots(figsize=(5.2, 4))
    top = 1.15 * max(max(r.published_tflops, r.predicted_tflops) for r in rows)
    xs = np.linspace(0, top, 2)
    ax.fill_between(xs, (1 - band) * xs, (1 + band) * xs, color="tab:green", alpha=0.12,
                    label=f"within {band:.0%}")
    ax.plot(xs, xs, color="black", lw=0.8, label="predicted = published")
    ax.scatter([r.published_tflops for r in rows], [r.predicted_tflops for r in rows], color="tab:blue",
               zorder=3, label="a row of Table 1")
    for r in rows:
        ax.annotate(f"{r.billions:g}B", (r.published_tflops, r.predicted_tflops), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    low = 0.8 * min(min(r.published_tflops, r.predicted_tflops) for r in rows)
    ax.set(xlim=(low, top), ylim=(low, top), xlabel="published teraFLOP/s per GPU",
           ylabel="planner's teraFLOP/s per GPU", title="Narayanan et al. 2021, Table 1")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    return finish(fig)

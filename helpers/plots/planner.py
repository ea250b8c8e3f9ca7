"""Figures of the planner (chapters 8.5 and 8.6): where a layout's step goes, and the planner against
published runs (Narayanan et al.'s Table 1, and the runs of 8.6)."""
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


def published_vs_predicted(rows: list, band: float = 0.25, names: list[str] | None = None,
                           title: str = "Narayanan et al. 2021, Table 1"):
    """Each row (``published.Row``, or ``llama3.Run`` with ``names``): teraFLOP/s per GPU published (x)
    and predicted for the published layout (y), the ±``band`` corridor around equality shaded. Rows
    of one name share a colour; Table 1's rows are labelled by size."""
    fig, ax = plt.subplots(figsize=(5.2, 4))
    top = 1.15 * max(max(r.published_tflops, r.predicted_tflops) for r in rows)
    xs = np.geomspace(0.5 * min(r.published_tflops for r in rows), top, 50)
    ax.fill_between(xs, (1 - band) * xs, (1 + band) * xs, color="tab:green", alpha=0.12,
                    label=f"within {band:.0%}")
    ax.plot(xs, xs, color="black", lw=0.8, label="predicted = published")
    names = names or ["a row of Table 1"] * len(rows)
    for i, name in enumerate(dict.fromkeys(names)):
        mine = [r for r, n in zip(rows, names) if n == name]
        ax.scatter([r.published_tflops for r in mine], [r.predicted_tflops for r in mine], color=f"C{i}",
                   zorder=3, label=name)
    for r in rows:  # a run's GPUs and context where they tell its points apart (Llama 3's)
        label = f"{r.billions:g}B" if hasattr(r, "billions") else f"{r.gpus:,}, {r.seq // 1024}K" * (r.seq > 2048)
        ax.annotate(label, (r.published_tflops, r.predicted_tflops), fontsize=7,
                    xytext=(3, 3) if hasattr(r, "billions") else (5, -9), textcoords="offset points")
    low = 0.8 * min(min(r.published_tflops, r.predicted_tflops) for r in rows)
    if top / low > 3:  # A100 runs beside H100 runs: equal ratios at equal distances
        ax.set(xscale="log", yscale="log")
        plain = plt.FuncFormatter(lambda value, _: f"{value:g}")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(plain), axis.set_minor_formatter(plain)
    ax.set(xlim=(low, top), ylim=(low, top), xlabel="published teraFLOP/s per GPU",
           ylabel="planner's teraFLOP/s per GPU", title=title)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    return finish(fig)

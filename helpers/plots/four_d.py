"""Figures of 4D parallelism (chapter 8.4): the mesh, and what each of its dimensions carried and
each rank held, measured beside the formulas."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import color, finish

DIM_COLORS = {"dp": "tab:green", "tp": "tab:blue", "pp": "tab:orange"}


def mesh_and_bytes(grid: list, rows: list[dict]):
    """Left: the ranks on the (pp, dp, tp) mesh (``grid[pp][dp][tp]`` = global rank), one box per
    stage, each rank at its (dp, tp) place. Right: the bytes one rank of each stage sends per step on
    each dimension (bars, from ``analysis.four_d.stage_rows``), each formula as a black tick."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [1, 1.3]})
    grid = np.array(grid)
    pp, dp, tp = grid.shape
    for s in range(pp):
        x0 = s * (tp + 1)
        left.add_patch(plt.Rectangle((x0 - 0.5, -0.5), tp, dp, fill=False, lw=1.5, color=DIM_COLORS["pp"]))
        left.text(x0 + tp / 2 - 0.5, dp - 0.3, f"stage {s} (pp)", ha="center", fontsize=8)
        for d in range(dp):
            for t in range(tp):
                left.text(x0 + t, dp - 1 - d, f"rank {grid[s, d, t]}", ha="center", va="center", fontsize=8,
                          bbox={"boxstyle": "round", "fc": "white", "ec": DIM_COLORS["tp"]})
    left.set_xlim(-0.8, pp * (tp + 1) - 1.2)
    left.set_ylim(-0.8, dp + 0.2)
    left.set_axis_off()
    left.set_title(f"The mesh: pp {pp} x dp {dp} x tp {tp}\n(a row shares tp, a column dp)", fontsize=9, loc="left")
    dims = ("dp", "tp", "pp")
    width = 0.8 / len(rows)
    x = np.arange(len(dims))
    for i, row in enumerate(rows):
        measured = [row["sent"].get(d, 0) / 1e3 for d in dims]
        right.bar(x + i * width, measured, width, color=[DIM_COLORS[d] for d in dims],
                  alpha=1 - 0.35 * i, label=f"stage {row['stage']}, measured")
        right.scatter(x + i * width, [row["sent_formula"][d] / 1e3 for d in dims], marker="_", s=300,
                      color="black", zorder=3, label="formula (theory)" if i == 0 else None)
    right.set_xticks(x + width * (len(rows) - 1) / 2, [f"{d}" for d in dims])
    right.set_ylabel("sent by one rank per step (kB)")
    right.set_title("Bytes per step on each mesh dimension", fontsize=9, loc="left")
    right.grid(axis="y", alpha=0.3)
    right.legend(fontsize=7)
    return finish(fig)


def memory_per_rank(rows: list[dict], activation_formula: list[float]):
    """One bar per stage: model states by kind and the most activation bytes autograd held, measured;
    the formulas (states, and states plus activations) as black ticks."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for kind in ("parameters", "gradients", "optimizer states"):
        values = np.array([r["states"][kind] for r in rows]) / 1e3
        ax.bar(x, values, bottom=bottom, color=color(kind), width=0.5, label=f"{kind}, measured")
        bottom += values
    acts = np.array([r["activations"] for r in rows]) / 1e3
    ax.bar(x, acts, bottom=bottom, color=color("activations"), width=0.5, label="activations (peak), measured")
    states_f = np.array([sum(r["states_formula"].values()) for r in rows]) / 1e3
    ax.scatter(x, states_f, marker="_", s=700, color="black", zorder=3, label="formula (theory)")
    ax.scatter(x, states_f + np.array(activation_formula) / 1e3, marker="_", s=700, color="black", zorder=3)
    ax.set_xticks(x, [f"stage {r['stage']}\n({r['in_flight']} micro-batch{'es' if r['in_flight'] > 1 else ''} "
                      "in flight)" for r in rows], fontsize=8)
    ax.set_ylabel("held by one rank (kB)")
    ax.set_title("What one rank of each stage holds", fontsize=9, loc="left")
    ax.set_xlim(-0.5, len(rows) + 0.6)  # room on the right for the legend
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return finish(fig)



def tried_layouts(records: list[dict]):
    """The layouts tried for real (``analysis.layouts.record``s), one group of bars each: what a rank
    held, what it sent a step, and a step's time, measured (bars) beside the formulas' (black ticks)
    and the planner's (open circles). A ``matplotlib.figure.Figure`` made without pyplot, so that the
    launch panel may draw it from the thread its run finished on."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(9, 3))
    axes = fig.subplots(1, 3)
    x = np.arange(1, len(records) + 1)
    panels = (("memory a rank (kB)", "memory_bytes", "memory_formula", "memory_planner", 1e3),
              ("sent a rank a step (kB)", "sent_bytes", "sent_formula", None, 1e3),
              ("a step (s)", "step_s", None, "step_planner", 1.0))
    for ax, (ylabel, measured, formula, planner, unit) in zip(axes, panels):
        ax.bar(x, [r[measured] / unit for r in records], 0.6, color=color("measured"), label="measured")
        if formula:
            ax.scatter(x, [r[formula] / unit for r in records], marker="_", s=300, color="black", zorder=3,
                       label="formula")
        if planner:
            ax.scatter(x, [r[planner] / unit for r in records], marker="o", facecolors="none",
                       edgecolors="tab:red", zorder=4, label="planner")
        ax.set(xlabel="run", ylabel=ylabel, xticks=x)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("Layouts tried: measured beside predicted", fontsize=9, loc="left")
    fig.tight_layout()
    return fig

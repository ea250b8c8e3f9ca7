"""Figures of mixture of experts (chapter 8.3): how evenly the router spreads the tokens, what a
capacity drops, and what all_to_all costs beside all_reduce."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import color, finish

RUNS = ("tab:red", "tab:blue")  # without the auxiliary loss, with it


def balance(rows: list[dict], uniform: dict[float, float], capacity: int):
    """Three panels from ``analysis.expert_balance`` rows (one per alpha): each expert's tokens at the last
    step, per layer, against the capacity; the imbalance over training; and the share of slots each
    capacity factor drops, beside what a uniformly random router would drop."""
    fig, (bars, trend, drops) = plt.subplots(1, 3, figsize=(10, 3.2))
    layers, experts = np.asarray(rows[0]["last_loads"]).shape
    width = 0.8 / len(rows)
    for i, (row, c) in enumerate(zip(rows, RUNS)):
        loads = np.asarray(row["last_loads"])
        x = np.arange(layers * experts) + (i - (len(rows) - 1) / 2) * width
        bars.bar(x, loads.ravel(), width=width, color=c, label=f"alpha = {row['alpha']:g}")
        trend.plot(np.arange(1, len(row["imbalance_by_step"]) + 1), row["imbalance_by_step"], color=c,
                   label=f"alpha = {row['alpha']:g}")
        cf = sorted(row["what_if"])
        drops.plot(cf, [100 * row["what_if"][f] for f in cf], "o-", color=c, label=f"alpha = {row['alpha']:g}")
    bars.axhline(capacity, color="black", ls="--", lw=1, label=f"capacity ({capacity})")
    bars.set_xticks(range(layers * experts), [f"L{l}\nE{e}" for l in range(layers) for e in range(experts)],
                    fontsize=7)
    bars.set_ylabel("tokens routed, last step")
    bars.set_title("Tokens per expert", fontsize=9, loc="left")
    trend.axhline(1, color="gray", lw=1)
    trend.set_xlabel("training step")
    trend.set_ylabel("busiest expert / mean")
    trend.set_title("Imbalance during training", fontsize=9, loc="left")
    cf = sorted(uniform)
    drops.plot(cf, [100 * uniform[f] for f in cf], "k:", marker="x", label="uniform router (theory)")
    drops.set_xlabel("capacity factor")
    drops.set_ylabel("slots dropped, second half (%)")
    drops.set_title("Dropped tokens", fontsize=9, loc="left")
    for ax in (bars, trend, drops):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return finish(fig)


def alltoall_cost(fit):
    """``analysis.AlltoallFit``: both collectives' median times by message size, all_to_all's own
    L + M/B fit, and the time ``theory.alltoall_time`` predicts for it from the all_reduce's ring."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    sizes = fit.alltoall.sizes
    ax.loglog(sizes, fit.allreduce.seconds * 1e3, "s", color=color("all_reduce"), label="all_reduce, measured")
    ax.loglog(sizes, fit.alltoall.seconds * 1e3, "o", color="tab:blue", label="all_to_all, measured")
    ax.loglog(sizes, fit.alltoall.fit.seconds(sizes) * 1e3, "-", color="tab:blue", lw=1,
              label="all_to_all, fit L + M/B")
    ax.loglog(sizes, fit.predicted * 1e3, "k--", lw=1, label="all_to_all, formula from all_reduce's ring")
    ax.set_xlabel("message per rank M (bytes)")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"All_to_all beside all_reduce, n = {fit.n}", fontsize=9, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return finish(fig)

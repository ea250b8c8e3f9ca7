"""Figures of the library's pipeline schedules (chapter 6.1): one step per rank, and idle against m."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import COLORS, finish, powers_of_two_axis

# The backward's two halves of a zero-bubble schedule: the input's gradient is the backward's
# colour; the weights' gradient, which only updates the weights, takes the optimizer's.
KINDS = {"F": ("forward", COLORS["F"]), "B": ("backward", COLORS["B"]),
         "I": ("input gradient", COLORS["B"]), "W": ("weight gradient", COLORS["optimizer"])}


def schedule_gantt(runs: dict[str, list[list[tuple]]]):
    """One step of each schedule: a row per rank, its spans as bars, idle as gaps.

    ``runs`` maps a title to each rank's spans ``(kind, (stage, micro_batch), start, end)``
    (``helpers.recipes.pipelining.instrument``). A rank that holds two stages shows its
    second one hatched; the number in a bar is the micro-batch. Each run's axis starts at 0 ms.
    """
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 0.9 + 0.5 * sum(len(s) for s in runs.values())),
                             squeeze=False)
    seen = set()
    for ax, (title, ranks) in zip(axes[:, 0], runs.items()):
        t0 = min(s[2] for spans in ranks for s in spans)
        for row, spans in enumerate(ranks):
            first = min(tag[0] for _, tag, _, _ in spans)
            for kind, (stage, mb), start, end in spans:
                label, colour = KINDS[kind]
                ax.barh(row, (end - start) * 1e3, left=(start - t0) * 1e3, height=0.7, color=colour,
                        edgecolor="white", linewidth=0.5, hatch="///" if stage != first else None,
                        label=None if label in seen else label)
                seen.add(label)
                if len(spans) <= 48:
                    ax.text((start + end - 2 * t0) / 2 * 1e3, row, str(mb), ha="center", va="center",
                            fontsize=5, color="white")
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
        ax.set_ylim(len(ranks) - 0.4, -0.6)  # rank 0 on top
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time since the step's first span (ms); gaps: idle; hatched: a rank's second stage")
    fig.legend(loc="upper right", fontsize=7, ncol=4, frameon=False)
    return finish(fig)


def idle_vs_micro_batches(p: int, measured: dict[str, dict[int, float]], formulas: dict[str, callable],
                          slots: dict[str, dict[int, float]] | None = None):
    """Measured idle fraction per schedule against m (dots), with each formula's curve beside it.

    ``measured`` maps a schedule to {m: idle}; ``formulas`` maps a curve's label to f(m);
    ``slots``, if given, the same schedules' idle in slots of their own order (crosses).
    """
    fig, ax = plt.subplots(figsize=(5.8, 3.3))
    ms = sorted({m for runs in measured.values() for m in runs})
    grid = np.arange(1, 2 * max(ms) + 1)
    for (label, f), style in zip(formulas.items(), ("-", "--", ":")):
        ax.plot(grid, f(grid), style, color="gray", label=label)
    for i, (name, runs) in enumerate(measured.items()):
        ax.plot(list(runs), list(runs.values()), "o", color=f"C{i}", label=f"measured, {name}")
        if slots and name in slots:
            ax.plot(list(slots[name]), list(slots[name].values()), "x", color=f"C{i}", markersize=8)
    if slots:
        ax.plot([], [], "x", color="black", label="in slots of the order it ran")
    ax.set(ylabel="idle fraction of the busiest rank", ylim=(0, 0.75),
           title=f"idle time against micro-batches, p = {p}")
    powers_of_two_axis(ax, grid[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return finish(fig)


def in_flight_bars(p: int, counts: dict[str, list[int]], m: int):
    """Per rank, the most micro-batches whose activations it held at once, per schedule."""
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    width = 0.8 / len(counts)
    for i, (name, per_rank) in enumerate(counts.items()):
        ax.bar(np.arange(p) + i * width, per_rank, width, label=name)
    ax.set_xticks(np.arange(p) + width * (len(counts) - 1) / 2, [f"rank {r}" for r in range(p)])
    ax.set(ylabel="micro-batches in flight (peak)", title=f"activations held, p = {p}, m = {m}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

"""Figures of data and model parallelism (chapters 3.1, 3.2): per-rank timelines, buckets, bubbles."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import COLORS, finish, powers_of_two_axis


def dp_timeline(variants: dict[str, list[dict]]):
    """Per-rank lanes of one training step: compute (forward, backward, optimizer) and communication.

    ``variants`` maps a title to each rank's record of its last step, as
    ``helpers.recipes.data_parallel.timeline`` returns it. Backward compute ends at
    the last gradient; what follows until ``backward()`` returns is waiting for the
    all_reduces. Times in ms from the variant's earliest start on any rank.
    """
    fig, axes = plt.subplots(len(variants), 1, figsize=(7.5, 0.6 + 1.25 * len(variants)), sharex=True,
                             squeeze=False)
    colors = {k: COLORS[k] for k in ("forward", "backward", "wait", "optimizer", "all_reduce")}
    for ax, (title, ranks) in zip(axes[:, 0], variants.items()):
        t0 = min(r["start"] for r in ranks)
        ms = lambda t: (t - t0) * 1e3  # noqa: E731
        yticks = []
        for rank, r in enumerate(ranks):
            compute_end = max(r["ready"])
            y = 2 * rank
            spans = [("forward", r["start"], r["forward"]), ("backward", r["forward"], compute_end),
                     ("wait", compute_end, r["comm"]), ("optimizer", r["comm"], r["end"])]
            for kind, a, b in spans:
                ax.barh(y, ms(b) - ms(a), left=ms(a), height=0.8, color=colors[kind], edgecolor="black"
                        if kind == "wait" else colors[kind], hatch="//" if kind == "wait" else None, lw=0.5)
            for *_, a, b in r["comm_events"]:
                ax.barh(y + 1, ms(b) - ms(a), left=ms(a), height=0.8, color=colors["all_reduce"],
                        edgecolor="white", lw=0.5)
            yticks += [(y, f"rank {rank} compute"), (y + 1, f"rank {rank} comm")]
        ax.set_yticks([t for t, _ in yticks], [n for _, n in yticks], fontsize=7)
        ax.set_ylim(2 * len(ranks) - 0.5, -0.5)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black", hatch="//" if k == "wait" else None)
               for k, c in colors.items()]
    fig.legend(handles, ["forward", "backward", "waiting on comm", "optimizer", "all_reduce"],
               fontsize=7, ncol=5, loc="upper center")
    axes[-1, 0].set_xlabel("time (ms)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    return finish(fig, tight=False)


def bucket_sweep(labels: list[str], step_ms: list[float], buckets: list[int], hidden: list[float],
                 references: dict[str, float]):
    """Median step time per DDP bucket setting, with its bucket count and hidden share of
    communication written on each bar; ``references`` (name -> ms) as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    bars = ax.bar(labels, step_ms, color=COLORS["forward"])
    for bar, n, h in zip(bars, buckets, hidden):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{n} buckets\n{h:.0%} hidden",
                ha="center", va="bottom", fontsize=7)
    for (name, ms), color in zip(references.items(), ("gray", "black", "tab:red")):
        ax.axhline(ms, color=color, ls="--", lw=1, label=name)
    ax.set(ylabel="median step time (ms)", xlabel="bucket_cap_mb")
    ax.set_ylim(0, max(step_ms + list(references.values())) * 1.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return finish(fig)


def pipeline_timeline(runs: dict[str, list[list[tuple]]], max_ms: float | None = None):
    """A Gantt chart per schedule: one row per stage, its compute spans as bars, idle as gaps.

    ``runs`` maps a title to each stage's spans ``(kind, micro_batch, start, end)``
    (``helpers.recipes.model_parallel.Timeline``); kind "F" is forward, "B" backward.
    All runs share one time axis (ms), starting where each run's first span starts;
    ``max_ms`` crops it, to show the first steps only.
    """
    unit = 1e3
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 0.9 + 0.55 * sum(len(s) for s in runs.values())),
                             sharex=True, squeeze=False)
    for ax, (title, stages) in zip(axes[:, 0], runs.items()):
        t0 = min(s[2] for spans in stages for s in spans)
        for row, spans in enumerate(stages):
            for kind, mb, start, end in spans:
                ax.barh(row, (end - start) * unit, left=(start - t0) * unit, height=0.7,
                        color=COLORS.get(kind, "gray"), edgecolor="white", linewidth=0.5)
                if (end - start) * unit > 6 and len(spans) <= 40:
                    ax.text((start + end - 2 * t0) / 2 * unit, row, str(mb), ha="center", va="center",
                            fontsize=6, color="white")
        ax.set_yticks(range(len(stages)), [f"stage {s}" for s in range(len(stages))])
        ax.set_ylim(len(stages) - 0.4, -0.6)  # stage 0 on top
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    if max_ms:
        axes[-1, 0].set_xlim(0, max_ms)
    axes[-1, 0].set_xlabel("time (ms); bars: forward (blue) and backward (orange), gaps: idle")
    return finish(fig)


def bubble_vs_micro_batches(p: int, micro_batches, measured, theory_fn):
    """Measured busy fraction per stage against m, with the curve ``theory_fn(p, m)`` beside it."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    m_grid = np.arange(1, max(micro_batches) * 2 + 1)
    ax.plot(m_grid, theory_fn(p, m_grid), color="gray", label=f"theory m / (m + p - 1), p = {p}")
    measured = np.asarray(measured)
    for s in range(measured.shape[1]):
        ax.plot(micro_batches, measured[:, s], "o", label=f"measured, stage {s}")
    ax.set(ylabel="busy fraction of the step", ylim=(0, 1.05))
    powers_of_two_axis(ax, m_grid[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

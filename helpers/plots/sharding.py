"""Figures of sharding (chapter 6.2): the bytes each step sends, and when they cost time."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import color, finish


def traffic_bars(table: dict[str, dict], title: str = "bytes one rank sends per step"):
    """Per variant: the ring algorithms' bytes, gloo's, and the bytes measured on the sockets,
    in units of the model's parameter bytes (``analysis.traffic_table``)."""
    variants = list(table)
    series = {"ring algorithms (textbook)": ("textbook", "tab:gray"),
              "gloo's algorithms": ("gloo", color("comm")),
              "measured on the sockets": ("wire", color("measured"))}
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.8 / len(series)
    for i, (label, (key, c)) in enumerate(series.items()):
        ys = [table[v][key] or 0.0 for v in variants]
        ax.bar(np.arange(len(variants)) + (i - 1) * width, ys, width, color=c, label=label)
    ax.set_xticks(range(len(variants)), variants)
    ax.set(ylabel="bytes sent / parameter bytes", title=title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)


def step_time_curves(t_compute, curves: dict[str, np.ndarray], measured: dict[str, tuple] | None = None,
                     title: str = "a step's time, predicted from the ring model"):
    """Step time against compute time (both ms), one line per strategy; measured steps as points."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    t = np.asarray(t_compute) * 1e3
    ax.plot(t, t, color="black", lw=0.8, ls=":", label="compute alone")
    for label, ys in curves.items():
        ax.plot(t, np.asarray(ys) * 1e3, label=label)
    for label, (x, y) in (measured or {}).items():
        ax.plot([x * 1e3], [y * 1e3], "o", label=label)
    ax.set(xscale="log", yscale="log", xlabel="compute per step (ms)", ylabel="step time (ms)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return finish(fig)

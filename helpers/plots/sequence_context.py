"""Figures of sequence and context parallelism (chapter 8.2): each rank's causal attention work
under the naive and zig-zag splits, and what TP, SP and CP send as the sequence grows."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .. import theory
from .style import finish

LAYOUT_COLORS = {"naive": "tab:red", "zigzag": "tab:green"}


def causal_work(rows: list[dict]):
    """One panel per ring size: score elements each rank computed in the forward, per layout
    (``analysis.cp_rows``), and ``theory.causal_work``'s as black ticks."""
    sizes = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4 * len(sizes), 3.2), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        width = 0.38
        for i, layout in enumerate(theory.LAYOUTS):
            mine = sorted((r for r in rows if r["n"] == n and r["layout"] == layout), key=lambda r: r["rank"])
            x = np.arange(len(mine)) + (i - 0.5) * width
            ax.bar(x, [r["computed"] for r in mine], width, color=LAYOUT_COLORS[layout], label=f"{layout}, measured")
            ax.scatter(x, [r["computed_formula"] for r in mine], marker="_", s=300, color="black", zorder=3,
                       label="formula (theory)" if i else None)
        ax.set_xticks(range(n), [f"rank {r}" for r in range(n)])
        ax.set(ylabel="score elements computed", title=f"Causal ring attention, n = {n} ranks")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    return finish(fig)


def sent_vs_sequence(layers: int, batch: int, hidden: int, heads: int, n: int, n_params: int, seqs):
    """Bytes one rank sends per step under TP, SP and CP as the sequence grows
    (``theory.what_each_divides``): TP and SP's activations and CP's ring grow with s; CP's
    gradient all-reduce does not."""
    seqs = np.asarray(seqs)
    table = [theory.what_each_divides(layers, batch, int(s), hidden, heads, n, n_params) for s in seqs]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i, style in enumerate(("-", "--", "-")):
        row = [t[i] for t in table]
        ax.plot(seqs, [r["bytes"] / 1e6 for r in row], style, label=row[0]["name"], lw=1.6)
    ax.set(xscale="log", yscale="log", xlabel="sequence length s (tokens)", ylabel="MB sent by one rank per step",
           title=f"{n} ranks, {layers} layers, h = {hidden}, batch {batch}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

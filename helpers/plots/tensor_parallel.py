"""Figures of tensor parallelism (chapter 6.3): what each strategy holds and sends per rank and step."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import color, finish


def strategy_costs(rows: list[dict]):
    """Two panels, one bar per strategy (``analysis.strategy_rows``): the bytes of model states a
    rank holds, by kind, and the bytes it sends in one step, by phase; each formula as a black tick."""
    fig, (held, sent) = plt.subplots(1, 2, figsize=(8.5, 3.2))
    x = np.arange(len(rows))
    labels = [f"{r['strategy']}\n(dp {r['dp']}, tp {r['tp']})" for r in rows]
    panels = ((held, "states_by_kind", "states_formula", "held by one rank (kB)",
               ("parameters", "gradients", "optimizer states")),
              (sent, "sent_by_phase", "sent_formula", "sent by one rank per step (kB)", ("forward", "backward")))
    for ax, key, formula, ylabel, kinds in panels:
        bottom = np.zeros(len(rows))
        for kind in kinds:
            values = np.array([r[key][kind] for r in rows]) / 1e3
            ax.bar(x, values, bottom=bottom, color=color(kind), label=f"{kind}, measured", width=0.6)
            bottom += values
        ax.scatter(x, [r[formula] / 1e3 for r in rows], marker="_", s=900, color="black", zorder=3,
                   label="formula (theory)")
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    held.set_title("Model states held", fontsize=9, loc="left")
    sent.set_title("Communication per training step", fontsize=9, loc="left")
    return finish(fig)

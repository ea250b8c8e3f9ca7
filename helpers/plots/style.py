"""What every figure shares: one colour for each kind of thing, and one way to finish a figure."""
from __future__ import annotations

import matplotlib.pyplot as plt

from .alt_text import show_with_alt_text

# One colour per kind, across every figure: a phase of a step, a kind of byte, a schedule's work.
COLORS = {
    # a training step's phases
    "data": "tab:gray", "forward": "tab:blue", "backward": "tab:orange", "comm": "tab:red",
    "optimizer": "tab:green", "wait": "white",
    # pipeline spans: forward and backward of a micro-batch
    "F": "tab:blue", "B": "tab:orange",
    # what a device holds
    "parameters": "tab:blue", "gradients": "tab:orange", "optimizer states": "tab:green",
    "autocast copies": "tab:purple", "activations": "tab:gray",
    # a prediction set beside its measurement
    "compute": "tab:blue", "measured": "tab:purple",
}
COLORS["all_reduce"] = COLORS["comm"]


def color(kind: str) -> str:
    return COLORS.get(kind, "black")


def finish(fig, tight: bool = True):
    """Lay the figure out and detach it from pyplot: the cell displays the returned figure once."""
    if tight:
        fig.tight_layout()
    plt.close(fig)
    show_with_alt_text()  # after pyplot set up the inline backend, whose PNG formatter this replaces
    return fig


def powers_of_two_axis(ax, top: float, label: str = "micro-batches m") -> None:
    """A log x axis ticked at 1, 2, 4, ... up to ``top``, labelled as plain numbers."""
    import math
    ticks = [2 ** k for k in range(int(math.log2(top)) + 1)]
    ax.set(xscale="log", xlabel=label)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()

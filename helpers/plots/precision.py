"""Figures of mixed precision (chapters 3.3, 5.2): gradient magnitudes, underflow, the scaler's scale."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np

from .style import finish


def gradient_magnitudes(reference, scale: float, title: str = "Gradients at the model's output"):
    """Histogram of log2|g| for the nonzero fp32 gradients ``reference``, and the same values times
    ``scale``, against float16's floor: below 2^-24 a value flushes to zero; 2^-24..2^-14 is subnormal."""
    import torch
    g = reference[reference != 0].abs().double().log2().numpy()
    shift = float(np.log2(scale))
    tiny = float(np.log2(torch.finfo(torch.float16).tiny))  # smallest normal: 2^-14
    floor = tiny + float(np.log2(torch.finfo(torch.float16).eps))  # smallest subnormal: 2^-24
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    bins = np.arange(np.floor(g.min()) - 1, np.ceil(g.max() + shift) + 2, 0.5)
    ax.hist(g, bins=bins, alpha=0.7, label="as computed")
    ax.hist(g + shift, bins=bins, alpha=0.7, label=f"loss scaled by 2^{shift:.0f}")
    ax.axvspan(bins[0], floor - 1, color="red", alpha=0.12, label="float16 rounds to 0")
    ax.axvspan(floor - 1, tiny, color="orange", alpha=0.12, label="float16 subnormal (fewer bits)")
    ax.set(xlabel="log2 |gradient|", ylabel="entries", title=title, xlim=(bins[0], bins[-1]))
    ax.legend(fontsize=8)
    return finish(fig)


def underflow_over_training(rows: list[dict]):
    """Per epoch, the fraction of nonzero fp32 gradients that each lower precision flushed to zero."""
    fig, ax = plt.subplots(figsize=(5.5, 3))
    epochs = [r["epoch"] for r in rows]
    styles = iter([("o", "-"), ("s", "--"), ("^", ":"), ("d", "-.")])
    for key in (k for k in rows[0] if k != "epoch"):
        marker, ls = next(styles)  # lines that coincide (at 0) stay visible
        ax.plot(epochs, [100 * r[key] for r in rows], marker=marker, ls=ls, label=key, alpha=0.8)
    ax.set(xlabel="epochs of fp32 training", ylabel="% flushed to zero", title="Gradient underflow")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)


def scale_traces(traces: dict[str, tuple[list[float], list[bool]]], title: str = "GradScaler's scale",
                 first_step: int = 1):
    """log2 of the scale at each step, one line per run ``{label: (scales, skipped)}``; skipped steps as x."""
    fig, ax = plt.subplots(figsize=(6.5, 3))
    styles = iter([("-", 3.5), ("--", 1.8), (":", 1.8), ("-.", 1.8)])  # runs that coincide stay visible
    for label, (scales, skipped) in traces.items():
        steps = np.arange(first_step, first_step + len(scales))
        ls, lw = next(styles)
        line, = ax.step(steps, np.log2(scales), where="post", label=label, ls=ls, lw=lw)
        hit = np.asarray(skipped, dtype=bool)
        ax.plot(steps[hit], np.log2(np.asarray(scales))[hit], "x", color=line.get_color(), markersize=7)
    ax.set(xlabel="step", ylabel="log2 scale", title=title + " (x: step skipped, inf/nan found)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

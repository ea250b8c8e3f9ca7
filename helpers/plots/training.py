"""Figures of training runs: loss curves, the data, step times, a resume across a crash."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..training import median
from .style import finish


def loss_curves(curves: dict[str, list[float]], title: str = "Training loss", xlabel: str = "step"):
    """One line per run: ``{"1 rank": losses, "2 ranks (DDP)": losses}``."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, losses in curves.items():
        ax.plot(np.arange(1, len(losses) + 1), losses, label=label)
    ax.set(xlabel=xlabel, ylabel="loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return finish(fig)


def same_curves(curves: dict[str, list[float]], title: str = "", ylabel: str = "loss"):
    """Curves expected to coincide, drawn so that each stays visible when they do:
    a different line style and marker for each, the first one widest."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    styles = [("-", None, 5), ("--", "o", 2), (":", "x", 2), ("-.", "+", 2)]
    for (label, ys), (ls, marker, lw) in zip(curves.items(), styles):
        ax.plot(np.arange(1, len(ys) + 1), ys, ls=ls, marker=marker, lw=lw, ms=4, label=label,
                alpha=0.5 if lw > 2 else 1)
    ax.set(xlabel="step", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)


def digits_grid(images, labels, n: int = 16):
    """A row of sample images with their labels: what the models are actually trained on."""
    fig, axes = plt.subplots(1, n, figsize=(n * 0.6, 0.9))
    for ax, img, label in zip(axes, images[:n], labels[:n]):
        ax.imshow(img.squeeze(), cmap="gray_r")
        ax.set_title(int(label), fontsize=8)
        ax.axis("off")
    return finish(fig, tight=False)


def step_time_distribution(times: dict[str, list[float]], title: str = "Time per training step"):
    """Each step's time (ms), one column of points per run, with its median as a bar."""
    fig, ax = plt.subplots(figsize=(4.5, 3))
    for i, (label, ts) in enumerate(times.items()):
        ms = 1e3 * np.asarray(ts)
        ax.plot(i + np.linspace(-0.15, 0.15, len(ms)), ms, ".", alpha=0.5)
        ax.hlines(median(ms), i - 0.3, i + 0.3, color="black", label="median" if i == 0 else None)
    ax.set_xticks(range(len(times)), list(times))
    ax.set(ylabel="ms", ylim=(0, None), title=title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return finish(fig)


def resume_curves(straight: list[float], runs: dict[str, dict], crash_at: int, event: str = "SIGKILL",
                  title: str = "Training loss across a crash"):
    """Loss per step: the uninterrupted run, thick and grey, under each run that crashed and resumed.

    ``runs`` maps a label to rank 0's result of ``checkpointing.train`` (its ``losses`` start at
    ``first_step``; ``resumed_from`` is the checkpoint's step): the first solid, the others dashed.
    """
    fig, ax = plt.subplots(figsize=(7, 3.4))
    steps = np.arange(1, len(straight) + 1)
    ax.plot(steps, straight, color="0.6", lw=4, label="uninterrupted run")
    styles = [dict(color="tab:blue", lw=1.2), dict(color="tab:red", lw=1.2, ls="--"),
              dict(color="tab:green", lw=1.2, ls="-.")]
    for (label, run), style in zip(runs.items(), styles):
        start = run["resumed_from"]
        xs = np.arange(run["first_step"], run["first_step"] + len(run["losses"]))
        keep = xs > start
        ax.plot(xs[keep], np.asarray(run["losses"])[keep], label=f"{label} (from step {start})", **style)
    ax.axvline(crash_at, color="black", lw=0.8, ls=":")
    ax.annotate(event, (crash_at, ax.get_ylim()[1]), xytext=(3, -12), textcoords="offset points",
                fontsize=8)
    ax.set(xlabel="step", ylabel="loss (rank 0)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

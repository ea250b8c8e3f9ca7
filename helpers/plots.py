"""Figures for the chapters. Each returns a matplotlib Figure and never calls ``plt.show``."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg") if matplotlib.get_backend().lower() == "agg" else None
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def loss_curves(curves: dict[str, list[float]], title: str = "Training loss", xlabel: str = "step"):
    """One line per run: ``{"1 rank": losses, "2 ranks (DDP)": losses}``."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, losses in curves.items():
        ax.plot(np.arange(1, len(losses) + 1), losses, label=label)
    ax.set(xlabel=xlabel, ylabel="loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    plt.close(fig)
    return fig


def digits_grid(images, labels, n: int = 16):
    """A row of sample images with their labels: what the models are actually trained on."""
    fig, axes = plt.subplots(1, n, figsize=(n * 0.6, 0.9))
    for ax, img, label in zip(axes, images[:n], labels[:n]):
        ax.imshow(img.squeeze(), cmap="gray_r")
        ax.set_title(int(label), fontsize=8)
        ax.axis("off")
    plt.close(fig)
    return fig

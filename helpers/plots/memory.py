"""Figures of memory (chapters 2, 3.3): bytes per device by kind, bytes held for backward."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import color, finish


def memory_bars(layouts: dict[str, dict[str, float]], device_bytes: float | None = None, title: str = ""):
    """Stacked bars of the bytes on one device, by kind, one bar per layout (``theory.advise``'s
    ``per_device``, or measured-beside-formula); a dashed line marks the device's memory."""
    top = max([sum(b.values()) for b in layouts.values()] + [device_bytes or 0])
    unit, name = next((u, n) for u, n in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))
                      if top >= u)
    fig, ax = plt.subplots(figsize=(7.5, 1.0 + 0.45 * len(layouts)))
    labels = list(layouts)[::-1]  # first layout on top
    for row, label in enumerate(labels):
        left = 0.0
        for kind, b in layouts[label].items():
            ax.barh(row, b / unit, left=left, color=color(kind), height=0.6,
                    label=kind if row == 0 else None)
            left += b / unit
    # One legend entry per kind, whatever the layouts contain.
    kinds = list(dict.fromkeys(k for b in layouts.values() for k in b))
    handles = [plt.Rectangle((0, 0), 1, 1, color=color(k)) for k in kinds]
    if device_bytes:
        ax.axvline(device_bytes / unit, color="red", ls="--")
        handles.append(plt.Line2D([], [], color="red", ls="--"))
        kinds.append("device memory")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel=f"{name} per device", title=title)
    ax.legend(handles, kinds, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", alpha=0.3)
    return finish(fig)


def saved_bytes_vs_batch(batches, measured: dict[str, list[float]], predicted: dict[str, list[float]],
                         break_even: int | None = None):
    """Bytes held for backward against batch size: measured points over the formula's lines."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, ys in predicted.items():
        line, = ax.plot(batches, np.asarray(ys) / 2**20, label=f"{label}, formula")
        ax.plot(batches, np.asarray(measured[label]) / 2**20, "o", color=line.get_color(),
                label=f"{label}, measured")
    if break_even:
        ax.axvline(break_even, color="gray", ls=":", label=f"break-even batch {break_even}")
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="MiB held for backward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig)

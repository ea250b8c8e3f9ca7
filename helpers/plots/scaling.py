"""Figures of speedup and communication (chapter 4): Amdahl, strong and weak scaling, all_reduce."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..training import PHASES
from .style import COLORS, finish


def amdahl_curves(alpha: float, p_max: int = 64, p_mark: int | None = None):
    """Amdahl's and Gustafson's speedups for one alpha, the ceiling 1/alpha, and efficiency S/p."""
    from ..theory import amdahl, gustafson
    p = np.unique(np.geomspace(1, p_max, 200).round(2))
    fig, (ax, ax_e) = plt.subplots(1, 2, figsize=(8, 3.2))
    ax.plot(p, p, ":", color="gray", label="ideal S = p")
    ax.plot(p, amdahl(p, alpha), color="tab:blue", label="Amdahl (fixed total batch)")
    ax.plot(p, gustafson(p, alpha), color="tab:orange", label="Gustafson (fixed per-rank batch)")
    ax.axhline(1 / alpha, color="tab:blue", ls="--", lw=1, label=f"ceiling 1/α = {1 / alpha:.3g}")
    ax_e.plot(p, amdahl(p, alpha) / p, color="tab:blue", label="Amdahl")
    ax_e.plot(p, gustafson(p, alpha) / p, color="tab:orange", label="Gustafson")
    if p_mark:
        s = float(amdahl(p_mark, alpha))
        ax.plot([p_mark], [s], "o", color="tab:blue")
        ax.annotate(f"S({p_mark}) = {s:.2f}", (p_mark, s), textcoords="offset points", xytext=(-10, 8),
                    ha="right", fontsize=8)
        ax_e.plot([p_mark], [s / p_mark], "o", color="tab:blue")
    for a in (ax, ax_e):
        a.set_xscale("log", base=2)
        a.set_xlabel("devices p")
        a.grid(alpha=0.3)
    ax.set_yscale("log", base=2)  # log-log: ideal scaling is the diagonal, Amdahl bends to its ceiling
    ax.set(ylabel="speedup S", title=f"α = {alpha:.3g}")
    ax_e.set(ylabel="efficiency S / p", ylim=(0, 1.05), title="efficiency")
    ax.legend(fontsize=7)
    ax_e.legend(fontsize=7)
    return finish(fig)


def strong_scaling(points: dict, fits: dict, cores: int, predictions: dict | None = None):
    """Measured speedups (one dot per round) against each global batch's fitted Amdahl curve.

    ``points``: {label: (p array, speedup array)}; ``fits``: {label: theory.AmdahlFit};
    ``predictions``: {label: (p, predicted speedup)} for held-out points (open diamonds).
    The band is two standard errors of alpha; the grey area has more ranks than cores.
    """
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    p_all = np.concatenate([np.asarray(p, float) for p, _ in points.values()])
    grid = np.linspace(1, p_all.max(), 100)
    ax.plot(grid, grid, ":", color="gray", label="ideal S = p")
    for (label, (p, s)), color in zip(points.items(), plt.cm.tab10.colors):
        fit = fits.get(label)
        ax.plot(p, s, "o", color=color, alpha=0.6, ms=4)
        if fit is not None:
            ax.plot(grid, fit.speedup(grid), color=color,
                    label=f"{label}: α = {fit.alpha:.2f} ± {fit.stderr:.2f}")
            ax.fill_between(grid, fit.speedup(grid, -2), fit.speedup(grid, 2), color=color, alpha=0.15, lw=0)
        if predictions and label in predictions:
            pp, ps = predictions[label]
            ax.plot(pp, ps, "D", mfc="none", color=color, ms=8, label=f"{label}: held-out prediction")
    if p_all.max() > cores:
        ax.axvspan(cores + 0.05, p_all.max() + 0.3, color="gray", alpha=0.12, label="more ranks than cores")
    ax.set(xlabel="ranks p (1 thread each)", ylabel="speedup T₁ / T_p", title="Strong scaling",
           xlim=(0.8, p_all.max() + 0.3), ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return finish(fig)


def phase_bars(rows: dict[str, dict[str, float]], title: str = "Where a step's time goes"):
    """Stacked bars of median per-phase milliseconds, one bar per label (``training.PHASES``)."""
    fig, ax = plt.subplots(figsize=(6.5, 0.8 + 0.5 * len(rows)))
    labels = list(rows)[::-1]
    for y, label in enumerate(labels):
        left = 0.0
        for phase in PHASES:
            ms = rows[label][phase] * 1e3
            ax.barh(y, ms, left=left, color=COLORS[phase], height=0.6, label=phase if y == 0 else None)
            left += ms
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="ms per step (median)", title=title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return finish(fig)


def weak_scaling(p, scaled_speedup, efficiency, gustafson_line, cores: int):
    """Weak scaling: measured scaled speedup against Gustafson's line, and efficiency T₁ / T_p."""
    p = np.asarray(p, float)
    fig, (ax, ax_e) = plt.subplots(1, 2, figsize=(8, 3.2))
    ax.plot(p, p, ":", color="gray", label="ideal S = p")
    ax.plot(p, gustafson_line, "-", color="tab:orange", label="Gustafson, α from p = 2")
    ax.plot(p, scaled_speedup, "o", color="tab:orange", label="measured")
    ax_e.plot(p, efficiency, "o-", color="tab:purple")
    for a in (ax, ax_e):
        if p.max() > cores:
            a.axvspan(cores + 0.05, p.max() + 0.3, color="gray", alpha=0.12)
        a.set_xlabel("ranks p (fixed per-rank batch)")
        a.grid(alpha=0.3)
    ax.set(ylabel="scaled speedup", title="Gustafson's scaled speedup", ylim=(0, None))
    ax_e.set(ylabel="T₁(b) / T_p(b)", title="weak-scaling efficiency", ylim=(0, 1.1))
    ax.legend(fontsize=7)
    return finish(fig)


def allreduce_fit(sweeps: dict, fit, fit_mask, held_mask, copy_bw: float, p_fit: int):
    """all_reduce time against size (log-log) with the fitted T = L + M/B, and bus bandwidth.

    ``sweeps``: {p: (sizes, seconds)}; of p_fit's sizes, ``fit_mask`` marks those the fit
    used (dots), ``held_mask`` those held out (open diamonds); the rest are crosses.
    ``copy_bw``: the copy bandwidth of rank 0's device (one core, or its GPU's memory).
    """
    from ..theory import busbw
    fig, (ax, ax_b) = plt.subplots(1, 2, figsize=(9, 3.5))
    for (p, (m, t)), color in zip(sweeps.items(), plt.cm.tab10.colors):
        m, t = np.asarray(m, float), np.asarray(t, float)
        if p == p_fit:
            used, held = np.asarray(fit_mask, bool), np.asarray(held_mask, bool)
            ax.plot(m[used], t[used] * 1e3, "o", color=color, label=f"p = {p}, fitted")
            ax.plot(m[held], t[held] * 1e3, "D", mfc="none", color=color, label=f"p = {p}, held out")
            other = ~(used | held)
            ax.plot(m[other], t[other] * 1e3, "x", color="gray", label=f"p = {p}, neither end")
            grid = np.geomspace(m.min(), m.max(), 100)
            ax.plot(grid, fit.seconds(grid) * 1e3, "-", color=color, lw=1,
                    label=f"L = {fit.latency * 1e6:.0f} µs, B = {fit.bandwidth / 1e9:.2f} GB/s")
            ax.axvline(fit.half_size, color="gray", ls=":", lw=1)
            ax.annotate("n½ = L·B", (fit.half_size, t.min() * 1e3), fontsize=7, rotation=90,
                        textcoords="offset points", xytext=(3, 0), color="gray")
        else:
            ax.plot(m, t * 1e3, "s-", color=color, ms=4, lw=0.8, label=f"p = {p}")
        ax_b.plot(m, busbw(m, t, p) / 1e9, "o-", color=color, ms=4, lw=0.8, label=f"busbw, p = {p}")
    ax_b.axhline(copy_bw / 1e9, color="black", ls="--", lw=1, label="memory copy on rank 0's device")
    for a in (ax, ax_b):
        a.set_xscale("log", base=2)
        a.set_xlabel("message size (bytes)")
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set(ylabel="all_reduce time (ms, median)", title="T(M) = L + M / B")
    ax_b.set(ylabel="GB/s", title="bus bandwidth vs the copy ceiling", ylim=(0, None))
    return finish(fig)


def step_prediction(bars: dict[str, dict[str, float]]):
    """Predicted and measured DDP step times, stacked by part: {label: {part: seconds}}."""
    colors = {k: COLORS[k] for k in ("compute", "comm", "measured")}
    fig, ax = plt.subplots(figsize=(6.5, 0.8 + 0.5 * len(bars)))
    labels = list(bars)[::-1]
    for y, label in enumerate(labels):
        left = 0.0
        for part, sec in bars[label].items():
            ax.barh(y, sec * 1e3, left=left, color=colors[part], height=0.6)
            left += sec * 1e3
    ax.set_yticks(range(len(labels)), labels)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set(xlabel="ms per step", title="T_step = T_compute + T_comm")
    ax.grid(axis="x", alpha=0.3)
    return finish(fig)

"""Figures for the chapters. Each returns a matplotlib Figure and never calls ``plt.show``."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np


def _finish(fig):
    """Lay the figure out and detach it from pyplot: the cell displays the returned figure once."""
    fig.tight_layout()
    plt.close(fig)
    return fig


def loss_curves(curves: dict[str, list[float]], title: str = "Training loss", xlabel: str = "step"):
    """One line per run: ``{"1 rank": losses, "2 ranks (DDP)": losses}``."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, losses in curves.items():
        ax.plot(np.arange(1, len(losses) + 1), losses, label=label)
    ax.set(xlabel=xlabel, ylabel="loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _finish(fig)


def digits_grid(images, labels, n: int = 16):
    """A row of sample images with their labels: what the models are actually trained on."""
    fig, axes = plt.subplots(1, n, figsize=(n * 0.6, 0.9))
    for ax, img, label in zip(axes, images[:n], labels[:n]):
        ax.imshow(img.squeeze(), cmap="gray_r")
        ax.set_title(int(label), fontsize=8)
        ax.axis("off")
    plt.close(fig)
    return fig


# --- Memory and data parallel (chapters 2, 3.1) -------------------------------------------

MEMORY_COLORS = {"parameters": "tab:blue", "gradients": "tab:orange", "optimizer states": "tab:green",
                 "autocast copies": "tab:purple", "activations": "tab:gray"}


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
            ax.barh(row, b / unit, left=left, color=MEMORY_COLORS.get(kind, "black"), height=0.6,
                    label=kind if row == 0 else None)
            left += b / unit
    # One legend entry per kind, whatever the layouts contain.
    kinds = list(dict.fromkeys(k for b in layouts.values() for k in b))
    handles = [plt.Rectangle((0, 0), 1, 1, color=MEMORY_COLORS.get(k, "black")) for k in kinds]
    if device_bytes:
        ax.axvline(device_bytes / unit, color="red", ls="--")
        handles.append(plt.Line2D([], [], color="red", ls="--"))
        kinds.append("device memory")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel=f"{name} per device", title=title)
    ax.legend(handles, kinds, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", alpha=0.3)
    return _finish(fig)


def dp_timeline(variants: dict[str, list[dict]]):
    """Per-rank lanes of one training step: compute (forward, backward, optimizer) and communication.

    ``variants`` maps a title to each rank's record of its last step, as
    ``helpers.recipes.data_parallel.timeline`` returns it. Backward compute ends at
    the last gradient; what follows until ``backward()`` returns is waiting for the
    all_reduces. Times in ms from the variant's earliest start on any rank.
    """
    fig, axes = plt.subplots(len(variants), 1, figsize=(7.5, 0.6 + 1.25 * len(variants)), sharex=True,
                             squeeze=False)
    colors = {"forward": "tab:blue", "backward": "tab:orange", "wait": "white", "optimizer": "tab:green",
              "all_reduce": "tab:red"}
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
            for _, a, b in r["comm_events"]:
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
    plt.close(fig)
    return fig


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
    return _finish(fig)


def bucket_sweep(labels: list[str], step_ms: list[float], buckets: list[int], hidden: list[float],
                 references: dict[str, float]):
    """Median step time per DDP bucket setting, with its bucket count and hidden share of
    communication written on each bar; ``references`` (name -> ms) as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    bars = ax.bar(labels, step_ms, color="tab:blue")
    for bar, n, h in zip(bars, buckets, hidden):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{n} buckets\n{h:.0%} hidden",
                ha="center", va="bottom", fontsize=7)
    for (name, ms), color in zip(references.items(), ("gray", "black", "tab:red")):
        ax.axhline(ms, color=color, ls="--", lw=1, label=name)
    ax.set(ylabel="median step time (ms)", xlabel="bucket_cap_mb")
    ax.set_ylim(0, max(step_ms + list(references.values())) * 1.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return _finish(fig)


# --- Pipeline / model parallel (chapters 3.2, 5.3) --------------------------------------

def pipeline_timeline(runs: dict[str, list[list[tuple]]], max_ms: float | None = None):
    """A Gantt chart per schedule: one row per stage, its compute spans as bars, idle as gaps.

    ``runs`` maps a title to each stage's spans ``(kind, micro_batch, start, end)``
    (``helpers.recipes.model_parallel.Timeline``); kind "F" is forward, "B" backward.
    All runs share one time axis (ms), starting where each run's first span starts;
    ``max_ms`` crops it, to show the first steps only.
    """
    unit = 1e3
    colors = {"F": "tab:blue", "B": "tab:orange"}
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 0.9 + 0.55 * sum(len(s) for s in runs.values())),
                             sharex=True, squeeze=False)
    for ax, (title, stages) in zip(axes[:, 0], runs.items()):
        t0 = min(s[2] for spans in stages for s in spans)
        for row, spans in enumerate(stages):
            for kind, mb, start, end in spans:
                ax.barh(row, (end - start) * unit, left=(start - t0) * unit, height=0.7,
                        color=colors.get(kind, "gray"), edgecolor="white", linewidth=0.5)
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
    return _finish(fig)


def bubble_vs_micro_batches(p: int, micro_batches, measured, theory_fn):
    """Measured busy fraction per stage against m, with the curve ``theory_fn(p, m)`` beside it."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    m_grid = np.arange(1, max(micro_batches) * 2 + 1)
    ax.plot(m_grid, theory_fn(p, m_grid), color="gray", label=f"theory m / (m + p - 1), p = {p}")
    measured = np.asarray(measured)
    for s in range(measured.shape[1]):
        ax.plot(micro_batches, measured[:, s], "o", label=f"measured, stage {s}")
    ax.set(xscale="log", xlabel="micro-batches m", ylabel="busy fraction of the step", ylim=(0, 1.05))
    ticks = [2 ** k for k in range(int(np.log2(m_grid[-1])) + 1)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(fig)


# --- Mixed precision (chapters 3.3, 5.2) -----------------------------------------------

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
    return _finish(fig)


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
    return _finish(fig)


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
    return _finish(fig)


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
    return _finish(fig)


def step_time_distribution(times: dict[str, list[float]], title: str = "Time per training step"):
    """Each step's time (ms), one column of points per run, with its median as a bar."""
    fig, ax = plt.subplots(figsize=(4.5, 3))
    for i, (label, ts) in enumerate(times.items()):
        ms = 1e3 * np.asarray(ts)
        ax.plot(i + np.linspace(-0.15, 0.15, len(ms)), ms, ".", alpha=0.5)
        ax.hlines(np.median(ms), i - 0.3, i + 0.3, color="black", label="median" if i == 0 else None)
    ax.set_xticks(range(len(times)), list(times))
    ax.set(ylabel="ms", ylim=(0, None), title=title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _finish(fig)


# --- Chapter 4: speedup and communication ------------------------------------------------

PHASE_COLORS = {"data": "tab:gray", "forward": "tab:cyan", "backward": "tab:blue", "comm": "tab:red",
                "optimizer": "tab:green"}


def amdahl_curves(alpha: float, p_max: int = 64, p_mark: int | None = None):
    """Amdahl's and Gustafson's speedups for one alpha, the ceiling 1/alpha, and efficiency S/p."""
    from .theory import amdahl, gustafson
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
    return _finish(fig)


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
    return _finish(fig)


def phase_bars(rows: dict[str, dict[str, float]], title: str = "Where a step's time goes"):
    """Stacked bars of median per-phase milliseconds, one bar per label (``scaling.PHASES``)."""
    fig, ax = plt.subplots(figsize=(6.5, 0.8 + 0.5 * len(rows)))
    labels = list(rows)[::-1]
    for y, label in enumerate(labels):
        left = 0.0
        for phase, color in PHASE_COLORS.items():
            ms = rows[label][phase] * 1e3
            ax.barh(y, ms, left=left, color=color, height=0.6, label=phase if y == 0 else None)
            left += ms
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="ms per step (median)", title=title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _finish(fig)


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
    return _finish(fig)


def allreduce_fit(sweeps: dict, fit, fit_mask, held_mask, copy_bw: float, p_fit: int):
    """all_reduce time against size (log-log) with the fitted T = L + M/B, and bus bandwidth.

    ``sweeps``: {p: (sizes, seconds)}; of p_fit's sizes, ``fit_mask`` marks those the fit
    used (dots), ``held_mask`` those held out (open diamonds); the rest are crosses.
    ``copy_bw``: one core's copy bandwidth.
    """
    from .theory import busbw
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
    ax_b.axhline(copy_bw / 1e9, color="black", ls="--", lw=1, label="one core's memory copy")
    for a in (ax, ax_b):
        a.set_xscale("log", base=2)
        a.set_xlabel("message size (bytes)")
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set(ylabel="all_reduce time (ms, median)", title="T(M) = L + M / B")
    ax_b.set(ylabel="GB/s", title="bus bandwidth vs the copy ceiling", ylim=(0, None))
    return _finish(fig)


def step_prediction(bars: dict[str, dict[str, float]]):
    """Predicted and measured DDP step times, stacked by part: {label: {part: seconds}}."""
    colors = {"compute": "tab:blue", "comm": "tab:red", "measured": "tab:purple"}
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
    return _finish(fig)


# --- Chapter 5.1: a loss curve that draws itself while the job runs ---------------------

import time  # noqa: E402 - used by LiveLoss only


class LiveLoss:
    """A loss curve redrawn in its cell while ``helpers.launch`` runs: pass it as ``on_progress``.

    ``launch`` calls it with every record rank 0 gives ``helpers.dist.report``. It
    redraws at most every ``every`` seconds, through one IPython display handle, so
    the figure updates in place; ``finish()`` draws the final state, which is what
    the built book keeps. Outside a notebook it only collects the points.
    """

    def __init__(self, title: str = "Training loss on rank 0", key: str = "loss", every: float = 0.25):
        self.title, self.key, self.every = title, key, every
        self.steps: list[int] = []
        self.values: list[float] = []
        self.total = 0
        self.handle = None
        self.drawn_at = 0.0
        self.draws = 0

    def __call__(self, record: dict) -> None:
        if self.key not in record:
            return
        self.steps.append(record["step"])
        self.values.append(record[self.key])
        self.total = record["total"]
        if time.monotonic() - self.drawn_at >= self.every:
            self.draw()

    def figure(self):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(self.steps, self.values, lw=1)
        last = self.steps[-1] if self.steps else 0
        ax.set(xlim=(0, max(self.total, 1)), xlabel="step", ylabel=self.key,
               title=f"{self.title}: step {last} of {self.total}")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        plt.close(fig)
        return fig

    def draw(self) -> None:
        from .live import in_notebook
        self.drawn_at = time.monotonic()
        if not in_notebook():
            return
        from IPython.display import display
        fig = self.figure()
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
        self.draws += 1

    def finish(self) -> None:
        """Draw the last points (the launch may end between two redraws)."""
        if self.steps:
            self.draw()


# --- Chapter 5.4: resuming after a crash ---------------------------------------------------

def resume_curves(straight: list[float], resumed: dict, article: dict, crash_at: int):
    """Loss per step: the uninterrupted run, the exact resume and the article's resume.

    ``resumed`` and ``article`` are rank 0's results of ``checkpointing.train``
    (their ``losses`` start at ``first_step``; ``resumed_from`` is the checkpoint's step).
    """
    fig, ax = plt.subplots(figsize=(7, 3.4))
    steps = np.arange(1, len(straight) + 1)
    ax.plot(steps, straight, color="0.6", lw=4, label="uninterrupted run")
    for run, style, label in ((resumed, dict(color="tab:blue", lw=1.2), "killed, resumed exactly"),
                              (article, dict(color="tab:red", lw=1.2, ls="--"),
                               "killed, resumed the article's way")):
        start = run["resumed_from"]
        xs = np.arange(run["first_step"], run["first_step"] + len(run["losses"]))
        keep = xs > start
        ax.plot(xs[keep], np.asarray(run["losses"])[keep], label=f"{label} (from step {start})", **style)
    ax.axvline(crash_at, color="black", lw=0.8, ls=":")
    ax.annotate("SIGKILL", (crash_at, ax.get_ylim()[1]), xytext=(3, -12), textcoords="offset points",
                fontsize=8)
    ax.set(xlabel="step", ylabel="loss (rank 0)", title="Training loss across a crash")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(fig)

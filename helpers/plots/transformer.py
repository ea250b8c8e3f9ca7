"""Figures of chapter 8.1, the transformer's bill: what one layer saves, and a profiled DDP step per rank."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import COLORS, color, finish


def activation_terms(measured: dict[str, float], formula: dict[str, float], title: str = ""):
    """One horizontal bar per term of one layer's saved activations (kB): measured beside the formula."""
    terms = list(dict.fromkeys([*formula, *measured]))
    y = np.arange(len(terms))
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.32 * len(terms)))
    ax.barh(y - 0.2, [measured.get(t, 0) / 1e3 for t in terms], height=0.4, color=COLORS["measured"],
            label="measured (saved-tensor hooks)")
    ax.barh(y + 0.2, [formula.get(t, 0) / 1e3 for t in terms], height=0.4, color=COLORS["compute"],
            label="formula (theory)")
    ax.set_yticks(y, terms, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("kB saved for backward, one layer")
    ax.set_title(title or "One layer's activations, term by term", fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7)
    return finish(fig)


LANE_COLORS = {"compute": "darkslategray", "idle": "lightgray", "all_reduce": COLORS["all_reduce"]}
LANES = (("compute", "main thread: in an op"), ("idle", "main thread: no op"),
         ("all_reduce", "all_reduce, off the main thread"))


def rank_timelines(timelines: list[dict]):
    """Per rank, three lanes over the profiled steps (``analysis.traces.rank_timeline``): the main
    thread computing or idle, and the all-reduces off it (gloo's threads, or NCCL's GPU stream); the
    phases marked along the top lane.
    Times in ms from the earliest phase's start on any rank (the ranks share the host's clock)."""
    fig, ax = plt.subplots(figsize=(8.5, 0.9 + 1.1 * len(timelines)))
    t0 = min(t["window"][0] for t in timelines)
    ticks = []
    for i, tl in enumerate(timelines):
        base = i * (len(LANES) + 1.5)
        for kind, a, b in tl["phases"]:
            ax.barh(base - 0.75, (b - a) * 1e3, left=(a - t0) * 1e3, height=0.4, color=color(kind), lw=0)
        for lane, (key, name) in enumerate(LANES):
            spans = [((a - t0) * 1e3, (b - a) * 1e3) for a, b in tl[key]]
            ax.broken_barh(spans, (base + lane - 0.4, 0.8), color=LANE_COLORS[key])
            ticks.append((base + lane, f"rank {tl['rank']} {name}"))
        ticks.append((base - 0.75, f"rank {tl['rank']} phases"))
    ax.set_yticks([t for t, _ in ticks], [n for _, n in ticks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("Profiled DDP steps of the GPT, per rank", fontsize=9, loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color(k)) for k in ("forward", "backward", "optimizer")]
    handles += [plt.Rectangle((0, 0), 1, 1, color=LANE_COLORS[k]) for k, _ in LANES]
    ax.legend(handles, ["forward", "backward", "optimizer", "in an op", "no op", "all_reduce"],
              fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.1 / len(timelines)))
    ax.grid(axis="x", alpha=0.3)
    return finish(fig)

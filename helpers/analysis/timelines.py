"""Timelines of spans -> overlap and utilization: DDP's buckets (3.1) and pipeline schedules (3.2)."""
from __future__ import annotations

from ..training import median

# --- Chapter 3.1: DDP's buckets and overlap -------------------------------------------

def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, as sorted disjoint ones."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def hidden_fraction(intervals: list[tuple[float, float]], compute_end: float) -> float:
    """Share of the communication time (union of intervals) spent before the backward's compute ended."""
    merged = merge(intervals)
    total = sum(b - a for a, b in merged)
    hidden = sum(max(0.0, min(b, compute_end) - a) for a, b in merged)
    return hidden / total if total else 0.0


def summarize_timeline(ranks: list[dict]) -> dict[str, dict[str, float]]:
    """Per variant of ``data_parallel.timeline``: medians over all ranks' timed steps of the step
    time, of the backward's compute (forward end to last gradient), of the time inside
    all_reduces and of the share of it hidden in the backward; and the last step's bucket count."""
    out = {}
    for name in ranks[0]["runs"]:
        runs = [r["runs"][name] for r in ranks]

        def med(key):
            return median(step[key] for run in runs for step in run["steps"])
        out[name] = {"step_ms": 1e3 * med("seconds"), "backward_ms": 1e3 * med("backward"),
                     "buckets": len(runs[0]["comm_events"]), "comm_ms": 1e3 * med("comm"),
                     "hidden": med("hidden")}
    return out


def step_ratios(ranks: list[dict], slow: str, fast: str, key: str = "comm") -> list[float]:
    """One ratio per timed step: ``key`` of variant ``slow`` over that of ``fast``, each summed over
    the ranks. The variants took turns step by step, seconds apart, so a slow moment of the machine
    falls on both sides of a ratio (``analysis.margins``' paired rounds). Reads both of 3.1's
    recipes: ``timeline`` (a dict per step under "steps") and ``accumulate`` (a list per measure)."""
    def per_step(name: str) -> list[float]:
        runs = [r["runs"][name] for r in ranks]
        series = [[s[key] for s in run["steps"]] if "steps" in run else run[key] for run in runs]
        return [sum(step) for step in zip(*series)]
    return [s / f for s, f in zip(per_step(slow), per_step(fast))]


# --- Chapter 3.2: pipeline schedules ---------------------------------------------------

def window(stage_spans: list[list[tuple]]) -> tuple[float, float]:
    """The common time window of a schedule: first span's start to last span's end, over all stages."""
    return (min(s[2] for spans in stage_spans for s in spans),
            max(s[3] for spans in stage_spans for s in spans))


def utilization(stage_spans: list[list[tuple]]) -> list[float]:
    """Each stage's busy fraction of the common window."""
    start, end = window(stage_spans)
    return [sum(s[3] - s[2] for s in spans) / (end - start) for spans in stage_spans]


def overlap_seconds(a: list[tuple], b: list[tuple]) -> float:
    """How long two stages computed at the same moment (0 in naive model parallelism)."""
    return sum(max(0.0, min(x[3], y[3]) - max(x[2], y[2])) for x in a for y in b)


def summarize_schedules(ranks: list[dict]) -> dict:
    """Per micro-batch count of ``model_parallel.schedule_timeline``: each stage's utilization,
    the step time, and how long neighbouring stages overlapped."""
    out = {}
    for m in ranks[0]["runs"]:
        spans = [r["runs"][m] for r in ranks]
        start, end = window(spans)
        out[m] = {"utilization": utilization(spans), "step_s": (end - start) / ranks[0]["steps"],
                  "overlap_s": sum(overlap_seconds(spans[i], spans[i + 1]) for i in range(len(spans) - 1))}
    return out

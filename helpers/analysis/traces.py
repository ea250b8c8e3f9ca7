"""Chapter 8.1's profiler traces -> one timeline per rank, and the book's own Timeline checked against it.

A trace (``recipes.transformer.profile_steps``) is Chrome's JSON: complete events (``"ph": "X"``) with a
start ``ts`` (microseconds after ``baseTimeNanoseconds``) and a ``dur``, each on a thread (``tid``),
mapped here onto the rank's ``perf_counter`` through clock marks it left in the trace. On one rank:

* compute: the main thread inside an op (the union of its top-level ``cpu_op`` events);
* all_reduce: DDP's buckets reduced on gloo's own threads (``pt_gloo_runloop``), or by NCCL's
  kernels on a GPU stream;
* idle: the main thread in no op at all, between the first phase's start and the last one's end:
  Python between ops, and waiting.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .timelines import merge

PHASE_PREFIX = "phase:"
ALL_REDUCE = ("gloo:all_reduce", "nccl:all_reduce")  # the backends' own record_function names


def _is_all_reduce(e: dict, main_tid: int) -> bool:
    """An all-reduce off the main thread: on gloo's threads, or NCCL's kernel on a GPU stream (the
    main thread only enqueues it there)."""
    if e["tid"] == main_tid:
        return False
    return e["name"] in ALL_REDUCE or (e.get("cat") == "kernel" and "AllReduce" in e["name"])


def load(path: str | Path) -> dict:
    """A Chrome trace, plain or gzipped."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _seconds(trace: dict, marks: dict):
    """Event -> (start, end) on the rank's ``perf_counter``, the Timeline's clock, along the line
    through the tightest clock mark at each end of the window (``recipes.transformer.clock_marks``).

    The profiler stamps its events on a cycle counter, converted to wall time by a line it fits over
    the window, so a step of the wall clock meanwhile (a VM's time sync) tilts that line. One pairing
    of the wall clock with ``perf_counter`` corrects an offset, not a tilt: CI once saw every phase
    start 2 ms early and last 0.9% long. The marks are in the trace itself, so the line through them
    maps the profiler's clock, whatever it is, onto ``perf_counter``."""
    base = trace.get("baseTimeNanoseconds", 0) / 1e9
    events = {e["name"]: e for e in trace["traceEvents"] if e.get("ph") == "X"}
    ends = []
    for label in ("start", "end"):
        name, before, after = min(marks[label], key=lambda m: m[2] - m[1])
        e = events[name]
        ends.append((base + (e["ts"] + e["dur"] / 2) / 1e6, (before + after) / 2))
    (t0, p0), (t1, p1) = ends
    rate = (p1 - p0) / (t1 - t0)

    def convert(e: dict) -> tuple[float, float]:
        start = p0 + (base + e["ts"] / 1e6 - t0) * rate
        return start, start + e["dur"] / 1e6 * rate
    return convert


def gaps(busy: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of [start, end] that no interval of ``busy`` (merged) covers."""
    out, at = [], start
    for a, b in busy:
        if a > at:
            out.append((at, min(a, end)))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(a, b) for a, b in out if b > a]


def rank_timeline(trace: dict, result: dict) -> dict:
    """One rank's profiled steps: its phases as the profiler saw them, and compute, all_reduce and
    idle intervals, all in seconds on the rank's ``perf_counter``."""
    convert = _seconds(trace, result["clock_marks"])
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("tid"), int)]
    main = [e for e in events if e["tid"] == result["main_tid"]]
    phases = sorted((e["name"].removeprefix(PHASE_PREFIX), *convert(e))
                    for e in main if e["name"].startswith(PHASE_PREFIX))
    phases.sort(key=lambda p: p[1])
    start, end = phases[0][1], phases[-1][2]
    compute = merge([convert(e) for e in main if e.get("cat") == "cpu_op"])
    reduced = [e for e in events if _is_all_reduce(e, result["main_tid"])]
    return {"rank": result["rank"], "phases": phases, "window": (start, end), "compute": compute,
            "all_reduce": sorted(convert(e) for e in reduced), "idle": gaps(compute, start, end),
            "all_reduce_threads": sorted({e["tid"] for e in reduced})}


def _total(intervals, start=float("-inf"), end=float("inf")) -> float:
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)


def summary(timeline: dict) -> dict[str, float]:
    """Seconds of the window spent computing, idle, and in all_reduce (and how much of that the
    main thread's compute overlapped)."""
    start, end = timeline["window"]
    reduce_ = merge(timeline["all_reduce"])
    overlapped = sum(_total(timeline["compute"], a, b) for a, b in reduce_)
    return {"window": end - start, "compute": _total(timeline["compute"], start, end),
            "idle": _total(timeline["idle"]), "all_reduce": _total(reduce_),
            "all_reduce under compute": overlapped}


def phase_check(result: dict, timeline: dict) -> list[dict]:
    """The Timeline's spans against the profiler's phases, step by step: the Timeline reads its clock
    before the phase's ``record_function`` opens and after it closes, so each profiler phase must lie
    inside its Timeline span, up to how well the two clocks were paired (``clock_marks``)."""
    spans = [(kind, a, b) for kind, _, a, b in result["spans"]]
    if [s[0] for s in spans] != [p[0] for p in timeline["phases"]]:
        raise ValueError("the Timeline and the trace name different phases")
    return [{"phase": kind, "timeline_s": b - a, "profiler_s": d - c, "starts_after": c - a, "ends_before": b - d}
            for (kind, a, b), (_, c, d) in zip(spans, timeline["phases"])]

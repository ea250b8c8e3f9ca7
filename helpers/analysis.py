"""From the ranks' results to the numbers a chapter states: one home, shared by notebooks and bench/.

Recipes return raw measurements (spans, per-step times, per-rank states); the
functions here reduce them. None of them runs a job.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import theory
from .training import median


# --- Chapter 3.1: DDP's buckets and overlap -------------------------------------------

def hidden_fraction(intervals: list[tuple[float, float]], compute_end: float) -> float:
    """Share of the communication time (union of intervals) spent before the backward's compute ended."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
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


# --- Chapter 4.1: strong and weak scaling ------------------------------------------------

class ScalingRuns:
    """The blocks of ``scaling.scaling_sweep``: (round, p, G = p * per-rank batch) -> seconds by phase."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def median(self, key: str, p: int, G: int) -> float:
        return median(r[key] for r in self.rows if r["p"] == p and r["G"] == G)

    def speedups(self, p: int, G: int) -> list[float]:
        """One per round: T_1(G) / T_p(G), from blocks run seconds apart."""
        one = {r["round"]: r["step"] for r in self.rows if r["p"] == 1 and r["G"] == G}
        return [one[r["round"]] / r["step"] for r in self.rows if r["p"] == p and r["G"] == G]

    def speedup(self, p: int, G: int) -> float:
        return median(self.speedups(p, G)) if p > 1 else 1.0

    def points(self, ps: list[int], G: int) -> tuple[list[int], list[float]]:
        """Every round's speedup at each p, as (p values, speedups) for a fit or a plot."""
        pts = [(p, s) for p in ps for s in self.speedups(p, G)]
        return [p for p, _ in pts], [s for _, s in pts]

    def fit_amdahl(self, ps: list[int], G: int) -> theory.AmdahlFit:
        return theory.fit_amdahl(*self.points(ps, G))

    def step_model(self, ps: list[int], G_below: int) -> theory.StepModel:
        """``theory.fit_step_model`` on every block with p in ``ps`` and G < ``G_below``."""
        seen = [r for r in self.rows if r["G"] < G_below and r["p"] in ps]
        return theory.fit_step_model([r["p"] for r in seen], [r["per_rank_batch"] for r in seen],
                                     [r["step"] for r in seen])

    def weak(self, ps: list[int], b: int) -> dict[int, dict[str, float]]:
        """Weak scaling at per-rank batch b: samples/s, efficiency T_1(b)/T_p(b), scaled speedup."""
        t1 = self.median("step", 1, b)
        return {p: {"samples_per_s": p * b / self.median("step", p, p * b),
                    "efficiency": t1 / self.median("step", p, p * b),
                    "scaled_speedup": self.speedup(p, p * b)} for p in ps}


# --- Chapter 4.2: the all_reduce fit ---------------------------------------------------

def allreduce_table(sweeps: dict[int, dict]) -> list[tuple[int, dict[int, dict[str, float]]]]:
    """``collectives.allreduce_sweep`` results side by side, one row per message size (ascending):
    (size, {p: {"seconds", "algbw", "busbw"}}) for each p whose sweep ran that size."""
    rows = []
    for m in sorted({m for sw in sweeps.values() for m in sw["sizes"]}):
        row = {}
        for p, sw in sweeps.items():
            if m in sw["sizes"]:
                t = sw["seconds"][sw["sizes"].index(m)]
                row[p] = {"seconds": t, "algbw": float(theory.algbw(m, t)),
                          "busbw": float(theory.busbw(m, t, p))}
        rows.append((m, row))
    return rows


@dataclass(frozen=True)
class AllreduceFit:
    """T = L + M / B fitted on the two ends of a size sweep, with what it left out.

    Sizes under n_1/2 / 8 are latency-bound, over 8 n_1/2 bandwidth-bound (n_1/2 from a
    first fit on every size); the fit uses every latency-bound size and every other
    bandwidth-bound one, and the other bandwidth-bound sizes are held out.
    """

    sizes: np.ndarray
    seconds: np.ndarray
    fit: theory.AlphaBetaFit
    latency_bound: np.ndarray
    bandwidth_bound: np.ndarray
    used: np.ndarray
    held: np.ndarray

    @property
    def held_errors(self) -> np.ndarray:
        m, t = self.sizes[self.held], self.seconds[self.held]
        return np.abs(self.fit.seconds(m) - t) / t

    @property
    def middle(self) -> np.ndarray:
        return ~(self.latency_bound | self.bandwidth_bound)

    @property
    def middle_errors(self) -> np.ndarray:
        m, t = self.sizes[self.middle], self.seconds[self.middle]
        return (t - self.fit.seconds(m)) / self.fit.seconds(m)

    @property
    def r2(self) -> float:
        bw = self.bandwidth_bound
        return self.fit.r2(self.sizes[bw], self.seconds[bw])


def fit_allreduce(sizes, seconds) -> AllreduceFit:
    """``theory.fit_alpha_beta`` on a sweep's two ends: the selection ``AllreduceFit`` describes."""
    m, t = np.asarray(sizes, float), np.asarray(seconds, float)
    rough = theory.fit_alpha_beta(m, t)
    lat, bw = m <= rough.half_size / 8, m >= 8 * rough.half_size
    even = np.arange(len(m)) % 2 == 0
    used = lat | bw & even
    return AllreduceFit(m, t, theory.fit_alpha_beta(m[used], t[used]), lat, bw, used, bw & ~even)


def ddp_step_predictions(runs: list[dict], fit: theory.AlphaBetaFit) -> list[dict]:
    """``scaling.timed_training`` run as (timed hook, plain DDP) pairs -> T_compute + L + M/B per pair.

    The timed run gives the compute (data, forward, backward, optimizer) with the
    all_reduce kept out; the plain DDP run is the step time to predict.
    """
    out = []
    for timed, real in zip(runs[::2], runs[1::2]):
        t_compute = timed["data"] + timed["forward"] + timed["backward"] + timed["optimizer"]
        t_comm = float(fit.seconds(timed["grad_bytes"]))
        no_overlap = float(theory.ddp_step_time(t_compute, t_comm))
        out.append({"model": timed.get("model"), "per_rank_batch": timed["per_rank_batch"],
                    "grad_bytes": timed["grad_bytes"], "buckets": real["buckets"], "t_compute": t_compute,
                    "t_comm": t_comm, "no_overlap": no_overlap,
                    "best_overlap": float(theory.ddp_step_time(t_compute, t_comm, timed["backward"])),
                    "measured": real["step"], "hook_comm": timed["comm"], "timed": timed,
                    "error": abs(no_overlap - real["step"]) / real["step"]})
    return out


# --- Chapter 5.3: a model put together from its stages -----------------------------------

def assemble(ranks: list[dict], dp_rank: int = 0) -> dict:
    """One replica's full state dict, put together from its stages' ranks."""
    state = {}
    for r in ranks:
        if r["dp_rank"] == dp_rank:
            state.update(r["state"])
    return state


def replica_mean_losses(ranks: list[dict]) -> list[float]:
    """The global batch's loss per step: the mean of the replicas' last-stage losses (equal batches)."""
    last = [r["losses"] for r in ranks if r["losses"]]
    return np.mean(np.asarray(last), axis=0).tolist()


# --- Chapters 3.2 and 5.4: two runs' tensors compared ---------------------------------------

def max_abs_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two dicts of tensors (state dicts, gradients),
    over the names of ``a``: 0.0 when one run repeated the other exactly."""
    return max((a[k] - b[k]).abs().max().item() for k in a)


# --- Chapters 5.1 and 5.2: DDP runs of ddp_mnist, reduced -----------------------------------

def ddp_throughput(result: dict, batch_size: int = 64) -> float:
    """Global samples per second of one rank's ``ddp_mnist.train`` result: a step's samples over
    that rank's *median* step time, so that a step slowed by another program does not count."""
    return batch_size * result["world_size"] / median(result["step_seconds"])


def slowest_rank_seconds(ranks: list[dict]) -> float:
    """A DDP job's training time: the slowest rank's ``seconds``, since it sets everyone's pace."""
    return max(r["seconds"] for r in ranks)


def same_state(a: dict, b: dict) -> bool:
    """Whether two state dicts hold the same names and bit-identical tensors."""
    import torch
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- Issue 11: when adding ranks pays -------------------------------------------------------

def ratio_spread(ratios: list[float]) -> dict[str, float]:
    """Median, min and max of per-round ratios (the median of the package: middle two averaged)."""
    return {"median": median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}


def paired_ratios(rows: list[dict], numerator: dict, denominator: dict, key: str = "step") -> list[float]:
    """One ratio per round: ``key`` of the row matching ``numerator`` over that of the row matching
    ``denominator`` in the same round (rounds lacking either are skipped). Strong scaling:
    ``paired_ratios(rows, {"p": 1, "G": G}, {"p": 2, "G": G})``; weak: ``{"p": 1, "G": b}`` over
    ``{"p": 2, "G": 2 * b}``, times 2."""
    def by_round(match):
        return {r["round"]: r[key] for r in rows if all(r.get(k) == v for k, v in match.items())}
    num, den = by_round(numerator), by_round(denominator)
    return [num[r] / den[r] for r in sorted(num) if r in den]


def split_calls(calls_by_rank: list[list[tuple[float, float]]]) -> dict[str, list[float]]:
    """One collective's calls, (start, end) on the shared monotonic clock, one list per rank.

    For call i: ``seconds`` is each rank's own start-to-end; ``skew`` how much later the
    last rank arrived than the first (max start - min start); ``after_both`` the time
    from the last arrival to the last rank's end, i.e. the call's cost once nobody waits.
    """
    out: dict[str, list[float]] = {"seconds": [], "skew": [], "after_both": []}
    for calls in zip(*calls_by_rank):
        starts, ends = [c[0] for c in calls], [c[1] for c in calls]
        out["seconds"] += [e - s for s, e in calls]
        out["skew"].append(max(starts) - min(starts))
        out["after_both"].append(max(ends) - max(starts))
    return out


def contention_slowdown(rows: list[dict]) -> dict[tuple[str, int], dict[str, float]]:
    """``regimes.contention`` rows of all ranks -> per (model, per-rank batch): the median step
    alone and together, and the per-round, per-rank ratio together / alone (median, min, max)."""
    out = {}
    for key in dict.fromkeys((r["model"], r["per_rank_batch"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["per_rank_batch"]) == key]
        pair = {}
        for r in mine:
            pair.setdefault((r["rank"], r["round"]), {})[r["mode"]] = r["step"]
        ratios = [v["together"] / v["alone"] for v in pair.values() if len(v) == 2]
        out[key] = {"alone": median(r["step"] for r in mine if r["mode"] == "alone"),
                    "together": median(r["step"] for r in mine if r["mode"] == "together"),
                    **ratio_spread(ratios)}
    return out

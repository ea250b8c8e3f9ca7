"""Collective timings -> the L + M/B fit (4.2), DDP step predictions, and one call split into skew and cost."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import theory
from ..training import median

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


def pooled(a: dict, b: dict) -> dict:
    """Two ``collectives.allreduce_sweep`` results of the same sizes as one sweep: every repetition of
    both (``times``), each size's median over them (``seconds``), and how many sweeps (``sweeps``)."""
    if a["sizes"] != b["sizes"]:
        raise ValueError(f"pooled needs two sweeps of the same sizes, got {a['sizes']} and {b['sizes']}")
    times = [x + y for x, y in zip(a["times"], b["times"])]
    return {**a, "times": times, "seconds": [median(t) for t in times],
            "repeats": [len(t) for t in times], "sweeps": a.get("sweeps", 1) + b.get("sweeps", 1)}


def fit_until_clear(sweep: dict, more, *, least_r2: float, cap: int) -> tuple[AllreduceFit, dict]:
    """``fit_allreduce`` on ``sweep``, pooled with ``more()`` (one more sweep, measured the same way)
    until the fit's R^2 over the bandwidth-bound sizes reaches ``least_r2`` or ``cap`` sweeps are in.
    A slow spell of the machine that bends one sweep's line weighs less in the medians of more
    repetitions; the line a quiet machine draws is not moved by them. Returns (the fit, the pooled sweep)."""
    fit = fit_allreduce(sweep["sizes"], sweep["seconds"])
    while fit.r2 < least_r2 and sweep.get("sweeps", 1) < cap:
        sweep = pooled(sweep, more())
        fit = fit_allreduce(sweep["sizes"], sweep["seconds"])
    return fit, {"sweeps": 1, **sweep}


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


# --- Chapter 4.3: one call's cost once every rank has arrived ---------------------------

def split_calls(calls_by_rank: list[list[tuple[float, float]]]) -> dict[str, list[float]]:
    """One collective's calls, (start, end) on the shared monotonic clock, one list per rank.

    For call i: ``seconds`` is each rank's own start-to-end; ``skew`` how much later the
    last rank arrived than the first (max start - min start); ``after_both`` the time
    from the last arrival to the last rank's end, i.e. the call's cost once nobody waits;
    ``waited`` how long the first rank listed waited in the call for the last to arrive.
    """
    out: dict[str, list[float]] = {"seconds": [], "skew": [], "after_both": [], "waited": []}
    for calls in zip(*calls_by_rank):
        starts, ends = [c[0] for c in calls], [c[1] for c in calls]
        out["seconds"] += [e - s for s, e in calls]
        out["skew"].append(max(starts) - min(starts))
        out["after_both"].append(max(ends) - max(starts))
        out["waited"].append(max(starts) - starts[0])
    return out

"""Scaling runs -> speedups: strong and weak scaling (4.1), and paired per-round ratios (4.3)."""
from __future__ import annotations

from .. import theory
from ..training import median

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


# --- Chapter 4.3: when adding ranks pays -----------------------------------------------

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

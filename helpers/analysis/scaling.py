"""Scaling runs -> speedups: strong and weak scaling (4.1), and paired per-round ratios (4.3)."""
from __future__ import annotations

from .. import theory
from ..training import median

# --- Chapter 4.1: strong and weak scaling ------------------------------------------------

PARALLEL = ("data", "forward", "backward")  # the phases whose work a rank's share of the batch sets

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

    def parallel_seconds(self, p: int, G: int, phases=PARALLEL) -> dict[int, float]:
        """Per round: the seconds of ``phases`` (the work that splits over the ranks) in the (p, G) block."""
        return {r["round"]: sum(r[ph] for ph in phases) for r in self.rows if r["p"] == p and r["G"] == G}

    def shrink(self, G: int, b: int, phases=PARALLEL) -> dict[str, float]:
        """Per round, paired: ``phases`` at p = 2 over p = 1 at global batch G (``shrink``); the contention,
        the same ``phases`` of a per-rank batch b side by side (p = 2, G = 2b) over alone (p = 1, G = b), 1
        where each rank has a core to itself; and ``work``, the shrink with the contention divided out.
        The medians over the rounds, and the contention's range."""
        rounds = [self.parallel_seconds(p, g, phases) for p, g in ((2, G), (1, G), (2, 2 * b), (1, b))]
        both = sorted(set.intersection(*(set(r) for r in rounds)))
        if not both:
            raise ValueError(f"no round has the blocks (p, G) = (2, {G}), (1, {G}), (2, {2 * b}) and (1, {b})")
        shrink = [rounds[0][r] / rounds[1][r] for r in both]
        contention = [rounds[2][r] / rounds[3][r] for r in both]
        return {"shrink": median(shrink), "contention": median(contention), "contention_lo": min(contention),
                "contention_hi": max(contention), "work": median(s / c for s, c in zip(shrink, contention)),
                "n": len(both)}

    def fit_amdahl(self, ps: list[int], G: int) -> theory.AmdahlFit:
        return theory.fit_amdahl(*self.points(ps, G))

    def contention(self, p: int, b: int, phases=PARALLEL) -> float:
        """How much slower each of p ranks computed a per-rank batch b side by side than one rank alone:
        the median over rounds of ``phases`` at (p, G = p b) over (1, G = b), paired by round."""
        together, alone = self.parallel_seconds(p, p * b, phases), self.parallel_seconds(1, b, phases)
        ratios = [together[r] / alone[r] for r in sorted(together) if r in alone]
        if not ratios:
            raise ValueError(f"no round has the blocks (p, G) = ({p}, {p * b}) and (1, {b})")
        return median(ratios)

    def step_model(self, ps: list[int], G_below: int, contention: dict | None = None) -> theory.StepModel:
        """``theory.fit_step_model`` on every block with p in ``ps`` and G < ``G_below``, with each p's
        measured ``contention`` (``ScalingRuns.contention``) where given."""
        seen = [r for r in self.rows if r["G"] < G_below and r["p"] in ps]
        return theory.fit_step_model([r["p"] for r in seen], [r["per_rank_batch"] for r in seen],
                                     [r["step"] for r in seen], contention)

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

"""Chapter 4.3: ``regimes.predictor_job``'s all_reduce sweep and scaling blocks -> the predictor's
fits, and its errors on jobs it never saw (shared with bench/regimes.py); and those measurements
kept on disk, so that chapter 5.1 predicts its own run from them.

The scaling blocks come in two kinds. Calibration blocks use
the timed, blocking all_reduce hook, so each phase of the step and each call can be read; the
held-out blocks ("NAME overlap") are plain DDP, whose step time is what the predictor must get
right. The two sets share no (model, global batch) pair.
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from .. import theory
from ..data import DATA_DIR
from ..training import median
from .communication import AllreduceFit, fit_allreduce, split_calls
from .scaling import paired_ratios, ratio_spread

OVERLAP = " overlap"


def workload(name: str, facts: dict) -> theory.Workload:
    """A model's ``Trainer.facts()`` (taken at p = 2, after DDP rebuilt its buckets) as a Workload."""
    return theory.Workload(name.removesuffix(OVERLAP), facts["n_params"], facts["macs"], tuple(facts["bucket_bytes"]))


def _blocks(rows: list[dict], model: str, p: int, G: int) -> list[dict]:
    return [r for r in rows if r["model"] == model and r["p"] == p and r["G"] == G]


def _phase_medians(blocks: list[dict]) -> dict[str, float]:
    return {k: median(b[k] for b in blocks) for k in (*theory.PHASES, "comm", "step")}


@dataclass(frozen=True)
class Calibration:
    """Everything the predictor was fitted on: chapter 4.2's all_reduce fit, the ring ``Link`` with its
    in-step per-call cost and drift, one rank's ``ComputeModel``, and the contention factor."""

    allreduce: AllreduceFit
    link: theory.Link
    compute: theory.ComputeModel
    contention: float
    workloads: dict
    pairs: tuple  # the (model, G) blocks it was fitted on

    def predict(self, model: str, G: int, p: int, overlap: bool = True) -> theory.StepPrediction:
        return theory.predict(self.workloads[model], G, p, self.compute, self.link, self.contention, overlap)

    def speedup(self, model: str, G: int, p: int = 2) -> float:
        return self.predict(model, G, 1).step / self.predict(model, G, p).step


def call_costs(ranks: list[dict], workloads: dict, pairs: tuple, fit) -> dict[str, list[float]]:
    """The timed hook's all_reduces at p = 2, both ranks' stamps side by side (``split_calls``): per call,
    what it cost once both ranks had arrived, beyond what ``fit`` prices (``extra``); per block, rank 0's
    compute and how long it waited in a step's calls for rank 1 to arrive (``compute``, ``wait``: a median
    over steps, so a rank stalled now and then does not set it, as it does not set the median step). Rank
    0's wait, not the ranks' skew: when rank 0 is the later one, its compute already holds the skew."""
    out: dict[str, list[float]] = {"extra": [], "compute": [], "wait": []}
    for m, G in pairs:
        buckets, k = workloads[m].buckets, len(workloads[m].buckets)
        for b0, b1 in zip(*(_blocks(r["runs"], m, 2, G) for r in ranks[:2])):
            split = split_calls([b0["calls"], b1["calls"]])
            out["extra"] += [c - float(fit.seconds(buckets[i % k])) for i, c in enumerate(split["after_both"])]
            waited = split["waited"]  # rank 0's: its compute is the one the step is built on
            out["wait"].append(median(sum(waited[i:i + k]) for i in range(0, len(waited), k)))
            out["compute"].append(sum(b0[ph] for ph in theory.PHASES))
    return out


def calibrate(sweep: dict, ranks: list[dict], calibration: dict[str, list[int]]) -> Calibration:
    """Fit the predictor: L and B on the sweep's ends (``fit_allreduce``); the compute phases on the
    calibration blocks at p = 1; the contention, the median over calibration pairs (G, 2G) of a
    rank's compute at p = 2 over the same per-rank batch's at p = 1; and from both ranks' stamps
    of each blocking all_reduce (``call_costs``), the median per-call cost and the wait against compute."""
    job = ranks[0]
    allreduce = fit_allreduce(sweep["sizes"], sweep["seconds"])
    workloads = {m: workload(m, f) for m, f in job["facts"].items()}
    pairs = tuple((m, G) for m, Gs in calibration.items() for G in Gs)
    one = [(m, G, _phase_medians(_blocks(job["runs"], m, 1, G))) for m, G in pairs]
    compute = theory.fit_compute([workloads[m] for m, _, _ in one], [G for _, G, _ in one], [ph for *_, ph in one])
    # the same per-rank batch alone (p = 1 at G) and beside another rank (p = 2 at 2G)
    alone = {(m, G): sum(ph[k] for k in theory.PHASES) for m, G, ph in one}
    two = {(m, G): sum(_phase_medians(_blocks(job["runs"], m, 2, G))[k] for k in theory.PHASES) for m, G in pairs}
    contention = median(t / alone[(m, G // 2)] for (m, G), t in two.items() if (m, G // 2) in alone)
    calls = call_costs(ranks, workloads, pairs, allreduce.fit)
    link = theory.Link(*theory.ring_from_fit(allreduce.fit, 2), per_call=max(0.0, median(calls["extra"])),
                       wait=theory.fit_line(calls["compute"], calls["wait"], relative=False))
    return Calibration(allreduce, link, compute, float(contention), workloads, pairs)


def held_out(ranks: list[dict], cal: Calibration, pairs: dict[str, list[int]]) -> list[dict]:
    """Per held-out (model, G) of plain DDP: measured S(2) (the median of per-round ratios) and T_2,
    against the predictor's and against the article's T = T_1(G) / 2 + M/B + L (with the measured
    T_1(G), the benefit of the doubt). Errors are relative to the measurement; so is ``scatter``, half
    the rounds' range: how far the measurement itself moved, round to round."""
    job, fit, out = ranks[0], cal.allreduce.fit, []
    for model, Gs in pairs.items():
        name, w = model + OVERLAP, cal.workloads[model]
        for G in Gs:
            if (model, G) in cal.pairs:
                raise ValueError(f"{model} at G = {G} was fitted on: it cannot also be held out")
            s = ratio_spread(paired_ratios([r for r in job["runs"] if r["model"] == name], {"p": 1, "G": G},
                                           {"p": 2, "G": G}))
            t1, t2 = (median(b["step"] for b in _blocks(job["runs"], name, p, G)) for p in (1, 2))
            pred = cal.predict(model, G, 2)
            article = theory.article_step(t1, w.grad_bytes, 2, fit.latency, fit.bandwidth)
            s_pred, s_article = cal.speedup(model, G), t1 / article
            out.append({"model": model, "G": G, "measured": s["median"], "spread": (s["min"], s["max"]),
                        "scatter": (s["max"] - s["min"]) / 2 / s["median"],
                        "predicted": s_pred, "article": s_article, "t1": t1, "t2": t2, "t2_predicted": pred.step,
                        "error": abs(s_pred - s["median"]) / s["median"],
                        "article_error": abs(s_article - s["median"]) / s["median"],
                        "t2_error": abs(pred.step - t2) / t2, "prediction": pred})
    return out


def lead_ratios(ranks: list[dict], ahead: tuple[str, int], behind: tuple[str, int]) -> list[float]:
    """Per round, the held-out S(2) of ``ahead`` (model, G) over that of ``behind``: two jobs measured
    in the same round, so a round in which the machine was busy slows both, and the comparison holds
    where a bound on one S(2) would not. In round order; ``analysis.margins`` compares them."""
    def by_round(model: str, G: int) -> dict[int, float]:
        rows = [r for r in ranks[0]["runs"] if r["model"] == model + OVERLAP and r["G"] == G]
        one = {r["round"]: r["step"] for r in rows if r["p"] == 1}
        return {r["round"]: one[r["round"]] / r["step"] for r in rows if r["p"] == 2 and r["round"] in one}
    a, b = by_round(*ahead), by_round(*behind)
    ratios = [a[r] / b[r] for r in sorted(a) if r in b]
    if not ratios:
        raise ValueError(f"no round has both {ahead} and {behind} at p = 1 and 2 among the held-out blocks")
    return ratios


def speedup_lead(ranks: list[dict], ahead: tuple[str, int], behind: tuple[str, int]) -> dict[str, float]:
    """``lead_ratios``' median, min and max over the rounds (``ratio_spread``)."""
    return ratio_spread(lead_ratios(ranks, ahead, behind))


def errors(rows: list[dict], key: str = "error") -> dict[str, float]:
    """Median and worst of one error column (or ``scatter``) over the held-out rows."""
    e = [r[key] for r in rows]
    return {"median": float(median(e)), "worst": float(max(e)), "n": len(e)}


def regime(step: theory.StepPrediction) -> str:
    """A predicted step's regime: compute-bound where computing is over 80% of it (compute more than 4
    times the exposed all_reduce and the wait), communication-bound where those two are more than half
    the compute, else between the two. Words for a measurement: which one a job is in depends on the
    machine (a faster link or a smaller per-call cost moves it)."""
    talk = step.exposed + step.wait
    if step.compute > 4 * talk:
        return "compute-bound"
    return "communication-bound" if talk > 0.5 * step.compute else "between the two regimes"


def crossovers(rows: list[dict], target: float = 1.5) -> dict[str, dict[str, int | None]]:
    """Per model: the global batch at which S(2) first reaches ``target``, predicted and measured, and how
    many steps of the model's grid of G apart the two are (never crossing: one step past the grid)."""
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        grid = sorted(r["G"] for r in mine)
        at = {k: theory.crossover({r["G"]: r[k] for r in mine}, target) for k in ("predicted", "measured")}
        place = [grid.index(G) if G is not None else len(grid) for G in at.values()]
        out[model] = {**at, "steps_apart": abs(place[0] - place[1])}
    return out


# --- Kept for chapter 5.1: its MNIST run predicted from the same fits ---------------------

def _kept(m) -> Path:
    """One file per machine (its description, CPU, torch and host): fits from elsewhere never apply."""
    key = hashlib.sha1(repr((m.describe(), m.cpu, m.torch, platform.node())).encode()).hexdigest()[:12]
    return DATA_DIR / "measured" / f"predictor-{key}.json"


def remember(job: list[dict], m) -> Path:
    """Keep ``regimes.predictor_job``'s result for machine ``m`` (``helpers.machine.this()``)."""
    path = _kept(m)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"measured_at": time.time(), "job": job}))
    tmp.replace(path)
    return path


def recall(m) -> tuple[list[dict], float] | tuple[None, None]:
    """What ``remember`` kept for this machine, and when (seconds since the epoch); (None, None) if nothing."""
    path = _kept(m)
    if not path.exists():
        return None, None
    kept = json.loads(path.read_text())
    return kept["job"], kept["measured_at"]

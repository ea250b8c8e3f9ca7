"""Chapter 4.3's predictor: the formulas on hand-worked cases, and the calibration recovering a made-up
machine's terms from rows shaped like ``regimes.strong_scaling``'s (no jobs)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import analysis, theory

# --- theory --------------------------------------------------------------------------------

def test_fit_line_recovers_a_line_and_refuses_what_cannot_define_one():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    line = theory.fit_line(x, 0.5 + 0.25 * x)
    assert (line.fixed, line.slope) == pytest.approx((0.5, 0.25))
    assert line(16) == pytest.approx(4.5)
    with pytest.raises(ValueError, match="distinct x"):
        theory.fit_line([2.0, 2.0], [1.0, 1.5])
    with pytest.raises(ValueError):
        theory.fit_line([1.0, 2.0], [1.0, 0.0])  # relative weights need y > 0
    # absolute fits clip to what a wait can be: never a negative intercept or slope
    assert theory.fit_line([1.0, 2.0], [0.0, 0.0], relative=False) == theory.Line(0.0, 0.0)
    clipped = theory.fit_line([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], relative=False)  # fixed -1: refit through 0
    assert clipped.fixed == 0.0 and clipped.slope == pytest.approx(8 / 14)


def test_bucket_exposed_hides_what_backward_outlasts():
    # two equal buckets, backward 10 ms: bucket 0 is ready at 5 ms, bucket 1 at 10 ms
    assert theory.bucket_exposed((100, 100), 0.010, [0.002, 0.002]) == pytest.approx(0.002)  # only the last
    # a long first call delays the second: 5 + 8 = 13 ms, then 2 more -> 5 ms past backward
    assert theory.bucket_exposed((100, 100), 0.010, [0.008, 0.002]) == pytest.approx(0.005)
    # one bucket: ready only when backward ends, nothing hides
    assert theory.bucket_exposed((300,), 0.010, [0.004]) == pytest.approx(0.004)


LINK = theory.Link(step_latency=0.5e-3, seconds_per_byte=1e-9, per_call=1e-3, wait=theory.Line(1e-3, 0.1))


def test_predict_step_adds_each_term_once():
    phases = {"data": 0.001, "forward": 0.004, "backward": 0.008, "optimizer": 0.001}
    one = theory.predict_step(phases, (10**6,), 1, LINK)
    assert one.step == pytest.approx(0.014) and one.comm == one.exposed == one.wait == 0
    two = theory.predict_step(phases, (10**6,), 2, LINK, contention=1.5)
    call = 2 * 0.5e-3 + 10**6 * 1e-9 + 1e-3  # ring at p = 2: 2 l + M beta, then per_call
    assert two.compute == pytest.approx(0.021)
    assert two.comm == pytest.approx(call) and two.exposed == pytest.approx(call)  # one bucket: nothing hides
    assert two.wait == pytest.approx(1e-3 + 0.1 * 0.021)
    assert two.step == pytest.approx(0.021 + call + 1e-3 + 0.1 * 0.021)
    blocking = theory.predict_step(phases, (5 * 10**5, 5 * 10**5), 2, LINK, overlap=False)
    hidden = theory.predict_step(phases, (5 * 10**5, 5 * 10**5), 2, LINK)
    assert blocking.exposed == pytest.approx(blocking.comm) and hidden.exposed < blocking.exposed
    with pytest.raises(ValueError, match="p must be a whole number >= 1"):
        theory.predict_step(phases, (1,), 0, LINK)


def test_article_step_and_crossover():
    assert theory.article_step(0.010, 10**6, 2, 1e-3, 1e9) == pytest.approx(0.005 + 1e-3 + 1e-3)
    assert theory.article_step(0.010, 10**6, 1, 1e-3, 1e9) == pytest.approx(0.010)
    # S first reaches 1.5 at 1024, whatever the order the batches come in and a dip after it
    assert theory.crossover({2048: 1.8, 256: 1.1, 1024: 1.6, 512: 1.4}, 1.5) == 1024
    assert theory.crossover({256: 1.1, 512: 1.4, 1024: 1.6, 2048: 1.45, 4096: 1.7}, 1.5) == 1024
    assert theory.crossover({256: 1.1, 512: 1.2}, 1.5) is None


def test_a_larger_batch_only_helps_the_speedup_when_compute_grows():
    compute = theory.ComputeModel(theory.Line(1e-4, 1e-6), theory.Line(1e-4, 1e-9), theory.Line(2e-4, 2e-9),
                                  theory.Line(1e-4, 1e-9))
    w = theory.Workload("m", 10**6, 10**4, (2 * 10**6, 2 * 10**6))
    s = [theory.predicted_speedup(w, G, 2, compute, LINK, contention=1.1) for G in (64, 512, 4096, 32768)]
    assert s == sorted(s) and s[0] < 1 < s[-1] < 2


# --- analysis: calibrate and held_out on a made-up machine --------------------------------

TRUE = dict(compute=theory.ComputeModel(theory.Line(2e-4, 1e-6), theory.Line(3e-4, 2e-9),
                                        theory.Line(4e-4, 4e-9), theory.Line(1e-4, 2e-10)),
            L=0.6e-3, B=1e9, per_call=1.5e-3, wait=theory.Line(1.0e-3, 0.1), contention=1.2)
WORKLOADS = {"small": theory.Workload("small", 200_000, 200_000, (800_000,)),
             "big": theory.Workload("big", 3_000_000, 3_000_000, (4_000_000, 8_000_000))}
CAL = {"small": [64, 128, 2048, 4096], "big": [256, 512]}
HELD = {"small": [256, 1024], "big": [1024, 4096]}


def _true_link():
    fit = theory.AlphaBetaFit(TRUE["L"], TRUE["B"], 0, 0)
    return theory.Link(*theory.ring_from_fit(fit, 2), per_call=TRUE["per_call"], wait=TRUE["wait"])


def _block(model, p, G, rnd, overlap):
    w, c = WORKLOADS[model], TRUE["contention"] if p == 2 else 1.0
    ph = {k: v * c for k, v in TRUE["compute"].phases(w, G / p).items()}
    step = theory.predict_step(TRUE["compute"].phases(w, G / p), w.buckets, p, _true_link(), TRUE["contention"]).step
    return {"round": rnd, "model": model + (" overlap" if overlap else ""), "p": p, "G": G, **ph,
            "comm": 0.0, "step": step * (1 + 0.01 * rnd)}  # a drifting machine: same drift at p = 1 and 2


def _calls(model, G, rank):
    """Two steps of blocking calls: rank 1 arrives late by the true wait, split over the buckets."""
    w, link = WORKLOADS[model], _true_link()
    compute = sum(TRUE["compute"].phases(w, G / 2).values()) * TRUE["contention"]
    skew, out, t = float(TRUE["wait"](compute)) / len(w.buckets), [], 0.0
    for _ in range(2):
        for nbytes in w.buckets:
            start = t + (skew if rank == 1 else 0.0)
            out.append((start, t + skew + float(theory.AlphaBetaFit(TRUE["L"], TRUE["B"], 0, 0).seconds(nbytes))
                        + link.per_call))
            t = out[-1][1] + 0.01
    return out


def _ranks():
    runs = {0: [], 1: []}
    for rnd in range(3):
        for model, Gs in CAL.items():
            for G in Gs:
                runs[0].append(_block(model, 1, G, rnd, False))
                for rank in (0, 1):
                    runs[rank].append({**_block(model, 2, G, rnd, False), "calls": _calls(model, G, rank)})
        for model, Gs in HELD.items():
            for G in Gs:
                runs[0] += [_block(model, p, G, rnd, True) for p in (1, 2)]
    facts = {m: {"n_params": w.n_params, "macs": w.macs, "bucket_bytes": list(w.buckets)}
             for m, w in WORKLOADS.items()}
    return [{"rank": 0, "runs": runs[0], "facts": facts}, {"rank": 1, "runs": runs[1], "facts": None}]


def _sweep():
    sizes = [4096 * 4**k for k in range(8)]
    return {"sizes": sizes, "seconds": [TRUE["L"] + m / TRUE["B"] for m in sizes]}


def test_calibrate_recovers_the_machine_it_was_made_from():
    cal = analysis.calibrate(_sweep(), _ranks(), CAL)
    assert cal.allreduce.fit.latency == pytest.approx(TRUE["L"], rel=1e-6)
    assert cal.contention == pytest.approx(TRUE["contention"])
    assert cal.link.per_call == pytest.approx(TRUE["per_call"], rel=1e-6)
    assert (cal.link.wait.fixed, cal.link.wait.slope) == pytest.approx((1.0e-3, 0.1), rel=1e-3)
    for phase in ("forward", "backward"):
        fitted, true = getattr(cal.compute, phase), getattr(TRUE["compute"], phase)
        assert (fitted.fixed, fitted.slope) == pytest.approx((true.fixed, true.slope), rel=1e-6)


def test_held_out_scores_the_predictor_and_the_article_on_unseen_pairs():
    ranks = _ranks()
    cal = analysis.calibrate(_sweep(), ranks, CAL)
    rows = analysis.held_out(ranks, cal, HELD)
    assert [(r["model"], r["G"]) for r in rows] == [(m, G) for m, Gs in HELD.items() for G in Gs]
    assert analysis.errors(rows)["worst"] < 1e-6  # the model is the machine: no error
    assert analysis.errors(rows, "article_error")["median"] > 0.05  # the article leaves four terms out
    assert all(r["scatter"] == pytest.approx(0, abs=1e-12) for r in rows)  # the drift is the same at p = 1 and 2: every round agrees
    crossing = analysis.crossovers(rows, target=0.0)  # every S >= 0: the smallest G of each grid
    assert crossing == {m: {"predicted": Gs[0], "measured": Gs[0], "steps_apart": 0} for m, Gs in HELD.items()}
    never = analysis.crossovers(rows, target=10.0)["big"]  # S never reaches 10: one step past the grid
    assert never == {"predicted": None, "measured": None, "steps_apart": 0}
    apart = analysis.crossovers([{**r, "predicted": 2.0 if r["G"] == 4096 else 0.0} for r in rows], 1.0)
    assert apart["big"] == {"predicted": 4096, "measured": 1024, "steps_apart": 1}
    with pytest.raises(ValueError, match="fitted on"):
        analysis.held_out(ranks, cal, {"small": [2048]})


def test_scatter_is_half_the_rounds_range_of_S2_relative_to_its_median():
    ranks = _ranks()
    cal = analysis.calibrate(_sweep(), ranks, CAL)
    for b in ranks[0]["runs"]:  # round 2's two-rank held-out steps 10% slower: its S(2) is 1 / 1.1 of the others'
        if b["round"] == 2 and b["p"] == 2 and b["model"].endswith(" overlap"):
            b["step"] *= 1.1
    rows = analysis.held_out(ranks, cal, HELD)
    # the rounds' S(2) are S, S and S / 1.1: the median is S (not the mean), the range S / 1.1 to S
    for r in rows:
        s = r["predicted"]  # the made-up machine is the model: every calm round's S(2)
        assert r["measured"] == pytest.approx(s) and r["spread"] == pytest.approx((s / 1.1, s)), r
    assert all(r["scatter"] == pytest.approx((1 - 1 / 1.1) / 2) for r in rows)
    assert analysis.errors(rows, "scatter")["worst"] == pytest.approx((1 - 1 / 1.1) / 2)


def test_speedup_lead_compares_two_jobs_round_by_round():
    ranks = _ranks()
    for b in ranks[0]["runs"]:  # round 1 busy for the big job's two ranks only: its S(2) that round is 1 / 1.5
        if b["round"] == 1 and b["p"] == 2 and b["model"] == "big overlap" and b["G"] == 4096:
            b["step"] *= 1.5
    cal = analysis.calibrate(_sweep(), ranks, CAL)
    big, small = (cal.speedup(m, G) for m, G in (("big", 4096), ("small", 256)))  # every calm round's S(2)
    lead = analysis.speedup_lead(ranks, ("big", 4096), ("small", 256))
    assert lead["n"] == 3 and lead["median"] == pytest.approx(big / small)  # the median round, not the mean
    assert (lead["min"], lead["max"]) == pytest.approx((big / small / 1.5, big / small))
    ranks[0]["runs"] = [b for b in ranks[0]["runs"]  # round 0's small job lost its p = 2 block: that round is skipped
                        if not (b["round"] == 0 and b["model"] == "small overlap" and b["G"] == 256 and b["p"] == 2)]
    assert analysis.speedup_lead(ranks, ("big", 4096), ("small", 256))["n"] == 2
    with pytest.raises(ValueError, match="no round"):
        analysis.speedup_lead(ranks, ("small", 256), ("small", 123))


def test_regime_names_a_step_by_its_shares_not_by_the_machine():
    def step(compute, exposed, wait):
        return theory.StepPrediction(2, {}, compute, exposed, exposed, wait)
    assert analysis.regime(step(10.0, 1.0, 1.0)) == "compute-bound"  # compute over 4x the rest
    assert analysis.regime(step(8.0, 1.0, 1.0)) == "between the two regimes"  # exactly 4x: not over it
    assert analysis.regime(step(2.0, 0.8, 0.4)) == "communication-bound"  # the rest over half the compute
    assert analysis.regime(step(2.0, 0.5, 0.5)) == "between the two regimes"

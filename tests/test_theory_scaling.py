"""Chapter 4: the speedup and communication formulas, their fits, and the recipes that feed them."""
import math

import numpy as np
import pytest

import helpers
from helpers import analysis, data, theory, training
from helpers.recipes import collectives, scaling


# --- Speedup (4.1) ----------------------------------------------------------------------

def test_amdahl_and_gustafson_values():
    assert theory.amdahl(1, 0.3) == pytest.approx(1.0)
    assert theory.amdahl(4, 0.25) == pytest.approx(1 / (0.25 + 0.75 / 4))
    assert theory.amdahl(1e12, 0.1) == pytest.approx(10.0)  # the ceiling 1/alpha
    assert theory.gustafson(16, 0.1) == pytest.approx(14.5)
    assert theory.gustafson(1, 0.7) == pytest.approx(1.0)


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.3, 0.9])
@pytest.mark.parametrize("p", [2, 3, 8, 64])
def test_gustafson_with_the_parallel_runs_alpha_is_amdahl(alpha, p):
    assert theory.gustafson(p, theory.gustafson_alpha(p, alpha)) == pytest.approx(theory.amdahl(p, alpha))
    assert theory.alpha_from_speedup(p, theory.amdahl(p, alpha)) == pytest.approx(alpha, abs=1e-12)


def test_fit_amdahl_recovers_alpha_exactly_and_with_noise():
    p = np.array([1, 2, 4, 8, 2, 4, 8])
    exact = theory.fit_amdahl(p, theory.amdahl(p, 0.2))
    assert exact.alpha == pytest.approx(0.2) and exact.stderr == pytest.approx(0.0, abs=1e-12)
    assert exact.n == 6 and exact.ceiling == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    p = np.repeat([2, 4], 50)
    noisy = theory.fit_amdahl(p, theory.amdahl(p, 0.2) * (1 + 0.02 * rng.standard_normal(p.size)))
    assert abs(noisy.alpha - 0.2) < 4 * noisy.stderr and 0 < noisy.stderr < 0.01
    lo, hi = noisy.speedup(4, -2), noisy.speedup(4, 2)  # alpha + 2 se, alpha - 2 se
    assert lo < noisy.speedup(4) < hi


def test_fit_amdahl_needs_a_point_past_one_and_two_for_an_error():
    with pytest.raises(ValueError):
        theory.fit_amdahl([1, 1], [1.0, 1.0])
    one = theory.fit_amdahl([1, 2], [1.0, 1.6])
    assert one.alpha == pytest.approx(0.25) and math.isnan(one.stderr)


def test_fit_step_model_recovers_serial_and_per_sample_times():
    truth = theory.StepModel({1: 0.7e-3, 2: 1.4e-3}, 16e-6)
    p = [1, 1, 2, 2, 1, 2]
    b = [128, 256, 64, 128, 512, 256]
    fit = theory.fit_step_model(p, b, [truth.seconds(pp, bb) for pp, bb in zip(p, b)])
    assert fit.serial[1] == pytest.approx(0.7e-3) and fit.serial[2] == pytest.approx(1.4e-3)
    assert fit.per_sample == pytest.approx(16e-6)
    s = fit.speedup(2, 512)
    assert s == pytest.approx((0.7e-3 + 512 * 16e-6) / (1.4e-3 + 256 * 16e-6))
    assert fit.alpha(2, 512) == pytest.approx(float(theory.alpha_from_speedup(2, s)))
    assert fit.alpha(2, 128) > fit.alpha(2, 512)  # bigger batch, smaller serial share


def test_a_measured_contention_scales_the_per_sample_time_of_its_p():
    # two ranks side by side each 1.5 times as slow as one alone (another process on the cores)
    truth = theory.StepModel({1: 0.7e-3, 2: 1.4e-3}, 16e-6, {2: 1.5})
    p, b = [1, 1, 2, 2, 1, 2], [128, 256, 64, 128, 512, 256]
    t = [truth.seconds(pp, bb) for pp, bb in zip(p, b)]
    assert truth.seconds(2, 100) == pytest.approx(1.4e-3 + 1.5 * 16e-6 * 100)
    fit = theory.fit_step_model(p, b, t, {2: 1.5})
    assert fit.per_sample == pytest.approx(16e-6) and fit.serial[2] == pytest.approx(1.4e-3)
    assert fit.speedup(2, 512) == pytest.approx(truth.speedup(2, 512))
    # without it, one per-sample time for both p cannot fit both lines: the prediction misses
    blind = theory.fit_step_model(p, b, t)
    assert abs(blind.speedup(2, 1024) - truth.speedup(2, 1024)) > 0.05
    for bad in ({2: 0.0}, {2: -1.0}, {2: float("nan")}):
        with pytest.raises(ValueError, match="contention"):
            theory.fit_step_model(p, b, t, bad)


def test_scaling_runs_pair_each_rounds_shrink_with_its_contention():
    from helpers.analysis import ScalingRuns
    rows = []
    for rnd, busy in enumerate((1.0, 1.5, 2.0)):  # the machine busier each round, on p = 2 only
        for p, G in ((1, 320), (1, 960), (2, 640), (2, 960)):
            per_rank = G // p
            k = busy if p == 2 else 1.0
            rows.append({"round": rnd, "p": p, "G": G, "per_rank_batch": per_rank,
                         "data": 0.0, "forward": k * 1e-5 * per_rank, "backward": k * 2e-5 * per_rank})
    runs = ScalingRuns(rows)
    got = runs.shrink(960, 320)
    assert got["contention"] == pytest.approx(1.5) and got["work"] == pytest.approx(0.5)
    assert got["shrink"] == pytest.approx(0.75) and (got["contention_lo"], got["contention_hi"]) == (1.0, 2.0)
    assert runs.contention(2, 320) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="no round"):
        runs.shrink(1280, 320)


# --- Communication (4.2) ----------------------------------------------------------------

SIZES = np.array([4096 * 2**k for k in range(15)], float)


def test_fit_alpha_beta_recovers_latency_and_bandwidth():
    t = 300e-6 + SIZES / 1.2e9
    fit = theory.fit_alpha_beta(SIZES, t)
    assert fit.latency == pytest.approx(300e-6) and fit.bandwidth == pytest.approx(1.2e9)
    assert fit.half_size == pytest.approx(300e-6 * 1.2e9)
    assert fit.r2(SIZES, t) == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    noisy = theory.fit_alpha_beta(SIZES, t * (1 + 0.05 * rng.standard_normal(SIZES.size)))
    assert noisy.latency == pytest.approx(300e-6, rel=0.1) and noisy.bandwidth == pytest.approx(1.2e9, rel=0.1)
    assert 0 < noisy.latency_err < 50e-6 and 0 < noisy.bandwidth_err < 0.1e9


def test_r_squared():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert theory.r_squared(y, y) == 1.0
    assert theory.r_squared(y, np.full(4, y.mean())) == 0.0


def test_bus_bandwidth_as_nccl_tests_defines_it():
    assert theory.algbw(1e9, 0.01) == pytest.approx(1e11)
    assert theory.busbw(1e9, 0.01, 2) == pytest.approx(1e11)  # factor 2 (p-1)/p = 1
    assert theory.busbw(1e9, 0.01, 8) == pytest.approx(1.75e11)
    assert theory.busbw(1e9, 0.01, 8, "all_gather") == pytest.approx(0.875e11)


def test_ring_model_and_its_parameters_from_a_fit():
    assert theory.ring_allreduce_time(1e6, 2, 1e-5, 1e-9) == pytest.approx(2e-5 + 1e-3)
    assert theory.ring_allreduce_time(1e8, 4, 10e-6, 1e-10) == pytest.approx(15.06e-3)
    fit = theory.AlphaBetaFit(300e-6, 1.2e9, 0, 0)
    for p in (2, 4, 8):
        a, b = theory.ring_from_fit(fit, p)
        assert theory.ring_allreduce_time(SIZES, p, a, b) == pytest.approx(fit.seconds(SIZES))


def test_ddp_step_time_with_and_without_overlap():
    assert theory.ddp_step_time(10e-3, 4e-3) == pytest.approx(14e-3)
    assert theory.ddp_step_time(10e-3, 4e-3, overlappable=6e-3) == pytest.approx(10e-3)
    assert theory.ddp_step_time(10e-3, 4e-3, overlappable=3e-3) == pytest.approx(11e-3)


def test_diagnose_tells_compute_from_communication():
    args = dict(n_params=203_530, t_per_sample=12e-6, p=2, step_latency=150e-6, seconds_per_byte=1 / 1.2e9, t_fixed=0.3e-3)
    small, big = theory.diagnose(per_rank_batch=8, **args), theory.diagnose(per_rank_batch=1024, **args)
    assert small.bound == "communication" and big.bound == "compute"
    assert small.speedup < 1 < big.speedup < 2
    assert small.step == pytest.approx(small.t_compute + small.t_comm)
    assert any("batch" in a for a in small.advice) and any("accumulation" in a for a in small.advice)
    assert big.advice and "compute-bound" in big.advice[0]
    hidden = theory.diagnose(per_rank_batch=8, overlappable=1.0, **args)
    assert hidden.step == pytest.approx(hidden.t_compute) and hidden.speedup == pytest.approx(2.0)
    latency = theory.diagnose(per_rank_batch=8, **{**args, "n_params": 100, "step_latency": 1e-3})
    assert "latency-bound" in latency.advice[0]


# --- The recipes -------------------------------------------------------------------------

def test_repeats_scale_with_the_message_and_spread_over_the_rounds():
    assert collectives.repeats_for(4096) == 100 and collectives.repeats_for(64 * 2**20) == 16 and collectives.repeats_for(2**30) == 7
    assert collectives.spread_rounds(100, 100) == set(range(100))
    few = sorted(collectives.spread_rounds(7, 60))
    assert len(few) == 7 and few[0] == 0 and few[-1] >= 50  # the big sizes are timed early and late


def test_medians_over_steps():
    rows = [dict.fromkeys(training.PHASES, v) for v in (1.0, 2.0, 30.0)]
    m = scaling.medians(rows)
    assert m["data"] == 2.0 and m["step"] == pytest.approx(2.0 * len(training.PHASES))


def test_allreduce_sweep_in_two_processes():
    r0, r1 = helpers.launch(collectives.allreduce_sweep, nprocs=2, threads=1, show=None,
                            sizes=[4096, 2**20], min_repeats=3, max_repeats=5, copy_bytes=2**20)
    assert r0["sizes"] == [4096, 2**20] and r0["repeats"] == [5, 5]
    assert all(s > 0 for s in r0["seconds"]) and r0["seconds"] == r1["seconds"]  # the max over ranks
    assert [len(t) for t in r0["times"]] == [5, 5] and r0["seconds"][1] == pytest.approx(np.median(r0["times"][1]))
    assert r0["copy_bw"] > 0 and math.isnan(r1["copy_bw"])


def _sweep(sizes, times):
    return {"sizes": sizes, "times": times, "seconds": [float(np.median(t)) for t in times],
            "repeats": [len(t) for t in times]}


def test_a_bent_sweep_is_pooled_with_more_until_its_line_clears_and_no_further():
    """4.2's top-up: a slow spell that doubled the 64 MB size's time in one sweep bends the line; pooled
    with quiet sweeps, the medians return to the line, and a sweep that already clears is not topped up."""
    sizes = [4096 * 2**k for k in range(15)]
    line = [20e-6 + s / 3e9 for s in sizes]
    quiet = _sweep(sizes, [[t * f for f in (0.99, 1.0, 1.01)] for t in line])
    bent = _sweep(sizes, [[t * f for f in (0.99, 1.0, 1.01)] for t in line[:-1]] + [[2.0 * line[-1]] * 3])
    calls = []
    more = lambda: calls.append(1) or quiet  # noqa: E731
    assert analysis.fit_allreduce(sizes, bent["seconds"]).r2 < 0.98
    fit, sweep = analysis.fit_until_clear(bent, more, least_r2=0.98, cap=3)
    assert fit.r2 >= 0.98 and sweep["sweeps"] == 3 == len(calls) + 1  # 3 quiet against 3 bent: the tie is broken
    assert sweep["repeats"] == [9] * 15 and sweep["seconds"][0] == pytest.approx(line[0])
    fit, sweep = analysis.fit_until_clear(quiet, more, least_r2=0.98, cap=3)
    assert sweep["sweeps"] == 1 and len(calls) == 2 and fit.r2 > 0.999
    _, sweep = analysis.fit_until_clear(bent, lambda: bent, least_r2=0.98, cap=2)  # the cap holds
    assert sweep["sweeps"] == 2
    with pytest.raises(ValueError, match="same sizes"):
        analysis.pooled(quiet, _sweep(sizes[:3], quiet["times"][:3]))


def test_scaling_sweep_times_every_p_in_one_job():
    train = data.load(train=True)
    r0 = helpers.launch(scaling.scaling_sweep, nprocs=2, threads=1, show=None, ps=[1, 2],
                        global_sizes=[64], rounds=2, steps=2, warmup=1, dataset=train)[0]
    assert r0["threads"] == 1 and r0["facts"]["grad_bytes"] == 814_120 and r0["facts"]["buckets"] == 1
    assert sorted((r["round"], r["p"]) for r in r0["runs"]) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for r in r0["runs"]:
        assert r["per_rank_batch"] == 64 // r["p"]
        assert all(r[ph] >= 0 for ph in training.PHASES) and r["step"] > 0
        assert r["comm"] > 0  # the timed hook ran


def test_timed_training_with_and_without_overlap():
    train = data.load(train=True)
    timed, real = helpers.launch(scaling.timed_training, nprocs=2, threads=1, show=None, steps=3, warmup=1,
                                 dataset=train, configs=[{"per_rank_batch": 16, "overlap": False},
                                                         {"per_rank_batch": 16, "overlap": True}])[0]["runs"]
    assert timed["comm"] > 0 and real["comm"] == 0  # with overlap, DDP's own async all_reduce runs
    assert timed["n_params"] == 203_530 and real["buckets"] == 1


@pytest.mark.parametrize("call, message", [
    (lambda: theory.fit_step_model([1, 1, 2, 2], [64, 64, 32, 32], [1.0, 1.1, 0.6, 0.7]), "two or more different"),
    (lambda: theory.fit_alpha_beta([4096, 2**20], [1e-4, 1e-3]), "three or more distinct sizes"),
    (lambda: theory.fit_alpha_beta([1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0]), "bandwidth <= 0"),
    (lambda: theory.fit_alpha_beta([1, 2, 3], [1.0, float("nan"), 2.0]), "positive, finite"),
    (lambda: theory.fit_amdahl([2, 4, 8], [1.5]), "one speedup per p"),
    (lambda: theory.fit_amdahl([2, 4], [1.5, float("nan")]), "finite numbers"),
    (lambda: theory.r_squared([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]), "not all equal"),
    (lambda: theory.diagnose(1000, 8, 0.0, 2, 1e-5, 1e-9), "positive time per sample"),
])
def test_fits_refuse_degenerate_input_with_what_they_need(call, message):
    with pytest.raises(ValueError, match=message):
        call()

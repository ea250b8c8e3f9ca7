"""The reductions behind bench/regimes.py (issue 11): pure functions on made-up rows, no jobs."""
from __future__ import annotations

import pytest

from helpers.analysis import contention_slowdown, paired_ratios, ratio_spread, split_calls


def test_paired_ratios_pair_by_round_not_by_order():
    # p = 2 rows listed in another order than p = 1's, and round 2 has no p = 2 block
    rows = [{"round": 0, "p": 1, "G": 64, "step": 4.0}, {"round": 1, "p": 1, "G": 64, "step": 6.0},
            {"round": 2, "p": 1, "G": 64, "step": 9.0},
            {"round": 1, "p": 2, "G": 64, "step": 2.0}, {"round": 0, "p": 2, "G": 64, "step": 4.0},
            {"round": 0, "p": 2, "G": 128, "step": 1.0}]  # another G: must not be picked
    assert paired_ratios(rows, {"p": 1, "G": 64}, {"p": 2, "G": 64}) == [1.0, 3.0]
    # weak scaling pairs different G: T_1(64) / T_2(128) in round 0
    assert paired_ratios(rows, {"p": 1, "G": 64}, {"p": 2, "G": 128}) == [4.0]


def test_ratio_spread_uses_the_middle_two_for_an_even_count():
    assert ratio_spread([1.0, 4.0, 2.0, 3.0]) == {"median": 2.5, "min": 1.0, "max": 4.0, "n": 4}


def test_split_calls_separates_waiting_for_the_peer_from_the_call():
    # call 0: rank 1 arrives 3 ms late, both finish 0.5 ms after it arrived
    # call 1: both arrive together, 1 ms
    rank0 = [(0.000, 0.0035), (0.010, 0.011)]
    rank1 = [(0.003, 0.0035), (0.010, 0.011)]
    out = split_calls([rank0, rank1])
    assert out["skew"] == pytest.approx([0.003, 0.0])
    assert out["after_both"] == pytest.approx([0.0005, 0.001])
    assert out["waited"] == pytest.approx([0.003, 0.0])  # rank 0 waited for rank 1
    assert split_calls([rank1, rank0])["waited"] == pytest.approx([0.0, 0.0])  # rank 1 never waited
    assert out["seconds"] == pytest.approx([0.0035, 0.0005, 0.001, 0.001])  # call by call, every rank


def test_contention_slowdown_ratios_per_rank_and_round():
    rows = []
    for rank, alone, together in [(0, 1.0, 1.5), (1, 2.0, 2.2)]:
        rows += [{"rank": rank, "round": 0, "model": "m", "per_rank_batch": 8, "mode": "alone", "step": alone},
                 {"rank": rank, "round": 0, "model": "m", "per_rank_batch": 8, "mode": "together",
                  "step": together}]
    v = contention_slowdown(rows)[("m", 8)]
    assert v["min"] == pytest.approx(1.1) and v["max"] == pytest.approx(1.5)
    assert v["median"] == pytest.approx(1.3)  # not together/alone of the medians (1.85 / 1.5)
    assert v["alone"] == pytest.approx(1.5) and v["together"] == pytest.approx(1.85)


def test_the_regime_recipes_refuse_any_backend_but_gloo():
    """4.3's ranks are CPU ranks on every machine: an NCCL job (the default on 2+ GPUs) would hand
    CPU tensors to NCCL groups and fit a GPU's compute, so it stops before anything runs."""
    from types import SimpleNamespace

    from helpers.recipes import regimes
    regimes.on_gloo(SimpleNamespace(backend="gloo"), "predictor_job")
    with pytest.raises(RuntimeError, match="backend='gloo'"):
        regimes.on_gloo(SimpleNamespace(backend="nccl"), "predictor_job")
    import inspect
    for recipe in (regimes.predictor_job, regimes.strong_scaling, regimes.allreduce_after_compute,
                   regimes.contention):  # every recipe that sets up a group goes through the check
        src = inspect.getsource(recipe)
        assert f'gloo_job("{recipe.__name__}")' in src and "distributed()" not in src, recipe.__name__

"""Pipeline schedules from torch.distributed.pipelining (chapter 6.1): the formulas, the layouts,
the saved-bytes counter, the reductions, two real runs checked against the unsplit model, and
the same recipe under the torchrun CLI."""

import pytest
import torch
import torch.nn as nn

import helpers
from helpers import analysis, theory
from helpers.recipes import pipelining as pl
from torchrun_cli import torchrun_json


# --- Theory ------------------------------------------------------------------------------

def test_interleaved_bubble_is_gpipes_at_one_virtual_stage_and_shrinks_with_v():
    for p, m in ((2, 4), (4, 8), (8, 3)):
        assert theory.interleaved_bubble_fraction(p, m, 1) == pytest.approx(theory.bubble_fraction(p, m))
    assert theory.interleaved_bubble_fraction(4, 8, 2) == pytest.approx(3 / 19)
    assert theory.interleaved_bubble_fraction(2, 2, 2) == pytest.approx(1 / 5)
    assert theory.interleaved_bubble_fraction(4, 8, 4) < theory.interleaved_bubble_fraction(4, 8, 2)
    assert theory.interleaved_bubble_fraction(1, 8, 2) == 0.0  # one stage: nothing to wait for


def _gpipe(p, m):
    return [[("F", (r, i)) for i in range(m)] + [("B", (r, i)) for i in range(m)] for r in range(p)]


def _one_f_one_b(p, m):
    orders = []
    for r in range(p):
        warm = min(m, p - r)
        order = [("F", (r, i)) for i in range(warm)]
        for i in range(m):
            order.append(("B", (r, i)))
            if warm + i < m:
                order.append(("F", (r, warm + i)))
        orders.append(order)
    return orders


@pytest.mark.parametrize("p, m", [(2, 2), (2, 8), (4, 4), (4, 8), (3, 5)])
def test_replaying_gpipe_and_1f1b_in_slots_gives_the_bubble_formula(p, m):
    for orders in (_gpipe(p, m), _one_f_one_b(p, m)):
        for chunks in ([1] * p, [2] * p):  # the unit of a slot cancels out
            assert theory.replay_idle(orders, chunks) == pytest.approx([theory.bubble_fraction(p, m)] * p)


def test_replay_weighs_unequal_stages_and_refuses_a_deadlock():
    # A stage twice as heavy: the light one waits for it, the heavy one is idle only while filling
    idle = theory.replay_idle(_gpipe(2, 4), [1, 2])
    assert idle[0] > theory.bubble_fraction(2, 4) > idle[1]
    with pytest.raises(ValueError, match="deadlock"):  # rank 0 waits for a backward that waits for it
        theory.replay_idle([[("B", (0, 0)), ("F", (0, 0))], [("F", (1, 0)), ("B", (1, 0))]], [1, 1])


def test_replay_with_measured_lengths_starts_each_action_as_early_as_its_inputs_allow():
    # GPipe, p = 2, m = 1: rank 0's F takes 1 s and its B 2 s; rank 1's F 3 s and its B 1 s.
    # F(0) 0-1, F(1) 1-4, B(1) 4-5, B(0) 5-7: rank 0 busy 3 of 7, rank 1 4 of 7.
    idle = theory.replay_idle(_gpipe(2, 1), [1, 1], [[1.0, 2.0], [3.0, 1.0]])
    assert idle == pytest.approx([4 / 7, 3 / 7])
    with pytest.raises(ValueError, match="one length"):
        theory.replay_idle(_gpipe(2, 1), [1, 1], [[1.0], [3.0, 1.0]])


def test_peak_in_flight():
    assert [theory.peak_in_flight("1F1B", 4, 8, s) for s in range(4)] == [4, 3, 2, 1]
    assert [theory.peak_in_flight("GPipe", 4, 8, s) for s in range(4)] == [8] * 4
    assert theory.peak_in_flight("1F1B", 4, 2, 0) == 2  # never more than there are
    with pytest.raises(ValueError):
        theory.peak_in_flight("ZBV", 4, 8, 0)


# --- The layouts ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["joined", "loop", "v"])
@pytest.mark.parametrize("p", [2, 4])
def test_every_chunk_is_on_exactly_one_rank(layout, p):
    held = [c for r in range(p) for stage in pl.stage_chunks(layout, r, p) for c in stage]
    assert sorted(held) == list(range(pl.CHUNKS * p))
    indices = [i for r in range(p) for i in pl.stage_indices(layout, r, p)]
    assert sorted(indices) == list(range(p if layout == "joined" else pl.CHUNKS * p))


def test_the_layouts_by_hand():
    assert pl.stage_chunks("loop", 1, 4) == [[1], [5]]
    assert pl.stage_chunks("v", 0, 4) == [[0], [7]] and pl.stage_chunks("v", 3, 4) == [[3], [4]]
    assert pl.stage_chunks("joined", 1, 2) == [[2, 3]]
    with pytest.raises(ValueError):
        pl.stage_chunks("zigzag", 0, 2)


# --- Live saved bytes --------------------------------------------------------------------

def test_saved_bytes_rise_with_the_forward_and_fall_with_the_backward():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    saved = pl.SavedBytes(model.parameters())
    with saved.hooks():
        losses = [model(torch.randn(5, 8)).sum() for _ in range(3)]
    one = 5 * 8 * 4 + 5 * 16 * 4  # the input, and the ReLU's output (also the next Linear's input)
    assert saved.live == saved.peak == 3 * one
    losses[0].backward()
    assert saved.live == 2 * one and saved.peak == 3 * one
    for loss in losses[1:]:
        loss.backward()  # the backward frees what the graph saved
    assert saved.live == 0
    x, again = torch.randn(5, 8), pl.SavedBytes(model.parameters())
    with again.hooks():
        twice = [model(x).sum() for _ in range(2)]  # one input tensor, saved by both graphs: once
    assert again.peak == 5 * 8 * 4 + 2 * 5 * 16 * 4 and len(twice) == 2


# --- Reductions ------------------------------------------------------------------------------

def _rank(steps, **extra):
    stage = steps[0][0][1][0]
    return {"runs": {("GPipe", 2): {"steps": steps, "in_flight": 2, "peak_saved": 20,
                                    "micro_batch_saved": 10, "chunks": {stage: 1}, **extra}}}


def test_step_idle_is_the_median_over_steps_of_the_common_window():
    # step 0: window 0..10, rank 0 busy 5 (idle 0.5), rank 1 busy 10; step 1: the same; step 2: slow
    a = [[("F", (0, 0), 0, 5)], [("F", (0, 0), 0, 5)], [("F", (0, 0), 0, 1)]]
    b = [[("F", (1, 0), 0, 10)], [("F", (1, 0), 0, 10)], [("F", (1, 0), 0, 100)]]
    ranks = [_rank(a), _rank(b)]
    assert analysis.step_idle(ranks, ("GPipe", 2)) == pytest.approx([0.5, 0.0])
    s = analysis.summarize_pipelines(ranks)[("GPipe", 2)]
    assert s["busiest_idle"] == 0.0 and s["mean_idle"] == pytest.approx(0.25)
    assert s["step_s"] == 10 and s["saved_in_micro_batches"] == [2.0, 2.0]
    assert s["slot_idle"] == pytest.approx(0.5)  # one forward each, the second after the first


def test_a_run_is_never_less_idle_than_its_own_order_replayed_with_its_own_lengths():
    # The same step as above, but each message took 0.5 s: window 0-8, rank 0 busy 3, rank 1 busy 4
    a = [[("F", (0, 0), 0.0, 1.0), ("B", (0, 0), 6.0, 8.0)]]
    b = [[("F", (1, 0), 1.5, 4.5), ("B", (1, 0), 4.5, 5.5)]]
    step = analysis.timed_replay([_rank(a), _rank(b)], ("GPipe", 2))
    assert step == [[pytest.approx((5 / 8, 4 / 7)), pytest.approx((4 / 8, 3 / 7))]]
    # Clocks the ranks do not share: rank 1's forward seems to start before rank 0's has ended.
    # The measurement then looks less idle than the order allows, and the check sees it.
    b = [[("F", (1, 0), 0.0, 3.0), ("B", (1, 0), 3.0, 4.0)]]
    a = [[("F", (0, 0), 0.0, 1.0), ("B", (0, 0), 4.0, 6.0)]]
    r0, _ = analysis.timed_replay([_rank(a), _rank(b)], ("GPipe", 2))[0]
    assert r0[0] < r0[1]


def test_grad_diffs_need_each_parameter_from_exactly_one_rank():
    one, two = torch.ones(2), torch.full((2,), 2.0)
    ok = [{"unsplit": {"a": one, "b": two}, "runs": {"s": {"a": one}}}, {"runs": {"s": {"b": two + 0.5}}}]
    assert analysis.schedule_grad_diffs(ok)["s"] == 0.5
    with pytest.raises(AssertionError, match="same parameter"):
        analysis.schedule_grad_diffs([ok[0], {"runs": {"s": {"a": one, "b": two}}}])
    with pytest.raises(AssertionError, match="missing"):
        analysis.schedule_grad_diffs([ok[0], {"runs": {"s": {}}}])


# --- Real runs, two processes over gloo -----------------------------------------------------

def test_every_schedule_gives_the_unsplit_models_gradients():
    ranks = helpers.launch(pl.compare_gradients, nprocs=2, batch_size=16, width=16, show=None)
    diffs = analysis.schedule_grad_diffs(ranks)
    assert set(diffs) == {"hand-written GPipe", *pl.SCHEDULES}
    assert all(d < 1e-6 for d in diffs.values()), diffs


def test_timelines_count_what_each_schedule_holds():
    ranks = helpers.launch(pl.schedule_timelines, nprocs=2, micro_batches=[2, 4], steps=1,
                           batch_size=32, width=16, show=None)
    runs = ranks[0]["runs"]
    assert set(runs) == {(n, m) for n in pl.SCHEDULES for m in (2, 4)}
    for r in ranks:
        assert r["runs"][("GPipe", 4)]["in_flight"] == 4
        assert r["runs"][("1F1B", 4)]["in_flight"] == theory.peak_in_flight("1F1B", 2, 4, r["rank"])
        for key in (("GPipe", 4), ("1F1B", 4)):
            run = r["runs"][key]
            assert run["peak_saved"] == run["in_flight"] * run["micro_batch_saved"], (key, run)
    kinds = {s[0] for r in ranks for s in r["runs"][("ZBV", 4)]["steps"][0]}
    assert {"F", "I", "W"} <= kinds  # zero bubble splits the backward in two
    s = analysis.summarize_pipelines(ranks)
    assert all(0 <= i < 1 for v in s.values() for i in v["idle"])
    # Whatever the times were, the order each rank ran is the schedule's: its slots give the formula
    for m in (2, 4):
        for name in ("GPipe", "1F1B"):
            assert s[(name, m)]["slot_idle"] == pytest.approx(theory.bubble_fraction(2, m))
        assert s[("Interleaved1F1B", m)]["slot_idle"] == pytest.approx(theory.interleaved_bubble_fraction(2, m, 2))
        assert s[("ZBV", m)]["slot_idle"] < s[("Interleaved1F1B", m)]["slot_idle"]
    # And in seconds, no rank was less idle than its own order allows with its own spans' lengths
    for key in runs:
        for step in analysis.timed_replay(ranks, key):
            assert all(measured >= least - 1e-6 for measured, least in step), (key, step)


def test_the_recipe_runs_under_the_real_torchrun_cli():
    summary = torchrun_json(2, "pipelining.schedule_timelines", "--micro-batches", "[2]", "--steps", "1",
                            "--batch-size", "16", "--width", "16")
    assert summary["p"] == 2 and summary["rank"] == 0 and summary["steps"] == 1

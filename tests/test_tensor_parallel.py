"""Tensor parallelism (chapter 6.3): Topology's tp dimension, Megatron's formulas, the reductions,
the slicing by hand, and two real runs checked against the unsplit model and the formulas."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import helpers
from helpers import analysis, plans, sentences, theory
from helpers.recipes import tensor_parallel as tp
from helpers.recipes import tensor_parallel_2d as tp2d
from helpers.topology import Topology


# --- Topology with tp ---------------------------------------------------------------------

def test_topology_tp_is_checked_and_innermost():
    topo = Topology(dp=2, tp=2).check(4)
    assert topo.mesh_dims == (("dp", 2), ("tp", 2))
    assert [topo.shard_ranks(d) for d in range(2)] == [[0, 1], [2, 3]]  # a row of the mesh
    assert [topo.replica_ranks(0, t) for t in range(2)] == [[0, 2], [1, 3]]  # a column
    with pytest.raises(ValueError, match=r"dp \* pp \* tp = 2 \* 1 \* 3 = 6"):
        Topology(dp=2, tp=3).check(4)
    with pytest.raises(ValueError):
        Topology(tp=0)
    # tp = 1 keeps chapter 5.3's mesh
    assert Topology(dp=2, pp=2).mesh_dims == (("pp", 2), ("dp", 2))
    assert Topology(dp=3).mesh_dims == (("pp", 1), ("dp", 3))


def test_topology_with_all_three_dimensions_is_a_bijection():
    topo = Topology(dp=2, pp=3, tp=2)
    places = {(*topo.coords(r), topo.tp_rank(r)) for r in range(12)}
    assert len(places) == 12
    assert all(topo.rank(*topo.coords(r), topo.tp_rank(r)) == r for r in range(12))
    shards = [topo.shard_ranks(d, s) for d in range(2) for s in range(3)]
    assert sorted(sum(shards, [])) == list(range(12)) and all(b - a == 1 for a, b in shards)
    assert topo.mesh_dims == (("pp", 3), ("dp", 2), ("tp", 2))
    assert "shard (tp)" in topo.table()[0]


# --- Theory -------------------------------------------------------------------------------

def test_megatron_counts_and_message():
    assert theory.megatron_allreduces(1) == (1, 1)
    assert theory.megatron_allreduces(48) == (48, 48)
    assert theory.megatron_allreduces(4, first_input_needs_grad=False) == (4, 3)
    assert theory.tp_message_bytes(4, 16, 64) == 4 * 16 * 64 * 4
    assert theory.tp_message_bytes(1, 1, 8, value_bytes=2) == 16


def test_state_bytes_per_strategy():
    n_split, n_kept = 1000, 40
    one = {"DDP": 1040, "FSDP": 1040 / 4, "TP": 1000 / 4 + 40, "FSDP x TP": (1000 / 2 + 40) / 2}
    layouts = {"DDP": (4, 1), "FSDP": (4, 1), "TP": (1, 4), "FSDP x TP": (2, 2)}
    for name, (dp, tp_) in layouts.items():
        states = theory.state_bytes(name, n_split, n_kept, dp, tp_)
        assert sum(states.values()) == pytest.approx(16 * one[name]), name  # Adam in fp32
        assert states["parameters"] == pytest.approx(4 * one[name])


def test_step_collectives_and_bytes_sent():
    args = dict(n_split=1000, n_kept=40, layers=2, batch=8, seq=4, hidden=16)
    ddp = theory.step_collectives("DDP", dp=4, tp=1, **args)
    assert ddp == {("all_reduce", "backward"): (1, 4 * 1040)}
    assert theory.sent_bytes(ddp, "DDP", 4, 1) == pytest.approx(2 * 3 / 4 * 4 * 1040)
    fsdp = theory.step_collectives("FSDP", dp=4, tp=1, **args)
    assert theory.sent_bytes(fsdp, "FSDP", 4, 1) == pytest.approx(1.5 * theory.sent_bytes(ddp, "DDP", 4, 1))
    tpc = theory.step_collectives("TP", dp=1, tp=4, **args)
    m = theory.tp_message_bytes(8, 4, 16)
    assert tpc == {("all_reduce", "forward"): (4, 4 * m), ("all_reduce", "backward"): (3, 3 * m)}
    both = theory.step_collectives("FSDP x TP", dp=2, tp=2, **args)
    assert both[("all_reduce", "forward")] == (4, 4 * m / 2)  # half the batch per replica
    assert both[("all_gather", "forward")] == (2, 4 * (500 + 40))
    # the all_gathers go over dp, the all_reduces over tp
    sent = theory.sent_bytes(both, "FSDP x TP", 2, 2)
    assert sent == pytest.approx(3 * 0.5 * 4 * 540 + 7 * 1.0 * m / 2)


def test_break_even_is_where_tp_and_ddp_send_the_same():
    n, layers, hidden, p = 99328, 2, 64, 4
    tokens = theory.tp_ddp_break_even_tokens(n, layers, hidden, p)
    ddp = theory.sent_bytes(theory.step_collectives("DDP", n, 0, p, 1, layers, 1, 1, hidden), "DDP", p, 1)
    tp_sent = 2 * (p - 1) / p * (4 * layers - 1) * theory.tp_message_bytes(1, 1, hidden) * tokens
    assert tp_sent == pytest.approx(ddp)
    assert theory.tp_ddp_break_even_tokens(n, layers, hidden, 1) == math.inf


# --- Analysis and the slices, without ranks ----------------------------------------------------

def test_collective_summary_and_gaps():
    calls = [("all_reduce", "forward", 10), ("all_reduce", "forward", 6), ("all_gather", "backward", 4)]
    assert analysis.collective_summary(calls) == {("all_reduce", "forward"): (2, 16),
                                                  ("all_gather", "backward"): (1, 4)}
    whole = {"out": torch.zeros(2), "x_grad": torch.zeros(2), "grads": {"w": torch.zeros(3)}}
    run = {"out": torch.tensor([0.0, 0.5]), "x_grad": torch.zeros(2), "grads": {"w": torch.tensor([0, 0, -2.0])}}
    assert analysis.max_gap(run, whole) == {"out": 0.5, "x_grad": 0.0, "grads": 2.0}
    with pytest.raises(ValueError):
        analysis.max_gap({**run, "grads": {"v": torch.zeros(3)}}, whole)


def test_slices_put_back_together_are_the_weights():
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 12)
    cols = [tp.column_slice(linear, r, 4) for r in range(4)]
    rows = [tp.row_slice(linear, r, 2) for r in range(2)]
    assert torch.equal(torch.cat([c.weight for c in cols]), linear.weight)
    assert torch.equal(torch.cat([c.bias for c in cols]), linear.bias)
    assert torch.equal(torch.cat([r.weight for r in rows], dim=1), linear.weight)
    assert all(r.bias is None for r in rows)
    x = torch.randn(3, 8)
    partial = sum(r(x[:, i * 4:(i + 1) * 4]) for i, r in enumerate(rows)) + linear.bias
    torch.testing.assert_close(partial, linear(x))


def test_the_chapter_says_when_its_four_ranks_share_the_cores():
    two = sentences.tensor_parallel(plans.PROFILES["CPU only, 2 cores"])["tp_four_ranks"]
    assert two.startswith("4 ranks share 2 CPU cores") and "no timings" in two
    big = sentences.tensor_parallel(plans.PROFILES["8 GPUs + 96 cores"])["tp_four_ranks"]
    assert "did not take turns" in big and "NCCL" in big


# --- Real runs ------------------------------------------------------------------------------

def test_blocks_split_over_two_ranks_equal_the_unsplit_blocks_with_megatrons_collectives():
    ranks = helpers.launch(tp.block_equality, nprocs=2, hidden=16, heads=2, batch=2, seq=4, show=None)
    message = theory.tp_message_bytes(2, 4, 16)
    for r in ranks:
        for kind, versions in r["blocks"].items():
            for name, run in versions.items():
                gap = analysis.max_gap(run, versions["whole"])
                assert max(gap.values()) < 1e-5, (kind, name, gap)
                counted = analysis.collective_summary(run["calls"])
                if name in ("naive", "library"):
                    assert counted == {("all_reduce", "forward"): (1, message),
                                       ("all_reduce", "backward"): (1, message)}, (kind, name)
            assert versions["whole"]["calls"] == []
        apart = analysis.collective_summary(r["blocks"]["attention"]["library, q k v apart"]["calls"])
        assert apart[("all_reduce", "backward")] == (3, 3 * message)


@pytest.mark.filterwarnings("ignore::helpers.SharedCoresWarning")  # only a timing caveat; bytes are counted
def test_four_strategies_cost_what_the_formulas_say_and_train_like_the_unsplit_model():
    ranks = helpers.launch(tp2d.strategy_costs, nprocs=4, hidden=16, heads=4, layers=1, batch=4, seq=4,
                           steps=3, show=None)
    rows = analysis.strategy_rows(ranks)
    assert [r["strategy"] for r in rows] == list(theory.STRATEGIES)
    for row in rows:
        assert row["states"] == row["states_formula"] and row["collectives"] == row["collectives_formula"], row
    for name in theory.STRATEGIES:
        torch.testing.assert_close(torch.tensor(analysis.global_losses(ranks, name)),
                                   torch.tensor(ranks[0]["reference"]["losses"]), rtol=1e-5, atol=1e-5)
        assert analysis.weight_gap(ranks, name) < analysis.weight_movement(ranks) / 100, name
    header, cells = analysis.table_cells(rows)
    assert len(cells) == 4 and all(len(c) == len(header) for c in cells)
    with pytest.raises(helpers.RankError):
        helpers.launch(tp2d.strategy_costs, nprocs=2, show=None)  # 2 x (p / 2) needs p >= 4


def test_the_block_recipe_runs_under_the_real_torchrun_cli():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "helpers.run",
         "tensor_parallel.block_equality", "--hidden", "16", "--heads", "2", "--seq", "4"],
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary == {"rank": 0, "t": 2}

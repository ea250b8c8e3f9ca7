"""Sequence parallelism (chapter 8.2): SP's formulas worked by hand, Korthikanti et al.'s activation
equations, the by-hand pieces' refusals, and real runs checked against the unsplit GPT."""

import pytest
import torch

import helpers
from helpers import analysis, gpt, plans, sentences, theory
from helpers.recipes import sequence_parallel as sq
from torchrun_cli import torchrun_json

TINY = gpt.CONFIGS["gpt-tiny"]


# --- theory, by hand --------------------------------------------------------------------------

def test_sp_sends_tps_bytes_in_twice_the_calls():
    # gpt-tiny's 2 layers = 4 blocks, batch 2: M = 2 x 64 x 64 float32 values = 32768 bytes
    m = 2 * 64 * 64 * 4
    assert theory.sp_collectives(4, 2, 64, 64) == {
        ("all_gather", "forward"): (4, 4 * m), ("reduce_scatter", "forward"): (4, 4 * m),
        ("all_gather", "backward"): (4, 4 * m), ("reduce_scatter", "backward"): (4, 4 * m)}
    shard = theory.sp_collectives(4, 2, 64, 64, keep="shard")
    assert shard[("all_gather", "backward")] == (8, 8 * m)  # the input gathered again for the weights' gradients
    for t in (2, 3, 4, 8):
        tp_sent = 2 * 4 * theory.BUS_FACTOR["all_reduce"](t) * m  # one all-reduce per block each way
        sp_sent = analysis.sent(theory.sp_collectives(4, 2, 64, 64), t)
        assert sp_sent == pytest.approx(tp_sent, rel=1e-12)
        assert analysis.sent(shard, t) == pytest.approx(1.25 * tp_sent, rel=1e-12)
    with pytest.raises(ValueError, match="keep must be one of"):
        theory.sp_collectives(4, 2, 64, 64, keep="half")


def test_the_weights_sp_keeps_whole_counted_by_hand():
    # gpt-tiny: embeddings 256 x 64 + 64 x 64, 5 LayerNorms of 2 x 64, 4 row-split biases of 64
    assert theory.sp_replicated_params(256, 64, 64, 2) == 16384 + 4096 + 640 + 256 == 21376
    assert theory.sp_replicated_params(256, 64, 64, 2, tied=False) == 21376 + 16384
    model = gpt.build(TINY)
    assert sum(p.numel() for p in sq.replicated(model).values()) == 21376


def test_the_plans_collectives_are_the_blocks_and_the_ends():
    m, pos, rows = 2 * 64 * 64 * 4, 64 * 64 * 4, 2 * 64 * 4
    plan = theory.sp_plan_collectives(2, 2, 64, 64)
    assert plan[("reduce_scatter", "forward")] == (6, 5 * m + pos)
    assert plan[("all_gather", "forward")] == (5, 5 * m)
    assert plan[("all_gather", "backward")] == (6, 5 * m + pos)
    assert plan[("reduce_scatter", "backward")] == (5, 5 * m)
    assert plan[("all_reduce", "forward")] == (3, 3 * rows)


def test_sp_keeps_eq_4_with_its_shard_and_the_gathered_inputs_whole_without():
    # gpt-tiny at batch 2, float32, no dropout, flash: 16 sbh values, LayerNorm's 4 bs statistics,
    # the logsumexp's b a s. Whole: one layer keeps 528384 bytes; Eq. 4 splits all of it over t.
    shape = theory.transformer.Shape.of(TINY)
    s, b, h, a = 64, 2, 64, 4
    whole = 4 * (16 * s * b * h + 4 * b * s + b * a * s)
    assert analysis.layer_formula("whole", shape, 2, 1) == whole == 528384
    for t in (2, 4):
        assert theory.sp_activation_bytes(shape, 2, t, **analysis.GPT_ACTIVATIONS) == whole / t
        # the QKV and MLP inputs gathered and kept: 2 sbh values each rank keeps whole instead of 1/t
        kept = theory.sp_activation_bytes(shape, 2, t, "whole", **analysis.GPT_ACTIVATIONS)
        assert kept == whole / t + 2 * s * b * h * 4 * (1 - 1 / t)
    # Korthikanti's own count (2-byte values, dropout, the s x s softmax): Eq. 4 is Eq. 1 over t
    eq1 = theory.transformer.activation_bytes(shape, 2)
    assert theory.sp_activation_bytes(shape, 2, 4) == pytest.approx(eq1 / 4)
    with pytest.raises(ValueError, match="keep must be one of"):
        theory.sp_activation_bytes(shape, 2, 2, "half")


# --- the pieces, in one process ----------------------------------------------------------------

def test_the_split_gpt_refuses_what_it_cannot_check():
    model = gpt.build(gpt.GPTConfig(seq=8, layers=1, hidden=8, heads=2, dropout=0.1))
    idx = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(ValueError, match="dropout = 0"):
        sq.sharded_forward(model, sq.shard_gpt(model, 0, 2), idx, 0, 2)
    with pytest.raises(ValueError, match="3 ranks"):
        sq.shard_gpt(model, 0, 3)
    with pytest.raises(ValueError, match="mode must be one of"):
        sq.sharded_forward(model, sq.shard_gpt(model, 0, 2), idx, 0, 2, mode="cp")


def test_the_chapter_says_when_its_four_ranks_share_the_cores_and_where_torchs_cp_ran():
    cpu = sentences.sequence_context(plans.PROFILES["CPU only, 2 cores"])
    assert cpu["sc_four_ranks"].startswith("4 ranks share 2 CPU cores") and "no timings" in cpu["sc_four_ranks"]
    assert "was not run here" in cpu["sc_torch_cp"] and "no GPU" in cpu["sc_torch_cp"]
    node = sentences.sequence_context(plans.PROFILES["8 GPUs + 96 cores"])
    assert "did not take turns" in node["sc_four_ranks"] and "ran below" in node["sc_torch_cp"]
    assert "1 GPU" in sentences.sequence_context(plans.PROFILES["Colab: 1 GPU + 2 cores"])["sc_torch_cp"]


# --- real runs ---------------------------------------------------------------------------------

def test_sp_by_hand_and_with_dtensor_equal_the_unsplit_gpt_and_cost_what_theory_says():
    ranks = helpers.launch(sq.sp_equality, nprocs=2, batch=1, show=None)
    for r in ranks:
        gaps = analysis.sp_gaps(r)
        assert set(gaps) == {"whole", "TP", "SP", "SP, shard kept", "SP, DTensor"}
        assert all(max(g.values()) < 1e-5 for g in gaps.values()), gaps
        for row in analysis.sp_collective_rows(r):
            assert row["measured"] == row["predicted"] and row["sent"] == row["sent_formula"], row
        for row in analysis.activation_rows(r):
            assert row["measured"] == row["formula"], row
        assert r["activations"]["whole"] == 2 * r["activations"]["SP, shard kept"]
        assert all(n.split(".")[-2] in ("ln1", "ln2", "ln_f") for n in r["runs"]["SP, DTensor"]["pending"])


def test_the_sp_recipe_runs_under_the_real_torchrun_cli():
    summary = torchrun_json(2, "sequence_parallel.sp_equality", "--batch", "1")
    assert summary == {"rank": 0, "t": 2, "batch": 1}

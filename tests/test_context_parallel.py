"""Context parallelism (chapter 8.2): the chunk layouts and the causal work worked by hand, the
ring's bytes, torch's own context_parallel read from its source, and real rings on 2 and 4 ranks."""

import pytest
import torch

import helpers
from helpers import analysis, plans, theory
from helpers.probes import context_parallel as cp_probe
from helpers.recipes import context_parallel as cp
from torchrun_cli import torchrun_json


# --- theory, by hand --------------------------------------------------------------------------

def test_chunks_and_positions():
    assert [theory.chunks("naive", r, 4) for r in range(4)] == [[0], [1], [2], [3]]
    assert [theory.chunks("zigzag", r, 4) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert theory.positions("zigzag", 1, 2, 16) == [4, 5, 6, 7, 8, 9, 10, 11]  # chunks 1 and 2 of 4
    assert theory.positions("naive", 1, 2, 16) == list(range(8, 16))
    for layout in theory.LAYOUTS:  # every position once, over the ranks
        assert sorted(p for r in range(4) for p in theory.positions(layout, r, 4, 32)) == list(range(32))


def test_causal_work_by_hand():
    # s = 8 on 2 ranks. Naive, blocks of 4: rank 0 computes its diagonal block (16, of which 10 unmasked),
    # rank 1 a full block and its diagonal (32; 16 + 10). Zig-zag, chunks of 2: rank 0 holds chunks 0 and 3,
    # which need 1 + 4 chunk pairs of 4 (20; 0 + 3 full pairs + 2 diagonals of 3 = 18), rank 1 chunks 1, 2: 2 + 3.
    assert theory.causal_work("naive", 0, 2, 8) == {"computed": 16, "needed": 10}
    assert theory.causal_work("naive", 1, 2, 8) == {"computed": 32, "needed": 26}
    assert theory.causal_work("zigzag", 0, 2, 8) == theory.causal_work("zigzag", 1, 2, 8) == {"computed": 20, "needed": 18}
    for layout in theory.LAYOUTS:  # the unmasked pairs add up to the causal triangle, s (s + 1) / 2
        for n in (1, 2, 4, 8):
            assert sum(theory.causal_work(layout, r, n, 64)["needed"] for r in range(n)) == 64 * 65 // 2


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_the_naive_split_is_2n_over_n_plus_1_out_of_balance_and_the_zigzag_not(n):
    assert theory.imbalance("naive", n, 32 * n) == pytest.approx(2 * n / (n + 1))
    assert theory.imbalance("zigzag", n, 32 * n) == 1.0


def test_a_rings_bytes_grow_as_s_and_the_attention_they_hide_under_as_s_squared():
    one = theory.ring_layer_cost(2, 64, 4, 16, 4)
    assert one["bytes"] == (6 + 14) * 8192  # ring_bytes' forward and backward
    assert one["attention_flops"] == 6 * 2 * 64 ** 2 * 64 / 4  # 6bs²h/n
    two = theory.ring_layer_cost(2, 128, 4, 16, 4)
    assert two["bytes"] == 2 * one["bytes"] and two["attention_flops"] == 4 * one["attention_flops"]
    assert two["flops_per_byte"] == 2 * one["flops_per_byte"]
    assert theory.ring_layer_cost(1, 8, 1, 2, 1)["flops_per_byte"] == float("inf")  # one rank sends nothing


def test_ring_bytes_by_hand():
    # b = 1, s = 8, one head of width 2, 2 ranks: a block is 1 x 4 x 2 float32 values = 32 bytes.
    # Forward: K and V one hop (64). Backward: K and V one hop, dK and dV two hops (64 + 128).
    assert theory.ring_bytes(1, 8, 1, 2, 2) == {"forward": 64, "backward": 192}
    assert theory.ring_bytes(1, 8, 1, 2, 1) == {"forward": 0, "backward": 0}
    assert theory.ring_bytes(2, 64, 4, 16, 4) == {"forward": 6 * 8192, "backward": 14 * 8192}


@pytest.mark.parametrize("call, says", [
    (lambda: theory.chunks("striped", 0, 2), "layout must be one of"),
    (lambda: theory.chunks("naive", 2, 2), "rank 2 is outside a ring of 2"),
    (lambda: theory.causal_work("zigzag", 0, 4, 12), "does not cut into 8 equal chunks"),
    (lambda: theory.ring_bytes(1, 10, 1, 2, 4), "does not split over 4 ranks"),
    (lambda: theory.what_each_divides(2, 2, 64, 64, 4, 2, -1), "n_params must be >= 0"),
])
def test_bad_inputs_are_refused_with_the_reason(call, says):
    with pytest.raises(ValueError, match=says):
        call()


def test_the_takeaway_table():
    rows = theory.what_each_divides(2, 2, 64, 64, 4, 4, 120576)
    assert [r["name"] for r in rows] == ["TP", "SP", "CP"]
    assert rows[0]["bytes"] == rows[1]["bytes"] == 4 * 2 * 2 * 0.75 * 32768  # 8 all-reduces of M
    assert rows[2]["bytes"] == 2 * (6 + 14) * 8192 + 1.5 * 4 * 120576


# --- torch's own context parallelism ------------------------------------------------------------

def test_torchs_ring_wraps_only_sdpas_cuda_kernels():
    facts = cp_probe.torch_cp_facts(torch.device("cpu"))
    assert facts["here"] == "aten._scaled_dot_product_flash_attention_for_cpu.default"
    assert not facts["runs_here"]
    assert {op.split(".")[1] for op in facts["handled"]} >= {"_scaled_dot_product_flash_attention",
                                                              "_scaled_dot_product_efficient_attention"}
    assert "CP only supports flash attention and memory efficient attention" in cp_probe.sdpa_handler_source()


@pytest.mark.parametrize("name, m", list(plans.PROFILES.items()), ids=list(plans.PROFILES))
def test_torchs_cp_is_planned_only_where_each_rank_has_a_gpu(name, m):
    from helpers import devices
    runs = plans.torch_cp_runs(m)
    assert runs == (m.n_gpus >= 2), name
    if runs:
        assert {devices.for_rank("nccl", r, m).type for r in range(2)} == {"cuda"}


# --- real rings ---------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::helpers.SharedCoresWarning")  # bytes and counts, no timings
@pytest.mark.parametrize("n", [2, 4])
def test_ring_attention_equals_full_attention_and_does_the_predicted_work(n):
    ranks = helpers.launch(cp.ring_equality, nprocs=n, batch=1, heads=2, seq=16, head_dim=4, show=None)
    rows = analysis.cp_rows(ranks)
    assert len(rows) == 2 * n
    for row in rows:
        assert row["error"] < 1e-5, row
        assert row["computed"] == row["computed_backward"] == row["computed_formula"], row
        assert row["sent"] == row["sent_formula"], row
    assert analysis.balance(rows, "naive") == pytest.approx(2 * n / (n + 1))
    assert analysis.balance(rows, "zigzag") == 1.0
    with pytest.raises(ValueError, match="no rank ran"):
        analysis.balance(rows, "striped")


def test_the_ring_recipe_runs_under_the_real_torchrun_cli_and_refuses_torchs_cp_without_gpus():
    assert torchrun_json(2, "context_parallel.ring_equality", "--seq", "16") == {"rank": 0, "n": 2}
    if not plans.torch_cp_runs(helpers.machine.this()):
        with pytest.raises(helpers.RankError, match="needs a GPU per rank"):
            helpers.launch(cp.torch_ring, nprocs=2, backend="gloo", show=None)

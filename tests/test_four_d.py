"""4D parallelism (chapter 8.4): the layout's checks, theory.four_d's sums, and real 8-rank runs (under
helpers.launch and the torchrun CLI) checked against one process and the formulas."""

import pytest
import torch

import helpers
from helpers import plans, sentences, theory
from helpers.analysis import four_d as fa
from helpers.gpt import GPT
from helpers.launch import RankError
from helpers.recipes import four_d as fd
from helpers.theory import four_d as ft
from torchrun_cli import torchrun_json

CFG = fd.CONFIG
DIMS = {"layers": CFG.layers, "hidden": CFG.hidden, "vocab": CFG.vocab, "seq": CFG.seq}


# --- The layout ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout, world, message", [
    ((2, 3, 2), 8, r"dp \* pp \* tp = 2 \* 2 \* 3 = 12, but the job has 8 processes"),
    ((1, 2, 4), 8, r"2 layers do not divide into pp = 4 equal stages"),
    ((1, 8, 1), 8, r"tp = 8 must divide the heads \(4\)"),
    ((2, 2, 2), 4, r"= 8, but the job has 4 processes"),
])
def test_bad_layouts_are_refused_in_one_line(layout, world, message):
    with pytest.raises(ValueError, match=message) as e:
        fd.check_layout(*layout, world, CFG, batch=4, micro_batches=2)
    assert "\n" not in str(e.value)


def test_a_batch_that_does_not_cut_into_micro_batches_is_refused():
    with pytest.raises(ValueError, match="batch of 5 sequences does not cut into 2 equal micro-batches"):
        fd.check_layout(2, 2, 2, 8, CFG, batch=5, micro_batches=2)
    assert fd.check_layout(2, 2, 2, 8, CFG, batch=4, micro_batches=2).mesh_dims == (("pp", 2), ("dp", 2), ("tp", 2))


def test_a_launch_with_too_few_ranks_for_the_mesh_fails_with_the_reason():
    with pytest.raises(RankError, match=r"dp \* pp \* tp = 2 \* 2 \* 2 = 8, but the job has 4 processes"):
        helpers.launch(fd.train_4d, nprocs=4, show=None)


def test_the_stages_hold_every_parameter_once_under_the_gpts_names():
    torch.manual_seed(0)
    gpt = GPT(CFG)
    names = [n for s in range(2) for n, _ in fd.pipeline_split(gpt, s, 2).named_parameters()]
    assert sorted(names) == sorted(n for n, _ in gpt.named_parameters())
    x = torch.randint(0, CFG.vocab, (2, CFG.seq))
    staged = fd.pipeline_split(gpt, 1, 2)(fd.pipeline_split(gpt, 0, 2)(x))
    assert torch.equal(staged, gpt(x))  # the same modules, run in the same order


# --- theory.four_d -------------------------------------------------------------------------------

def test_stage_params_sum_to_the_untied_gpt_and_to_theory_transformer():
    gpt = GPT(CFG)
    n = sum(p.numel() for p in gpt.parameters())
    assert sum(sum(ft.stage_params(**DIMS, pp=2, stage=s)) for s in range(2)) == n
    assert sum(ft.stage_params(**DIMS, pp=1, stage=0)) == n
    shape = theory.transformer.Shape(layers=2, hidden=64, heads=4, seq=64, vocab=256, tied=False)
    assert theory.transformer.parameter_count(shape) == n
    with pytest.raises(ValueError, match="stage must be in 0..1"):
        ft.stage_params(**DIMS, pp=2, stage=2)


@pytest.mark.parametrize("call, message", [
    (lambda: ft.stage_blocks(3, 2), "3 layers do not divide into pp = 2 equal stages"),
    (lambda: ft.stage_params(**DIMS, pp=2, stage=-1), "stage must be a whole number >= 0"),
    (lambda: ft.step_messages(**DIMS, dp=1, tp=3, pp=1, stage=0, micro_batch=2, micro_batches=1),
     r"tp = 3 must divide the sequence \(64\)"),
    (lambda: ft.step_messages(**DIMS, dp=0, tp=1, pp=1, stage=0, micro_batch=2, micro_batches=1),
     "dp must be a whole number >= 1"),
    (lambda: ft.sent_bytes({"dp": {"allreduce": 1.0}}, 2, 1), "op must be one of"),
    (lambda: ft.in_flight(2, 2, 2), "stage must be in 0..1"),
])
def test_theory_refuses_impossible_inputs_with_the_reason(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_sequence_parallel_sends_what_megatrons_all_reduces_send():
    # Korthikanti et al. 2022, Section 4.2.2: an all-gather and a reduce-scatter cost one all-reduce.
    m = ft.step_messages(**DIMS, dp=1, tp=4, pp=1, stage=0, micro_batch=2, micro_batches=1)["tp"]
    a = theory.tp_message_bytes(2, CFG.seq, CFG.hidden)
    fwd, bwd = theory.megatron_allreduces(2 * CFG.layers)
    tp_only = theory.BUS_FACTOR["all_reduce"](4) * (fwd + bwd) * a
    blocks = theory.BUS_FACTOR["all_gather"](4) * 2 * (fwd + bwd) * a
    assert blocks == pytest.approx(tp_only)
    assert m["all_gather"] > m["reduce_scatter"]  # the head's logits are gathered, not scattered


def test_each_dimension_is_silent_when_its_size_is_one():
    m = ft.step_messages(**DIMS, dp=1, tp=1, pp=1, stage=0, micro_batch=2, micro_batches=2)
    assert m == {"dp": {}, "tp": {}, "pp": {}}
    assert ft.sent_bytes(m, 1, 1) == {"dp": 0.0, "tp": 0.0, "pp": 0.0}
    mid = ft.step_messages(layers=3, hidden=64, vocab=256, seq=64, dp=1, tp=1, pp=3, stage=1,
                           micro_batch=1, micro_batches=4)["pp"]
    assert mid["send"] == mid["recv"] == 2 * 4 * 64 * 64 * 4  # a middle stage sends both ways


def test_activations_differ_from_korthikantis_sp_count_by_the_gathered_inputs_only():
    shape = theory.transformer.Shape(layers=2, hidden=64, heads=4, seq=64, vocab=256, tied=False)
    opts = dict(sp=True, bytes_per_value=4, dropout=False, attention="flash", norm_stats=True)
    for t in (1, 2, 4):
        megatron = theory.transformer.activation_bytes(shape, 2, tp=t, **opts)
        extra = 2 * 4 * 2 * 64 * 64 * (1 - 1 / t)  # q k v's and fc's input, v·sbh each, kept whole
        assert ft.layer_activation_bytes(shape, 2, t) == pytest.approx(megatron + extra)
    assert ft.in_flight(2, 2, 0) == 2 and ft.in_flight(2, 2, 1) == 1 and ft.in_flight(4, 2, 0) == 2


# --- Real runs -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run():
    return helpers.launch(fd.train_4d, nprocs=8, steps=3, show=None)


def test_8_ranks_train_as_one_process(run):
    eq = fa.equality(run)
    assert eq["within_tolerance"] and eq["n_tensors"] == len(list(GPT(CFG).parameters())), eq
    assert eq["loss_gap"] < 1e-5 and eq["weight_gap"] < 1e-5, eq
    assert eq["losses"][-1] < eq["losses"][0]


def test_every_byte_on_every_dimension_and_every_held_byte_is_the_formulas(run):
    rows = fa.stage_rows(run)
    assert [r["ranks"] for r in rows] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for row in rows:
        for dim in ft.DIMS:
            assert row["messages"][dim] == row["messages_formula"][dim], (row["stage"], dim)
        assert row["states"] == row["states_formula"]
        b = run[0]["batch"] // run[0]["micro_batches"]
        assert row["activations"] == ft.activation_bytes(**DIMS, heads=CFG.heads, **run[0]["layout"],
                                                         stage=row["stage"], micro_batch=b, micro_batches=2)
        sent = sum(row["sent"].values())  # on gloo and Linux, what each rank wrote to its sockets agrees
        assert all(w is None or sent <= w <= 1.05 * sent for w in row["wire"]), row["wire"]
    assert len(run[0]["seconds"]) == 3 and fa.step_seconds(run)["step_s"] > 0


def test_a_wrong_formula_would_be_caught(run):
    rows = fa.stage_rows(run)
    wrong = ft.step_messages(**DIMS, dp=2, tp=2, pp=2, stage=0, micro_batch=2, micro_batches=1)
    assert rows[0]["messages"]["tp"] != wrong["tp"] and rows[0]["messages"]["pp"] != wrong["pp"]


def test_the_recipe_runs_under_the_real_torchrun_cli():
    # 4 ranks (tp 2 x pp 2, one replica): 8 processes that each import torch take about 50 s on 2 cores.
    summary = torchrun_json(4, "four_d.train_4d", "--dp", "1", "--steps", "3", timeout=240)
    assert summary["rank"] == 0 and summary["pp_rank"] == 0
    assert summary["peak_saved"] == ft.activation_bytes(**DIMS, heads=CFG.heads, dp=1, tp=2, pp=2, stage=0,
                                                        micro_batch=2, micro_batches=2)


def test_context_parallelism_composes_only_on_gpu_kernels():
    probe = helpers.launch(fd.context_parallel_probe, nprocs=2, show=None)
    cp = fa.cp_verdict(probe)
    assert cp["composed"] == probe[0]["device"].startswith("cuda"), cp
    if not cp["composed"]:
        assert "does not have a sharding strategy" in cp["errors"]["default kernel"]
        said = sentences.four_d_cp(plans.PROFILES["CPU only, 2 cores"], **cp)
        assert cp["errors"]["default kernel"] in said and "does not join the mesh" in said


def test_a_pipeline_alone_is_the_same_recipe_with_two_dimensions_of_size_one():
    # Topology(every_dim=True) names all three, so apply_tp and apply_fsdp get 1-rank groups: silent.
    ranks = helpers.launch(fd.train_4d, nprocs=2, dp=1, tp=1, pp=2, steps=3, show=None)
    assert fa.equality(ranks)["within_tolerance"]
    for row in fa.stage_rows(ranks):
        assert row["messages"] == {"pp": row["messages_formula"]["pp"]} and row["states"] == row["states_formula"]
        assert row["activations"] == ft.activation_bytes(**DIMS, heads=CFG.heads, dp=1, tp=1, pp=2,
                                                         stage=row["stage"], micro_batch=2, micro_batches=2)


def test_zero_3_and_full_recomputation_send_and_hold_what_their_formulas_say():
    """ZeRO-3 gathers m + 1 times a step under 1F1B; full recomputation runs each block's forward
    collectives again in the backward but its last reduce-scatter (torch's early stop), and keeps
    each block's input alone. 8 ranks, so that every dimension has two."""
    ranks = helpers.launch(fd.train_4d, nprocs=8, steps=3, zero=3, recompute="full", show=None)
    assert fa.equality(ranks)["within_tolerance"] and fa.settings(ranks) == {"zero": 3, "recompute": "full"}
    default = ft.step_messages(**DIMS, dp=2, tp=2, pp=2, stage=0, micro_batch=2, micro_batches=2)
    for row in fa.stage_rows(ranks):
        assert row["messages"] == row["messages_formula"], row["stage"]
        assert row["states"] == row["states_formula"] and row["activations"] == row["activations_formula"]
    first = fa.stage_rows(ranks)[0]["messages"]
    assert first["dp"]["all_gather"] == 3 * default["dp"]["all_gather"]  # m + 1 = 3 gathers
    assert first["tp"]["all_gather"] > default["tp"]["all_gather"]


def test_zero_and_recompute_are_checked_before_any_group():
    with pytest.raises(ValueError, match="zero must be 2 or 3"):
        fd.check_layout(2, 2, 2, 8, CFG, 4, 2, zero=1)
    with pytest.raises(ValueError, match="recompute must be one of"):
        fd.check_layout(2, 2, 2, 8, CFG, 4, 2, recompute="selective")

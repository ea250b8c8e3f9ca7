"""Mixture of experts (chapter 8.3): the formulas by hand and from the papers, the MoE layer against
what it replaces, bad input refused, and small real runs under launch and the torchrun CLI."""
import math

import numpy as np
import pytest
import torch

import helpers
from helpers import analysis, gpt, moe, plans, sentences, text, theory
from helpers.recipes import collectives
from helpers.recipes import experts as ex
from torchrun_cli import torchrun_json


# --- Theory -------------------------------------------------------------------------------------

def test_capacity_as_switch_transformer_draws_it():
    # Fedus et al. 2021, Fig. 3: 6 tokens over 3 experts: 2 slots each at capacity factor 1.0, 3 at 1.5
    assert theory.expert_capacity(6, 3, 1, 1.0) == 2
    assert theory.expert_capacity(6, 3, 1, 1.5) == 3
    assert theory.expert_capacity(1024, 8, 1, 1.25) == 160
    assert theory.expert_capacity(512, 4, 2, 1.25) == 320  # not 321: 1.25 * 256 is exact
    assert theory.expert_capacity(10, 4, 1, 1.0) == 3      # ceil(2.5)
    assert moe.capacity(512, 4, 2, 1.25) == 320 and moe.capacity(512, 4, 2, None) is None


def test_dropped_tokens_and_imbalance_by_hand():
    assert theory.dropped_tokens([3, 2, 1], 2) == 1
    assert theory.dropped_tokens([[4, 1, 1], [2, 2, 2]], 2) == 2  # summed over layers
    assert theory.dropped_tokens([0, 0], 0) == 0
    np.testing.assert_allclose(theory.expert_imbalance([[3, 2, 1], [2, 2, 2], [6, 0, 0]]), [1.5, 1.0, 3.0])


def test_switch_load_balancing_loss_by_hand():
    # Fedus et al. 2021, Eq. 4: alpha * N * sum f_i P_i; "minimized under a uniform distribution"
    assert theory.load_balancing_loss([0.25] * 4, [0.25] * 4, alpha=0.01) == pytest.approx(0.01)
    assert theory.load_balancing_loss([1, 0, 0, 0], [1, 0, 0, 0], alpha=0.01) == pytest.approx(0.04)
    assert theory.load_balancing_loss([0.5, 0.25, 0.25], [0.4, 0.3, 0.3]) == pytest.approx(3 * 0.35)
    # two tokens, both to expert 0, whose probability is 0.6 for each
    assert theory.routing_aux_loss([[0], [0]], [[0.6, 0.4], [0.6, 0.4]]) == pytest.approx(2 * 0.6)


def test_the_torch_aux_loss_is_the_formulas():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(50, 4), -1)
    choices = probs.topk(2, -1).indices
    loads = torch.bincount(choices.flatten(), minlength=4)
    got = moe.load_balancing_loss(probs, loads).item()
    assert got == pytest.approx(theory.routing_aux_loss(choices.numpy(), probs.numpy()), rel=1e-6)


def test_binomial_overflow_by_hand_and_by_sampling():
    assert theory.binomial_overflow(2, 0.5, 1) == pytest.approx(0.25)   # P(X = 2) * 1
    assert theory.binomial_overflow(3, 0.5, 1) == pytest.approx(3 / 8 + 2 / 8)
    assert theory.binomial_overflow(3, 0.5, 5) == 0.0
    assert theory.binomial_overflow(4, 1.0, 1) == 3.0
    rng = np.random.default_rng(0)
    T, E, k, c = 64, 4, 2, 1.0
    cap = theory.expert_capacity(T, E, k, c)
    trials = 4000
    drops = [theory.dropped_tokens(np.bincount(np.argsort(rng.random((T, E)), 1)[:, :k].ravel(), minlength=E), cap)
             for _ in range(trials)]
    sampled = np.mean(drops) / (T * k)
    assert sampled == pytest.approx(theory.expected_dropped_fraction(T, E, k, c), rel=0.1)


def test_alltoall_bytes_and_time():
    assert theory.alltoall_sent_fraction(2) == 0.5 and theory.alltoall_sent_fraction(8) == 0.875
    assert theory.alltoall_sent_fraction(1) == 0.0
    assert theory.BUS_FACTOR["all_to_all"](8) == 0.875  # nccl-tests, src/alltoall.cu: (nranks - 1) / nranks
    assert theory.alltoall_time(1000, 2, 1e-4, 1e-9) == pytest.approx(1e-4 + 500e-9)
    assert theory.alltoall_time(800, 4, 1e-4, 1e-9) == pytest.approx(3e-4 + 600e-9)
    assert theory.ep_message_bytes(512, 64) == 512 * 64 * 4 and theory.ep_message_bytes(3, 8, 2) == 48
    assert theory.moe_alltoalls(2) == (4, 4)


def test_moe_parameters_are_the_built_models():
    dense = gpt.build("gpt-tiny")
    n_dense = sum(p.numel() for p in dense.parameters())
    n_mlp = sum(p.numel() for p in dense.blocks[0].mlp.parameters())
    assert (n_dense, n_mlp) == (120576, 33088)
    held, used = theory.moe_params(n_dense, n_mlp, 2, 4, 2, 64)
    assert (held, used) == (120576 + 2 * (3 * 33088 + 256), 120576 + 2 * (33088 + 256))
    assert held == sum(p.numel() for p in moe.to_moe(gpt.build("gpt-tiny"), 4, 2).parameters())


@pytest.mark.parametrize("call, match", [
    (lambda: theory.expert_capacity(10, 4, 5), "cannot exceed"),
    (lambda: theory.expert_capacity(10, 4, 1, 0), "capacity_factor"),
    (lambda: theory.expert_capacity(0, 4), "tokens"),
    (lambda: theory.dropped_tokens([1.5, 2], 1), "loads"),
    (lambda: theory.expert_imbalance([0, 0]), "some load"),
    (lambda: theory.load_balancing_loss([0.5, 0.5], [1.0]), "one length"),
    (lambda: theory.load_balancing_loss([0.5, 0.6], [0.5, 0.5]), "sum to 1"),
    (lambda: theory.routing_aux_loss([[2]], [[0.5, 0.5]]), "expert ids"),
    (lambda: theory.binomial_overflow(3, 1.5, 1), "p must"),
    (lambda: theory.alltoall_time(-1, 2, 0, 0), "message_bytes"),
    (lambda: theory.moe_params(100, 60, 2, 4, 1, 8), "within the model"),
    (lambda: moe.Router(8, 4, 5), "k must"),
    (lambda: moe.MoE(gpt.GPTConfig(), experts=4, capacity_factor=0), "capacity_factor"),
    (lambda: moe.aux_loss(gpt.build("gpt-tiny")), "no MoE layer"),
])
def test_bad_input_is_refused_with_the_reason(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- The layer -----------------------------------------------------------------------------------

def test_plan_keeps_first_choices_before_second_choices():
    d = moe.plan(torch.tensor([[0], [0], [0], [1]]), 2, 2)
    assert d.slots.tolist() == [0, 1, 3] and d.counts.tolist() == [2, 1] and d.loads.tolist() == [3, 1]
    # two tokens, two choices each, one slot per expert: both first choices fit, both second are dropped
    d = moe.plan(torch.tensor([[0, 1], [1, 0]]), 2, 1)
    assert d.slots.tolist() == [0, 1] and d.tokens.tolist() == [0, 1] and d.loads.tolist() == [2, 2]
    assert moe.plan(torch.tensor([[0, 1], [1, 0]]), 2, None).counts.tolist() == [2, 2]


def test_one_expert_is_the_dense_mlp():
    torch.manual_seed(0)
    cfg = gpt.CONFIGS["gpt-tiny"]
    layer = moe.MoE(cfg, experts=1, k=1)
    x = torch.randn(2, 5, cfg.hidden)
    torch.testing.assert_close(layer(x), layer.experts[0](x))  # the only expert's probability is 1
    assert layer.aux.item() == pytest.approx(1.0)


def test_groups_route_apart():
    torch.manual_seed(0)
    cfg = gpt.CONFIGS["gpt-tiny"]
    grouped = moe.MoE(cfg, experts=4, k=2, capacity_factor=1.0, groups=2)
    x = torch.randn(4, 8, cfg.hidden)
    out = grouped(x)
    grouped.groups = 1
    halves = [grouped(x[:2]), grouped(x[2:])]
    torch.testing.assert_close(out, torch.cat(halves))
    with pytest.raises(ValueError, match="groups evenly"):
        moe.MoE(cfg, groups=3)(x)


def test_moe_gpt_learns_and_reports_its_loads():
    ids, _ = text.split()
    torch.manual_seed(0)
    model = moe.to_moe(gpt.build("gpt-tiny"), experts=4, k=2, capacity_factor=1.25)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for x, y in text.batches(ids, 4, 32, 12):
        _, loss = model(x, y)
        (loss + 0.01 * moe.aux_loss(model)).backward()
        opt.step(), opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5
    loads = moe.loads(model)
    assert loads["loads"].shape == (2, 4) and int(loads["loads"].sum(1)[0]) == 4 * 32 * 2
    assert bool((loads["counts"] <= moe.capacity(128, 4, 2, 1.25)).all())


def test_sweep_refuses_an_unknown_collective():
    with pytest.raises(ValueError, match="op must be one of"):
        collectives.sweep(None, op="all_to_some")


# --- Plans and sentences ---------------------------------------------------------------------------

def test_the_chapter_says_when_its_four_ranks_share_the_cores():
    two = sentences.experts(plans.PROFILES["CPU only, 2 cores"])
    assert two["ep_four_ranks"].startswith("4 ranks share 2 CPU cores") and "no timings" in two["ep_four_ranks"]
    assert "gloo's loopback" in two["ep_links"]
    big = sentences.experts(plans.PROFILES["8 GPUs + 96 cores"])
    assert "did not take turns" in big["ep_four_ranks"] and "NCCL" in big["ep_four_ranks"]
    assert "GPUs' own" in big["ep_links"]


# --- Real runs -------------------------------------------------------------------------------------

def test_experts_split_over_two_ranks_equal_one_process():
    ranks = helpers.launch(ex.ep_equality, nprocs=2, batch=2, show=None)
    assert max(analysis.ep_gaps(ranks).values()) < 1e-5, analysis.ep_gaps(ranks)
    assert (ranks[0]["experts"], ranks[0]["k"], ranks[0]["capacity_factor"]) == (4, 2, 1.25)
    assert torch.equal(sum(torch.tensor(r["counts"]) for r in ranks), torch.tensor(ranks[0]["ref_counts"]))
    for r in ranks:
        s = analysis.dispatch_bytes(r)
        assert s["counted"] == s["message"] and s["all_calls"] == {"forward": 4, "backward": 4}
        assert 0 < s["left"] < s["message"]
    with pytest.raises(helpers.RankError):
        helpers.launch(ex.ep_equality, nprocs=2, experts=3, show=None)  # 3 experts over 2 ranks


def test_ep_padding_by_hand():
    """2 ranks, 4 experts, k = 1, 8 tokens a rank, 2 layers: rank 1's experts (2, 3) get 12 of 16 in layer 0."""
    loads = [[2, 2, 6, 6], [4, 4, 4, 4]]
    ranks = [{"n": 2, "tokens": 8, "experts": 4, "k": 1, "ref_loads": loads, "counts": [[1, 1, 3, 3], [2, 2, 2, 2]]},
             {"counts": [[1, 1, 3, 3], [2, 2, 2, 2]]}]
    pad = analysis.ep_padding(ranks, 1.25)
    assert pad == {"dropped": 0, "busiest": 12, "mean": 8.0, "capacity": 3, "padded": 12}  # C = ceil(1.25 * 8 / 4)
    ranks[1]["counts"] = [[1, 1, 2, 3], [2, 2, 2, 2]]  # one slot cut
    assert analysis.ep_padding(ranks, 1.25)["dropped"] == 1


@pytest.mark.filterwarnings("ignore::helpers.SharedCoresWarning")  # no timings: losses and weights
def test_ep_by_dp_on_four_ranks_trains_like_one_process():
    ranks = helpers.launch(ex.ep_dp_train, nprocs=4, steps=2, show=None)
    for r in ranks:
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(r["ref_losses"]), rtol=1e-5, atol=1e-5)
        assert r["weight_gap"] < r["moved"] / 100
    assert sorted(tuple(r["experts_held"]) for r in ranks) == [(0, 1), (0, 1), (2, 3), (2, 3)]


def test_training_and_the_sweep_run_small():
    trained = helpers.launch(ex.train, nprocs=1, steps=6, alphas=(0.0, 0.1), show=None)[0]
    rows = [analysis.expert_balance(trained, a) for a in (0.0, 0.1)]
    assert all(r["last_loss"] < r["first_loss"] for r in rows)
    assert rows[0]["first_imbalance"] == rows[1]["first_imbalance"]
    swept = helpers.launch(ex.alltoall_sweep, nprocs=2, sizes=[4096, 65536], budget_bytes=2**20, min_repeats=3,
                           max_repeats=5, show=None)[0]
    for op in ("all_to_all", "all_reduce"):
        assert swept[op]["sizes"] == [4096, 65536] and all(t > 0 for t in swept[op]["seconds"]), swept[op]


def test_the_alltoall_fit_on_links_that_follow_the_formulas():
    """Times drawn from the formulas themselves: the fit finds the link again, and predicts no error."""
    n, step, beta = 4, 20e-6, 1e-9
    sizes = [4096 * 2 ** i for i in range(14)]
    line = {"all_to_all": theory.alltoall_time(np.array(sizes), n, step, beta),
            "all_reduce": theory.ring_allreduce_time(np.array(sizes), n, step, beta)}
    fit = analysis.fit_alltoall({op: {"sizes": sizes, "seconds": list(t)} for op, t in line.items()}, n)
    np.testing.assert_allclose(fit.errors, 0, atol=1e-9)
    assert fit.busbw["all_to_all"] == pytest.approx(1 / beta) == pytest.approx(fit.busbw["all_reduce"])
    assert fit.large_ratio == pytest.approx(0.5, rel=0.01)  # bandwidth-bound: half the bytes
    with pytest.raises(ValueError, match="same sizes"):
        analysis.fit_alltoall({"all_to_all": {"sizes": [1]}, "all_reduce": {"sizes": [2]}}, 2)


def test_the_equality_recipe_runs_under_the_real_torchrun_cli():
    summary = torchrun_json(2, "experts.ep_equality", "--batch", "2")
    assert summary["rank"] == 0 and summary["n"] == 2 and summary["max_gap"] < 1e-5
    assert math.isfinite(summary["loss"])

"""Model and pipeline parallelism (chapters 3.2, 5.3): the topology, the bubble formulas,
the schedules' pure parts, and two real multi-process runs checked against the unsplit model."""
import math

import pytest
import torch

import helpers
from helpers import theory
from helpers.models import ThreeLayerMLP
from helpers import analysis, data, models
from helpers.article import ModelParallelModel
from helpers.probes.model_parallel import forward_backward, train_unsplit
from helpers.recipes import model_parallel as mpar
from helpers.recipes import model_parallel_training
from helpers.topology import Topology


# --- Topology --------------------------------------------------------------------------

def test_topology_checks_the_product_against_the_world_size():
    assert Topology(dp=2, pp=2).check(4).world_size == 4
    with pytest.raises(ValueError, match="dp \\* pp = 3 \\* 2 = 6"):
        Topology(dp=3, pp=2).check(4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            Topology(dp=bad, pp=1)


def test_topology_coordinates_are_a_bijection_and_groups_partition_the_ranks():
    topo = Topology(dp=3, pp=2)
    coords = [topo.coords(r) for r in range(6)]
    assert len(set(coords)) == 6
    assert all(topo.rank(*topo.coords(r)) == r for r in range(6))
    pipelines = [topo.stage_ranks(d) for d in range(3)]
    replicas = [topo.replica_ranks(s) for s in range(2)]
    assert sorted(sum(pipelines, [])) == list(range(6)) == sorted(sum(replicas, []))
    assert pipelines[0] == [0, 3] and replicas[1] == [3, 4, 5]  # pp outer, dp inner
    with pytest.raises(ValueError):
        topo.coords(6)


# --- Theory ----------------------------------------------------------------------------

def test_bubble_formulas():
    assert theory.bubble_fraction(4, 1) == pytest.approx(3 / 4)  # naive MP: 1/p busy
    assert theory.bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert theory.pipeline_utilization(2, 4) == pytest.approx(0.8)
    assert theory.pipeline_speedup(5, 1) == pytest.approx(1.0)
    assert theory.pipeline_speedup(2, 10**6) == pytest.approx(2.0, rel=1e-5)
    assert theory.naive_mp_utilization([1, 1, 1, 1]) == pytest.approx([0.25] * 4)
    assert theory.naive_mp_utilization([3, 1]) == pytest.approx([0.75, 0.25])


@pytest.mark.parametrize("p,b", [(4, 0.1), (2, 0.2), (8, 0.05), (3, 0.5), (2, 0.999)])
def test_micro_batches_for_bubble_is_the_smallest_that_works(p, b):
    m = theory.micro_batches_for_bubble(p, b)
    assert theory.bubble_fraction(p, m) <= b + 1e-12
    assert m == 1 or theory.bubble_fraction(p, m - 1) > b
    assert theory.micro_batches_for_bubble(4, 0.1) == 27


# --- The models ------------------------------------------------------------------------

def test_article_class_on_cpu_equals_the_unsplit_model():
    x, y = data.first_batch(16)
    torch.manual_seed(3)
    split = forward_backward(ModelParallelModel("cpu", "cpu"), x, y)
    torch.manual_seed(3)
    whole = forward_backward(ThreeLayerMLP(), x, y)
    torch.testing.assert_close(split["out"], whole["out"], rtol=0, atol=0)
    for name in whole["grads"]:
        torch.testing.assert_close(split["grads"][name], whole["grads"][name], rtol=0, atol=0)


def test_balanced_mlp_has_equal_stages():
    model = models.balanced_mlp(4, width=784, layers_per_stage=2)
    work = [models.linear_macs(s) for s in model]
    assert max(work) / min(work) < 1.02  # only the 10-way head differs
    assert model(data.first_batch(3)[0]).shape == (3, 10)
    first, second = ThreeLayerMLP().stages()
    share = models.linear_macs(first) / (models.linear_macs(first) + models.linear_macs(second))
    assert 0.85 < share < 0.86  # the article's cut is lopsided


def test_utilization_and_overlap_of_spans():
    a = [("F", 0, 0.0, 1.0), ("B", 0, 3.0, 4.0)]
    b = [("F", 0, 1.0, 3.0)]
    assert analysis.window([a, b]) == (0.0, 4.0)
    assert analysis.utilization([a, b]) == pytest.approx([0.5, 0.5])
    assert analysis.overlap_seconds(a, b) == 0.0
    assert analysis.overlap_seconds(a, [("F", 1, 0.5, 3.5)]) == pytest.approx(1.0)


def test_replica_batches_split_each_epoch_between_replicas():
    n, bs = 101, 8
    r0 = data.replica_batches(n, bs, 2, seed=1, dp=2, dp_rank=0)
    r1 = data.replica_batches(n, bs, 2, seed=1, dp=2, dp_rank=1)
    assert [len(b) for b in r0] == [len(b) for b in r1]  # equal batches: mean of means is the mean
    per_epoch = math.ceil(math.ceil(n / 2) / bs)
    epoch0 = torch.cat(r0[:per_epoch] + r1[:per_epoch])
    assert set(epoch0.tolist()) == set(range(n))  # every sample; one duplicate pads 101 to 102
    assert not torch.equal(torch.cat(r0[:per_epoch]), torch.cat(r0[per_epoch:]))  # set_epoch reshuffles
    glob = data.global_batches(n, bs, 2, seed=1, dp=2)
    assert all(torch.equal(g, torch.cat([a, b])) for g, a, b in zip(glob, r0, r1))
    assert len(data.replica_batches(n, bs, 2, seed=1, max_steps=3)) == 3


# --- Real runs -------------------------------------------------------------------------

def test_split_across_processes_equals_the_unsplit_model():
    """Naive and GPipe (with a micro-batch count that does not divide the batch)."""
    ranks = helpers.launch(mpar.split_step, nprocs=2, batch_size=10, micro_batches=[1, 3], show=None)
    torch.manual_seed(0)
    whole = forward_backward(ThreeLayerMLP(), *data.first_batch(10))
    for m in (1, 3):
        torch.testing.assert_close(ranks[1]["runs"][m]["out"], whole["out"])
        assert ranks[1]["runs"][m]["loss"] == pytest.approx(whole["loss"], rel=1e-5)
        grads = {**ranks[0]["runs"][m]["grads"], **ranks[1]["runs"][m]["grads"]}
        assert set(ranks[0]["runs"][m]["grads"]) == {"layer1.weight", "layer1.bias"}
        assert grads.keys() == whole["grads"].keys()
        for name, g in grads.items():
            torch.testing.assert_close(g, whole["grads"][name])


def test_hybrid_2x2_trains_like_the_unsplit_model_on_the_global_batch():
    ranks = helpers.launch(model_parallel_training.train, nprocs=4, dp=2, batch_size=16, max_steps=6, show=None)
    assert [(r["dp_rank"], r["pp_rank"]) for r in ranks] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert ranks[0]["dp_group"] == [0, 1] and ranks[0]["pp_group"] == [0, 2]
    ref = train_unsplit(batch_size=16, dp=2, max_steps=6)
    torch.testing.assert_close(torch.tensor(analysis.replica_mean_losses(ranks)),
                               torch.tensor(ref["losses"]))
    for d in (0, 1):
        state = analysis.assemble(ranks, d)
        assert state.keys() == ref["state"].keys()
        for k in state:
            torch.testing.assert_close(state[k], ref["state"][k])


def test_schedule_timeline_records_every_span_and_naive_never_overlaps():
    ranks = helpers.launch(mpar.schedule_timeline, nprocs=2, micro_batches=[1, 3], steps=2,
                           batch_size=12, width=32, show=None)
    for r in ranks:
        for m in (1, 3):
            kinds = [s[0] for s in r["runs"][m]]
            assert kinds.count("F") == kinds.count("B") == 2 * m
    summary = analysis.summarize_schedules(ranks)
    assert summary[1]["overlap_s"] == 0.0
    assert sum(summary[1]["utilization"]) <= 1.0 + 1e-9
    naive_s, unsplit_s = ranks[0]["naive_vs_unsplit_s"]
    assert naive_s > 0 and unsplit_s > 0 and ranks[1]["naive_vs_unsplit_s"] is None

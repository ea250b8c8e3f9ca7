"""Data parallelism (chapter 3.1): the sample plan, the overlap measure, and real runs checked
against one process training on the global batch."""
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import helpers
from helpers import data
from helpers.analysis import hidden_fraction, step_ratios, summarize_timeline
from helpers.data import batch_plan
from helpers.probes.data_parallel import train_single
from helpers.recipes import data_parallel as dp


def test_batch_plan_is_what_each_ranks_loader_yields_epoch_after_epoch():
    n, world, batch = 50, 3, 4
    plan = batch_plan(n, world, batch, steps=10)  # 4 full batches per epoch: crosses 2 epochs
    dataset = TensorDataset(torch.arange(n))
    for rank in range(world):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=0)
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True)
        seen = []
        for epoch in range(3):
            sampler.set_epoch(epoch)
            seen += [b[0].tolist() for b in loader]
        assert [step[rank] for step in plan] == seen[:10]


def test_sampler_pads_with_duplicates_and_set_epoch_reshuffles():
    plan = [list(DistributedSampler(range(10), num_replicas=3, rank=r, seed=0)) for r in range(3)]
    flat = sum(plan, [])
    assert len(flat) == 12 and set(flat) == set(range(10))  # 2 samples appear twice
    s = DistributedSampler(range(10), num_replicas=3, rank=0, seed=0)
    first = list(s)
    assert list(s) == first  # no set_epoch: the same order again
    s.set_epoch(1)
    assert list(s) != first


def test_batch_plan_refuses_a_data_set_too_small_for_one_batch():
    with pytest.raises(ValueError, match="no full batch"):
        batch_plan(10, 3, 8, steps=1)


def test_hidden_fraction_merges_overlapping_intervals():
    assert hidden_fraction([(0, 2), (1, 3), (5, 6)], compute_end=2.5) == 2.5 / 4
    assert hidden_fraction([(3, 4)], compute_end=3) == 0
    assert hidden_fraction([], compute_end=1) == 0


def test_naive_allreduce_and_ddp_equal_one_process_on_the_global_batch():
    steps = 4
    naive = helpers.launch(dp.train, nprocs=2, mode="naive", steps=steps, show=None)
    ddp = helpers.launch(dp.train, nprocs=2, mode="ddp", steps=steps, show=None)
    single = train_single(world_size=2, steps=steps)
    plan = batch_plan(len(data.load()), 2, 32, steps)
    for run in (naive, ddp):
        assert [r["indices"] for r in run] == [[s[r] for s in plan] for r in range(2)]
        torch.testing.assert_close(run[0]["params"], run[1]["params"], rtol=0, atol=0)
        torch.testing.assert_close(run[0]["params"], single["params"])


def test_no_sync_accumulation_equals_one_process_and_all_reduces_once_per_step():
    k, steps = 3, 3
    ranks = helpers.launch(dp.accumulate, nprocs=2, micro_batches=k, steps=steps, model="simple", show=None)
    single = train_single(world_size=2, model="simple", steps=steps, batch_size=16, accumulate=k)
    runs = ranks[0]["runs"]
    for run in runs.values():
        torch.testing.assert_close(run["params"], single["params"])
    # After the first step (DDP rebuilds its buckets then), syncing every micro-batch costs k times as much.
    assert [k * c for c in runs["no_sync"]["calls"][1:]] == runs["every micro-batch"]["calls"][1:]
    assert [k * b for b in runs["no_sync"]["bytes"]] == runs["every micro-batch"]["bytes"]


def test_summarize_timeline_takes_medians_over_ranks_and_steps():
    def run(seconds, hidden):
        steps = [{"seconds": s, "backward": s / 2, "comm": s / 4, "hidden": h} for s, h in zip(seconds, hidden)]
        return {"steps": steps, "comm_events": [("all_reduce", 8, 0.0, 1.0)] * 3}
    ranks = [{"runs": {"v": run([0.1, 0.3], [0.2, 0.4])}}, {"runs": {"v": run([0.2, 0.9], [0.5, 0.6])}}]
    s = summarize_timeline(ranks)["v"]
    assert s["buckets"] == 3
    # The median of 4 values is the mean of the middle two: (0.2 + 0.3) / 2 s.
    assert abs(s["step_ms"] - 250) < 1e-9 and abs(s["backward_ms"] - 125) < 1e-9
    assert abs(s["hidden"] - 0.45) < 1e-12


def test_step_ratios_pair_steps_and_sum_the_ranks_for_both_recipes_shapes():
    # timeline's shape: a dict per step. Step 1: (3 + 1) / (1 + 1); step 2: (6 + 2) / (2 + 2).
    def run(comms):
        return {"steps": [{"comm": c} for c in comms]}
    ranks = [{"runs": {"slow": run([3, 6]), "fast": run([1, 2])}}, {"runs": {"slow": run([1, 2]), "fast": run([1, 2])}}]
    assert step_ratios(ranks, "slow", "fast") == [2.0, 2.0]
    # accumulate's shape: a list per measure.
    acc = [{"runs": {"every": {"seconds": [4.0, 9.0]}, "no_sync": {"seconds": [1.0, 3.0]}}}] * 2
    assert step_ratios(acc, "every", "no_sync", "seconds") == [4.0, 3.0]

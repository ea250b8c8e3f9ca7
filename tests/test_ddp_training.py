"""Chapter 5.1's helpers: the live loss figure, and the article's setup run as written."""
import os

import pytest
import torch

import helpers
from helpers import analysis, devices
from helpers.machine import this as this_machine
from helpers.cluster import NodeRun
from helpers.displays import LiveLoss
from helpers.recipes import ddp_mnist

os.environ.setdefault("HELPERS_OFFLINE", "1")


def test_live_loss_collects_every_record_and_draws_only_in_a_notebook():
    live = LiveLoss(every=0.0)
    for step in range(1, 6):
        live({"step": step, "total": 5, "loss": 1.0 / step})
    live({"step": 6, "total": 5, "accuracy": 0.9})  # no loss in it: ignored
    live.finish()
    assert live.steps == [1, 2, 3, 4, 5] and live.values[-1] == pytest.approx(0.2)
    assert live.draws == 0  # no IPython kernel here: it only collects
    line = live.figure().axes[0].lines[0]
    assert list(line.get_xdata()) == live.steps and list(line.get_ydata()) == live.values


def test_train_reports_where_each_rank_runs_and_times_every_step():
    ranks = helpers.launch(ddp_mnist.train, nprocs=2, epochs=1, show=None)
    assert [r["local_rank"] for r in ranks] == [0, 1]
    assert ranks[0]["device"] == str(devices.for_rank(this_machine().backend(2)))  # cpu unless 2 GPUs
    assert len(ranks[0]["step_seconds"]) == ranks[0]["steps"] and min(ranks[0]["step_seconds"]) > 0
    assert ranks[0]["accuracy"] == ranks[1]["accuracy"]  # all_reduce: the same number everywhere


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="the article's setup works with 2 GPUs")
def test_article_setup_fails_without_gpus():
    with pytest.raises(helpers.RankError, match="GPU"):
        helpers.launch(ddp_mnist.run_article_setup, nprocs=2, show=None)


def test_an_error_leaves_the_group_alive_unless_destroyed_in_finally():
    article = helpers.launch(ddp_mnist.failure_leftovers, False, nprocs=2, show=None)
    fixed = helpers.launch(ddp_mnist.failure_leftovers, True, nprocs=2, show=None)
    for r in article:
        assert r["initialized"] and r["connections_after"] > r["connections_before"]
        assert "twice" in r["next_init_error"]
    for r in fixed:
        assert not r["initialized"] and r["connections_after"] == r["connections_before"]


def test_rank_0s_printed_result_is_found_on_whichever_node_holds_it():
    # the c10d rendezvous orders agents by address and process id: node 1 may well get RANK 0
    nodes = [NodeRun(["a"], 0, "rank 1 of 2: LOCAL_RANK 0\n"),
             NodeRun(["b"], 0, 'rank 0 of 2: LOCAL_RANK 0\nstep 1/2\n{\n  "steps": 2,\n  "world_size": 2\n}\n')]
    assert analysis.printed_result(nodes) == {"steps": 2, "world_size": 2}
    with pytest.raises(ValueError, match="no node printed"):
        analysis.printed_result(nodes[:1])


def test_where_a_run_ran_and_what_the_predicted_ratio_says():
    assert analysis.ran_on({"device": "cpu", "backend": "gloo", "world_size": 2}) == "over gloo on the CPU"
    assert analysis.ran_on({"device": "cuda:0", "backend": "nccl", "world_size": 2}) == "over NCCL on 2 GPUs"
    assert analysis.ran_on({"device": "cuda:0", "backend": "nccl", "world_size": 1}) == "over NCCL on a GPU"
    said = [analysis.second_rank_verdict(r) for r in (0.5, 1.4, 1.7, 1.9)]
    assert "barely pays" in said[0] and "nearly doubles" in said[3]
    assert "in part" in said[1] and "in part" in said[2]  # 1.7 is not "nearly" 2

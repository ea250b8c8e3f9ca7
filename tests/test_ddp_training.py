"""Chapter 5.1's helpers: the live loss figure, and the article's setup run as written."""
import os

import pytest
import torch

import helpers
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
    assert [r["local_rank"] for r in ranks] == [0, 1] and ranks[0]["device"] == "cpu"
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

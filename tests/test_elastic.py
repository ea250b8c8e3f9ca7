"""Chapter 7.1: the elastic agent's restarts, through helpers.launch, %%torchrun and the torchrun CLI.

A restarted job resumes from chapter 5.4's checkpoint and must equal an uninterrupted run, loss
for loss and weight for weight; every trial goes through faults_kit's leak check.
"""
import os
import shutil

import psutil
import pytest
import torch
from faults_kit import TRIALS, private_tmp, run_trials  # noqa: F401 - private_tmp is a fixture

from helpers import RankError, analysis, checkpoint, launch, machine, restarts
from helpers.launch import SEPARATE_STORE
from helpers.recipes import elastic

RUN = dict(steps=30, save_every=10)  # a failure after step 17 resumes from step 10's checkpoint


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Also the warm-up: the forkserver a launch keeps is then in every trial's leak snapshot."""
    return launch(elastic.train, str(tmp_path_factory.mktemp("reference")), nprocs=2, show=None, **RUN)


def _same_run(got: list[dict], ref: list[dict]) -> None:
    for g, r in zip(got, ref):
        assert g["losses"] == r["losses"], (g["losses"], r["losses"])
        assert all(torch.equal(g["state"][k], r["state"][k]) for k in r["state"])


def test_a_restarted_job_resumes_exactly_ten_times_out_of_ten(uninterrupted, tmp_path):
    def trial(i):
        how = ("exception", "sigkill")[i % 2]
        got = launch(elastic.train, str(tmp_path / f"trial{i}"), nprocs=2, show=None, max_restarts=1,
                     fail_at=17, fail_rank=i % 2, how=how, **RUN)
        assert [g["restart"] for g in got] == [1, 1] and got[0]["resumed_from"] == 10, got[0]["resumed_from"]
        _same_run(got, uninterrupted)
        assert SEPARATE_STORE not in os.environ  # the launcher's setting went with the launch
    run_trials("13. a rank fails, the agent restarts the job, it resumes exactly", trial)


def test_a_job_that_fails_every_attempt_reports_its_last_attempt(uninterrupted):
    def trial(i):
        restarts_ = i % 3  # 0, 1, 2: the error is the last attempt's, whichever that is
        with pytest.raises(RankError) as info:
            launch(elastic.fail_always, nprocs=2, show=None, max_restarts=restarts_)
        assert (info.value.rank, info.value.message) == (1, f"rank 1 failed in attempt {restarts_}")
    run_trials("14. a rank fails in every attempt", trial, n=3)


def test_the_agents_store_outlives_the_round_and_a_store_of_the_ranks_own_does_not(uninterrupted):
    for shared in (True, False):
        ranks = restarts.store_memory(shared)
        assert [(r["restart"], r["shared"]) for r in ranks] == [(1, shared)] * 2, ranks
        assert [r["dead_round_keys"] for r in ranks] == [[0, 1] if shared else []] * 2, ranks
    assert SEPARATE_STORE not in os.environ


@pytest.mark.parametrize("lost, said", [(0, "did not spring"), (1, "in 1 of 3 trials"), (3, "in all 3 trials")])
def test_the_traps_sentence_says_what_happened(lost, said):
    from helpers.sentences import beyond_the_article
    text = beyond_the_article.elastic_trap(3, lost, 8.2)
    assert said in text and (("failed" in text) is (lost > 0))
    with pytest.raises(ValueError):
        beyond_the_article.elastic_trap(3, 4)


def test_the_callers_store_setting_stands_and_the_magic_restarts_too(uninterrupted, monkeypatch, capsys):
    from helpers.magic import torchrun
    monkeypatch.setenv(SEPARATE_STORE, "1")
    cell = ("import os\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
            "n = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
            "if n == 0 and dist.get_rank() == 1:\n    raise SystemExit('fail once')\n"
            "print('attempt', n, 'rank', dist.get_rank())\ndist.barrier()\ndist.destroy_process_group()\n")
    # the barrier: without it rank 1 can finish, destroy its group and exit while rank 0, on a busy
    # machine, is still completing gloo's full mesh with it ("Connection closed by peer", once in CI)
    torchrun("-n 2 --show all --max-restarts 1", cell)
    out = capsys.readouterr().out
    assert "[rank0] attempt 1 rank 0" in out and "[rank1] attempt 1 rank 1" in out, out
    assert os.environ[SEPARATE_STORE] == "1"


def _nothing_left() -> bool:
    return not [p for p in psutil.Process().children(recursive=True)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "torch.distributed.run" in " ".join(p.cmdline())]


def test_the_torchrun_cli_restarts_and_resumes_exactly(uninterrupted, tmp_path):
    """No TORCH_DISABLE_SHARE_RDZV_TCP_STORE here: helpers.dist keys its store by attempt."""
    assert SEPARATE_STORE not in os.environ
    cli = restarts.torchrun_restart(str(tmp_path), fail_at=17, how="sigkill", **RUN)
    assert "--max-restarts" in cli.argvs[0] and cli.nodes[0].returncode == 0
    assert (cli.summary["restart"], cli.summary["resumed_from"], cli.summary["steps"]) == (1, 10, 30), cli.summary
    assert cli.saved["extra"]["losses"] == [r["losses"] for r in uninterrupted]
    assert analysis.same_state(cli.saved["model"], uninterrupted[0]["state"])
    assert _nothing_left()


def test_a_job_that_loses_a_node_goes_on_with_the_other(tmp_path):
    """--nnodes 1:2: node 1's rank kills its agent after step 17; node 0 restarts alone, at world size 1.
    Node 1 starts 3 s after node 0, later than the 2 s of last call the chapter once gave it, and still joins round 0."""
    node = restarts.lose_a_node(str(tmp_path / "node"), fail_at=17, late=3, **RUN)
    assert [n.returncode for n in node.nodes] == [0, -9], node.nodes[0].stdout[-3000:]
    s = node.summary
    assert (s["world_size"], s["restart"], s["resumed_from"], s["steps"]) == (1, 1, 10, 30), s
    (tmp_path / "alone").mkdir()
    shutil.copy(tmp_path / "node" / "step_000010.pt", tmp_path / "alone")
    one = launch(elastic.train, str(tmp_path / "alone"), nprocs=1, backend="gloo", show=None,
                 threads=machine.this().threads_per_rank(2), **RUN)[0]
    assert node.saved["world_size"] == 1 and node.saved["extra"]["losses"] == [one["losses"]]
    assert analysis.same_state(node.saved["model"], one["state"])
    assert _nothing_left()


@pytest.mark.parametrize("how, said", [("node", "not started by one"), ("reboot", "crash_with is one of")])
def test_a_node_is_lost_only_under_a_torchrun_agent_and_a_crash_is_one_the_recipe_knows(tmp_path, how, said):
    with pytest.raises(RankError, match=said):
        launch(elastic.train, str(tmp_path), nprocs=1, show=None, fail_at=1, fail_rank=0, how=how, **RUN)


def test_an_elastic_resume_at_another_world_size_carries_the_model_and_the_step_on(uninterrupted, tmp_path):
    """What a job that lost a node meets: chapter 5.4's checkpoint of 2 ranks, resumed by 1."""
    launch(elastic.train, str(tmp_path), nprocs=2, show=None, **{**RUN, "steps": 20})
    saved = checkpoint.read(checkpoint.latest(tmp_path))
    with pytest.warns(UserWarning, match="saved by 2 ranks and is loaded by 1"):
        alone = elastic.train(str(tmp_path), **RUN)  # one plain process: a world of one
    assert (alone["resumed_from"], alone["steps"], alone["first_step"]) == (20, 30, 21), alone
    assert len(alone["losses"]) == 10  # this rank's own past is not in a 2-rank checkpoint
    assert not all(torch.equal(alone["state"][k], saved["model"][k]) for k in saved["model"])  # it trained on

"""helpers.launch: real multi-process runs, failures, timeouts, interrupts and bad input."""
import os
import sys
import time

import pytest
import torch

import helpers
from helpers import LaunchError, LaunchTimeout, RankError, launch
from helpers.machine import this as this_machine
from helpers.recipes import smoke


def test_results_come_back_per_rank_rank0_first():
    results = launch(smoke.allreduce_rank, nprocs=2)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["sum"] == 1.0 and r["backend"] == this_machine().backend(2) for r in results)
    assert all(r["threads"] == this_machine().threads_per_rank(2) for r in results)
    assert results[0]["pid"] != results[1]["pid"] != os.getpid()


def test_more_ranks_than_cores_run_with_a_warning():
    n = this_machine().cores + 1
    with pytest.warns(helpers.SharedCoresWarning, match=f"{n} ranks share {this_machine().cores} CPU core"):
        results = launch(smoke.allreduce_rank, nprocs=n)
    assert [r["sum"] for r in results] == [sum(range(n))] * n


def test_tensors_come_back():
    results = launch(smoke.return_tensor, nprocs=2, n=3)
    assert torch.equal(results[1]["tensor"], torch.tensor([0, 2, 4]))


def test_exception_names_the_rank_and_carries_its_traceback():
    with pytest.raises(RankError) as info:
        launch(smoke.fail_on, 1, nprocs=2, message="bad batch 7")
    err = info.value
    assert (err.rank, err.exc_type, err.message) == (1, "ValueError", "bad batch 7")
    assert "rank 1 raised ValueError: bad batch 7" in str(err)
    assert "smoke.py" in err.remote_traceback and "fail_on" in err.remote_traceback
    assert "ChildFailedError" not in str(err)


def test_hang_in_collective_times_out_clearly():
    # 10 s: enough for two busy cores to start both ranks and let rank 1 say where it is.
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(smoke.hang_in_collective, nprocs=2, timeout=10)
    assert time.monotonic() - start < 10 + 15
    assert "timed out after 10 s" in str(info.value)
    assert "sleeping instead" in str(info.value)  # where rank 1 got to
    # each rank's stack, taken before the kill: rank 0 waits in the barrier rank 1 never joins
    assert str(info.value.where[0]).startswith("in barrier, called from smoke.py line"), str(info.value)
    assert str(info.value.where[1]).startswith("in no collective, at smoke.py line"), str(info.value)
    assert "Where each rank was: rank 0: in barrier" in str(info.value)


def test_next_launch_works_after_failure_and_timeout():
    with pytest.raises(RankError):
        launch(smoke.fail_on, 0, nprocs=2)
    with pytest.raises(LaunchTimeout):
        launch(smoke.hang_in_collective, nprocs=2, timeout=3)
    assert launch(smoke.allreduce_rank, nprocs=2)[1]["sum"] == 1.0


def test_output_streams_tagged_by_rank(capsys):
    launch(smoke.count, nprocs=2, steps=3)
    out = capsys.readouterr().out
    assert "[rank0] done on rank 0" in out and "[rank1]" not in out
    launch(smoke.count, nprocs=2, steps=3, show="all")
    out = capsys.readouterr().out
    assert "[rank0] done on rank 0" in out and "[rank1] done on rank 1" in out
    launch(smoke.count, nprocs=2, steps=3, show=None)
    assert "[rank" not in capsys.readouterr().out


def test_progress_reaches_the_callback_in_order():
    seen = []
    launch(smoke.count, nprocs=2, steps=7, on_progress=seen.append)
    assert [r["step"] for r in seen] == list(range(1, 8))
    assert seen[-1]["total"] == 7 and seen[-1]["value"] == 3.5


def local_function():
    return 1


@pytest.mark.parametrize("kwargs, message", [
    ({"nprocs": 0}, "nprocs must be an integer >= 1"),
    ({"nprocs": "2"}, "nprocs must be an integer >= 1"),
    ({"backend": "nccl"}, "needs 2 GPUs"),
    ({"backend": "mpi"}, "backend must be"),
    ({"timeout": 0}, "timeout must be a positive"),
    ({"show": "0"}, "show must be a rank in 0..1"),
    ({"show": 2}, "show must be a rank in 0..1"),
    ({"show": [0, 5]}, "show must be a rank in 0..1"),
    ({"show": True}, "show must be a rank in 0..1"),
])
def test_bad_arguments_get_one_clear_line(kwargs, message):
    if kwargs.get("backend") == "nccl" and this_machine().n_gpus >= 2:
        pytest.skip("this machine has the GPUs nccl needs")
    with pytest.raises(LaunchError, match=message) as info:
        launch(smoke.allreduce_rank, **kwargs)
    assert "\n" not in str(info.value)


def test_function_from_a_notebook_cell_is_refused():
    def inner():
        return 1
    with pytest.raises(LaunchError, match="local scope.*%%torchrun"):
        launch(inner)
    notebook_fn = lambda: 1  # noqa: E731
    notebook_fn.__module__ = "__main__"
    with pytest.raises(LaunchError, match="defined in the notebook"):
        launch(notebook_fn)


def test_unpicklable_arguments_are_refused():
    import threading
    with pytest.raises(LaunchError, match="cannot be sent"):
        launch(smoke.fail_on, threading.Lock())


# SIGINT to the launching process and SIGKILL of it: tests/test_faults_kernel.py, ten trials each.


def test_torchrun_magic_runs_the_cell_in_n_ranks(capsys):
    from helpers.magic import torchrun
    torchrun("-n 2 --show all", "import os\nprint('hello from', os.environ['RANK'])\n")
    out = capsys.readouterr().out
    assert "[rank0] hello from 0" in out and "[rank1] hello from 1" in out
    for bad in ("--bogus", "--show x", "--show 0,x", "-n two"):
        with pytest.raises(ValueError, match="usage: %%torchrun"):
            torchrun(bad, "pass")


def test_package_exports():
    module = sys.modules["helpers.launch"]  # the submodule, which the function shadows on the package
    assert helpers.launch is module.launch and helpers.LaunchError is module.LaunchError
    assert set(helpers.__all__) >= {"launch", "LaunchError", "LaunchTimeout", "RankError"}


def test_log_tail_keeps_a_character_cut_between_two_polls(tmp_path, capsys):
    from helpers import protocol
    from helpers.live import LogTail
    log = protocol.rank_log(tmp_path, 0)
    data = "分布式训练 ✓\n".encode()
    tail = LogTail(tmp_path, {0})
    for cut in (1, 4, len(data)):  # inside 分, inside 布, the rest
        with open(log, "ab") as f:
            f.write(data[:cut])
        data = data[cut:]
        tail.poll()
    assert capsys.readouterr().out == "[rank0] 分布式训练 ✓\n"


def test_log_tail_reads_a_chunk_at_a_time_and_cuts_a_line_without_end(tmp_path, capsys):
    from helpers import protocol
    from helpers.live import LogTail
    chunk = LogTail.CHUNK
    protocol.rank_log(tmp_path, 0).write_bytes(b"x" * (10 * chunk) + b"\nend\n")
    tail = LogTail(tmp_path, {0})
    tail.poll()  # at most PER_POLL a rank: a rank that never stops printing cannot stall the cell
    assert tail.offsets[0] == LogTail.PER_POLL
    tail.poll(most=None)
    lines = capsys.readouterr().out.splitlines()
    pieces = [ln.removeprefix("[rank0] ") for ln in lines[:-1]]
    assert lines[-1] == "[rank0] end" and len(pieces) > 1 and max(map(len, pieces)) <= 2 * chunk
    assert "".join(pieces) == "x" * (10 * chunk)


def test_a_rank_can_set_up_a_second_group_after_the_first():
    results = launch(smoke.two_groups_in_a_row, nprocs=2, timeout=60)
    assert [r["sums"] for r in results] == [[2.0, 2.0], [2.0, 2.0]]


def test_a_plain_process_is_a_group_of_one_without_network():
    assert smoke.two_groups_in_a_row()["sums"] == [1.0, 1.0]



def test_a_result_that_cannot_travel_back_gets_a_clear_error():
    with pytest.raises(RankError, match="cannot be sent back to the launcher") as info:
        launch(smoke.return_unpicklable, nprocs=2, show=None)
    assert info.value.exc_type == "TypeError"


def _run_dirs() -> set:
    import tempfile
    from pathlib import Path
    return set(Path(tempfile.gettempdir()).glob("helpers-launch-*"))


def test_launch_removes_its_folder_and_restores_the_loggers_whatever_happens(tmp_path, monkeypatch):
    import logging
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # other launches on this machine do not count
    names = ("torch.distributed.elastic", "torch.multiprocessing")
    for lg in names:
        logging.getLogger(lg).setLevel(logging.INFO)
    before = _run_dirs()
    with pytest.raises(RankError):
        launch(smoke.fail_on, 0, nprocs=2, show=None)
    with pytest.raises(LaunchTimeout):
        launch(smoke.hang_in_collective, nprocs=2, timeout=3, show=None)
    assert _run_dirs() == before
    assert [logging.getLogger(lg).level for lg in names] == [logging.INFO] * 2

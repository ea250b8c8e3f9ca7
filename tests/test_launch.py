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


def test_a_stop_event_set_from_another_thread_kills_the_ranks():
    """A panel's Stop button: the kernel is free while the job runs in a thread, and the button sets the event."""
    import threading
    from helpers.launch import LaunchStopped, worker_processes
    stop, seen = threading.Event(), []

    def on_progress(rec):
        seen.append(rec["step"])
        if rec["step"] == 3:
            threading.Timer(0.2, stop.set).start()
    start = time.monotonic()
    with pytest.raises(LaunchStopped, match=r"stopped after \d+ steps; every rank was killed") as info:
        launch(smoke.count, nprocs=2, steps=10_000, delay=0.05, stop=stop, on_progress=on_progress, progress=False)
    assert time.monotonic() - start < 60 and 3 <= seen[-1] < 10_000  # it ran, and it did not run to the end
    assert isinstance(info.value, LaunchError) and not worker_processes()
    assert launch(smoke.allreduce_rank, nprocs=2)[1]["sum"] == 1.0  # and the next launch runs
    with pytest.raises(LaunchError, match="stop must be a threading.Event"):
        launch(smoke.allreduce_rank, stop=True)


def local_function():
    return 1


@pytest.mark.parametrize("kwargs, message", [
    ({"nprocs": 0}, "nprocs must be an integer >= 1"),
    ({"nprocs": "2"}, "nprocs must be an integer >= 1"),
    ({"backend": "nccl"}, "needs 2 GPUs"),
    ({"backend": "mpi"}, "backend must be"),
    ({"timeout": 0}, "timeout must be a finite positive"),
    ({"timeout": float("nan")}, "timeout must be a finite positive"),  # compared false with every deadline
    ({"timeout": float("inf")}, "timeout must be a finite positive"),
    ({"timeout": "5"}, "timeout must be a finite positive"),  # was a raw TypeError
    ({"timeout": True}, "timeout must be a finite positive"),
    ({"max_restarts": -1}, "max_restarts must be an integer >= 0"),
    ({"max_restarts": 1.5}, "max_restarts must be an integer >= 0"),
    ({"threads": 0}, "threads must be an integer >= 1"),  # was silently this machine's share
    ({"threads": -2}, "threads must be an integer >= 1"),
    ({"threads": "4"}, "threads must be an integer >= 1"),
    ({"on_progress": "print"}, "on_progress must be a function"),
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


def test_what_is_not_a_function_is_refused():
    with pytest.raises(LaunchError, match="launch\\(\\) runs a function; got 'smoke.count'"):
        launch("smoke.count")


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
    for bad in ("--bogus", "--show x", "--show 0,x", "-n two", "--timeout soon"):
        with pytest.raises(ValueError, match="usage: %%torchrun"):
            torchrun(bad, "pass")


@pytest.mark.parametrize("line, message", [
    ("--timeout nan", "timeout must be a finite positive"),  # float() takes it; the job never timed out
    ("--timeout inf", "timeout must be a finite positive"),
    ("--timeout -1", "timeout must be a finite positive"),
    ("-n 0", "nprocs must be an integer >= 1"),
    ("--max-restarts -1", "max_restarts must be an integer >= 0"),
    ("-n 2 --show 2", "show must be a rank in 0..1"),
])
def test_torchrun_magic_refuses_what_launch_refuses_before_it_writes_the_cell(line, message, monkeypatch):
    import tempfile
    from helpers.magic import torchrun
    monkeypatch.setattr(tempfile, "TemporaryDirectory", None)  # checked before any file is made
    with pytest.raises(LaunchError, match=message) as info:
        torchrun(line, "print('never runs')")
    assert "\n" not in str(info.value)


def test_package_exports():
    module = sys.modules["helpers.launch"]  # the submodule, which the function shadows on the package
    assert helpers.launch is module.launch and helpers.LaunchError is module.LaunchError
    assert set(helpers.__all__) >= {"launch", "LaunchError", "LaunchStopped", "LaunchTimeout", "RankError"}


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


class _GraceClock:
    """protocol's clock: a grace passes at once, and the rank then wakes ``late`` seconds after it."""

    def __init__(self):
        self.now, self.late = 0.0, 0.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + self.late


def _fail_in_torch_distributed(run_dir, monkeypatch, clock, rank: int, at: float, late: float, said: str):
    from helpers import protocol
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv(protocol.ERROR_FILE, str(protocol.error_file(run_dir, rank)))
    clock.now, clock.late = at, late
    protocol.write_error(RuntimeError(said))


@pytest.mark.parametrize("second_said", ["Gloo connectFullMesh failed with timed out connecting: SO_ERROR: "
                                         "Connection refused, remote=[127.0.0.1]:1",
                                         "Read error [127.0.0.1]:2: Connection reset by peer"])
def test_the_rank_that_failed_first_is_named_whichever_wakes_first_from_the_grace(tmp_path, monkeypatch,
                                                                                   second_said):
    """Chapter 7.1's lost round on one core: rank 0's gloo connect fails, rank 1 fails 0.5 ms later, both
    wait out PEER_GRACE, and rank 1 wakes first. Rank 0 is the cause, in either order of writing."""
    from helpers import protocol
    from helpers.launch import _root_cause
    clock = _GraceClock()
    monkeypatch.setattr(protocol, "time", clock)
    monkeypatch.setattr(protocol, "raised_in_torch_distributed", lambda e: True)
    first = ("Gloo connectFullMesh failed with timed out connecting: SO_ERROR: Connection refused, "
             "remote=[127.0.0.1]:3")
    _fail_in_torch_distributed(tmp_path, monkeypatch, clock, 0, at=10.0, late=0.005, said=first)
    _fail_in_torch_distributed(tmp_path, monkeypatch, clock, 1, at=10.0005, late=0.0, said=second_said)
    assert [e["time"] for e in protocol.read_errors(tmp_path)] == [10.0, 10.0005]  # when each caught it
    cause = _root_cause(tmp_path, RuntimeError("the agent's ChildFailedError"))
    assert (cause.rank, cause.message) == (0, first)


def test_a_peer_that_hung_up_is_an_echo_even_when_caught_first(tmp_path, monkeypatch):
    """A rank whose error says its peer hung up heard of the peer's failure, whoever caught theirs first."""
    from helpers import protocol
    from helpers.launch import _root_cause
    clock = _GraceClock()
    monkeypatch.setattr(protocol, "time", clock)
    monkeypatch.setattr(protocol, "raised_in_torch_distributed", lambda e: True)
    _fail_in_torch_distributed(tmp_path, monkeypatch, clock, 1, at=10.0, late=0.0,
                               said="Connection closed by peer [127.0.0.1]:4")
    _fail_in_torch_distributed(tmp_path, monkeypatch, clock, 0, at=10.01, late=0.0,
                               said="Default process group has not been initialized")
    assert [(e["rank"], e["echo"]) for e in protocol.read_errors(tmp_path)] == [(1, True), (0, False)]
    assert _root_cause(tmp_path, RuntimeError("the agent's ChildFailedError")).rank == 0


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


def _listening(pids) -> set[tuple[str, int]]:
    """(ip, port) of every TCP socket the processes listen on."""
    import psutil
    found = set()
    for pid in pids:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
                      if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.parametrize("max_restarts", [0, 1])  # 0: the agent serves MASTER_PORT; 1: each round's rank 0 does
def test_every_store_of_a_running_launch_listens_on_loopback_alone(tmp_path, max_restarts):
    """torch's TCPStore listens on every interface ('::'), unauthenticated; a launch's must not."""
    from helpers.launch import worker_processes
    before, seen, go = _listening([os.getpid()]), {}, tmp_path / "go"

    def look(record):  # rank 0 has joined its group and waits for `go`: every store is up
        if not seen:
            seen["port"] = int(record["master_port"])
            seen["launcher"] = _listening([os.getpid()]) - before
            seen["ranks"] = _listening([p.pid for p in worker_processes()])
        go.touch()

    launch(smoke.hold, str(go), nprocs=2, max_restarts=max_restarts, on_progress=look, show=None)
    assert {ip for ip, _ in seen["launcher"] | seen["ranks"]} == {"127.0.0.1"}, seen
    # Not vacuous: the rendezvous store is the launcher's; MASTER_PORT's is where torch serves it.
    assert len(seen["launcher"]) == 2 - max_restarts, seen
    assert ("127.0.0.1", seen["port"]) in (seen["ranks"] if max_restarts else seen["launcher"]), seen


def test_a_failed_agents_exception_keeps_no_frames_along_either_link():
    """`raise X from Y` inside an except block links a cause and a context; a frame kept on either
    keeps the agent's stores (their ports) open until the garbage collector runs."""
    from helpers.launch import _without_tracebacks

    def fail():
        try:
            try:
                1 / 0
            except ZeroDivisionError as cause:
                try:
                    raise KeyError("context")
                except KeyError:
                    raise ValueError("the agent's error") from cause
        except ValueError as e:
            return e
    e = _without_tracebacks(fail())
    assert isinstance(e.__cause__, ZeroDivisionError) and isinstance(e.__context__, KeyError)
    assert e.__traceback__ is e.__cause__.__traceback__ is e.__context__.__traceback__ is None

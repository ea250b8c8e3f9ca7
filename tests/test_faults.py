"""The launcher under faults, in this process: TRIALS trials a fault, each checked for leaks.

A rank that raises, dies or hangs, a result that cannot travel, 50 MB of output, taken ports,
launches back to back, bad arguments, and the same faults through %%torchrun. The faults that
need a kernel to interrupt or kill are in test_faults_kernel.py; faults_kit.py has the leak check.
"""
import contextlib
import dataclasses
import multiprocessing.forkserver as forkserver
import socket
import threading
import time

import psutil
import pytest
from faults_kit import TRIALS, private_tmp, run_trials  # noqa: F401 - private_tmp is a fixture

from helpers import LaunchError, LaunchTimeout, RankError, launch, plans, protocol
from helpers.machine import Machine
from helpers.machine import this as this_machine
from helpers.probes import launch_faults as faults
from helpers.recipes import smoke


@pytest.fixture(scope="module", autouse=True)
def warm():
    """One launch first, so the forkserver the launcher keeps is in every case's snapshot.

    It is the one process a launch leaves on purpose (with multiprocessing's resource tracker,
    which starts it); the leak check then holds it to the same pid through every trial.
    """
    launch(smoke.allreduce_rank, nprocs=2, show=None)
    kept = {p.pid: " ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)}
    assert forkserver._forkserver._forkserver_pid in kept, kept
    assert all("forkserver import main" in c or "resource_tracker import main" in c for c in kept.values()), kept


def test_a_rank_that_raises_is_named():
    def trial(i):
        with pytest.raises(RankError) as info:
            launch(smoke.fail_on, 1, nprocs=2, show=None, message=f"bad batch {i}")
        assert (info.value.rank, info.value.exc_type, info.value.message) == (1, "ValueError", f"bad batch {i}")
    run_trials("1. a rank raises", trial)


def test_a_rank_killed_by_sigkill_is_named_with_the_signal():
    def trial(i):
        with pytest.raises(RankError) as info:
            launch(faults.killed_after_collective, 1, nprocs=2, show=None)
        assert info.value.rank == 1, str(info.value)  # not rank 0, whose next all_reduce failed
        assert str(info.value) == "rank 1 raised ProcessDied: the process ended with signal SIGKILL"
    run_trials("2. a rank is SIGKILLed mid-run", trial)


def test_a_rank_that_fails_as_it_hangs_up_is_named_not_its_peers_earlier_echo():
    def trial(i):
        with pytest.raises(RankError) as info:
            launch(faults.fails_as_it_hangs_up, i % 2, nprocs=2, show=None)
        assert (info.value.rank, info.value.exc_type) == (i % 2, "ValueError"), str(info.value)
    run_trials("12. a rank fails in torch.distributed as it hangs up on its peer", trial)


def test_a_rank_hung_in_a_collective_times_out():
    def trial(i):
        start = time.monotonic()
        with pytest.raises(LaunchTimeout, match="timed out after 2 s") as info:
            launch(smoke.hang_in_collective, nprocs=2, timeout=2, show=None)
        # The launcher ended the hang, not the process group's own timeout (GROUP_MARGIN_S later): a
        # bound with room for a busy machine's start-up, which the 2 s count only from (CI once took 7.3 s).
        assert time.monotonic() - start < 2 + protocol.GROUP_MARGIN_S
        assert set(info.value.stacks) == {0, 1}, str(info.value)  # each rank's, taken before the kill
    run_trials("3. a rank hangs in a collective (timeout 2 s)", trial)


def test_launches_back_to_back_leave_nothing_growing():
    def trial(i):
        assert [r["sum"] for r in launch(smoke.allreduce_rank, nprocs=2, show=None)] == [1.0, 1.0]
    run_trials("6. 20 launches back to back", trial, n=20)


def _listening_ports(stop: threading.Event, seen: set) -> None:
    me = psutil.Process()
    while not stop.is_set():
        for p in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                seen |= {c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        time.sleep(0.01)


def _occupy(port: int) -> list[socket.socket]:
    """Listen on ``port`` on every IPv4 and IPv6 address, where no one else already does."""
    held = []
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((addr, port))
            s.listen()
            held.append(s)
        except OSError:  # taken already, which serves as well
            s.close()
    return held


def test_taken_ports_do_not_matter():
    """torch's default ports, and every port the previous launch listened on, are taken first."""
    used = set()

    def trial(i):
        taken = {29500, 29400} | used  # MASTER_PORT's and the c10d rendezvous' defaults
        held = [s for port in taken for s in _occupy(port)]
        stop, seen = threading.Event(), set()
        watcher = threading.Thread(target=_listening_ports, args=(stop, seen))
        watcher.start()
        try:
            results = launch(faults.where_it_met, nprocs=2, show=None)
        finally:
            stop.set()
            watcher.join()
            for s in held:
                s.close()
        assert [r["sum"] for r in results] == [1.0, 1.0]
        assert {r["addr"] for r in results} == {"127.0.0.1"} and results[0]["port"] not in taken
        used.clear()
        used.update(seen - taken)
    run_trials("8. the likely ports are taken", trial)


@pytest.mark.parametrize("fn", [faults.return_lambda, faults.return_generator, faults.return_graph_tensor])
def test_a_result_that_cannot_be_pickled_gets_one_clear_error(fn):
    def trial(i):
        with pytest.raises(RankError) as info:
            launch(fn, nprocs=2, show=None)
        err = info.value
        assert err.exc_type == "TypeError" and "\n" not in err.message
        assert err.message.startswith(f"{fn.__name__} returned a value that cannot be sent back to the launcher")
        assert "return tensors, numbers" in err.message
    run_trials(f"9. a rank returns a {fn.__name__.split('_', 1)[1].replace('_', ' ')}", trial)


class CountingCell:
    """Where a cell's output goes, reduced to what a test checks: lines, bytes, the last line."""

    def __init__(self):
        self.lines, self.bytes, self.last = 0, 0, ""

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        self.bytes += len(text)
        if text.strip():
            self.last = text.rstrip("\n").rsplit("\n", 1)[-1]
        return len(text)

    def flush(self) -> None:
        pass


def _peak_rss_growth(fn) -> float:
    """Run ``fn``; return how far above its start this process's RSS went meanwhile, in MB."""
    me, stop = psutil.Process(), threading.Event()
    start = peak = me.memory_info().rss

    def watch():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, me.memory_info().rss)
            time.sleep(0.005)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        fn()
    finally:
        stop.set()
        watcher.join()
    return (peak - start) / 2**20


@pytest.mark.parametrize("show", [None, 0])
def test_a_rank_printing_50_mb_does_not_swamp_the_cell(show):
    def trial(i):
        cell = CountingCell()
        with contextlib.redirect_stdout(cell):
            grew = _peak_rss_growth(lambda: launch(faults.print_megabytes, 50, nprocs=2, show=show, timeout=60))
        assert grew < 200, f"RSS grew by {grew:.0f} MB"
        if show is None:
            assert cell.lines == 0
        else:
            assert cell.lines == 500_001 and cell.last == "[rank0] last line of rank 0", (cell.lines, cell.last)
    run_trials(f"10. a rank prints 50 MB (show={show})", trial)


def in_the_notebook():
    return 1


in_the_notebook.__module__ = "__main__"  # what a function typed in a cell looks like

BAD = [
    ({"nprocs": 0}, "nprocs must be an integer >= 1, got 0"),
    ({"nprocs": -1}, "nprocs must be an integer >= 1, got -1"),
    ({"nprocs": 10_000}, r"nprocs=10000 is more ranks than this machine can hold \(at most \d+ here: .*\); use fewer"),
    ({"backend": "mpi"}, "backend must be 'gloo', 'nccl' or None"),
    ({"max_restarts": -1}, "max_restarts must be an integer >= 0, got -1"),
    ({"max_restarts": 1.5}, "max_restarts must be an integer >= 0, got 1.5"),
    ({"backend": "nccl"}, r"needs 2 GPUs; this machine has \d+\. Use backend=None"),
    ({"fn": in_the_notebook}, "it is defined in the notebook. Define it with def in a module"),
    ({"fn": faults.a_lambda}, "it is a lambda. Define it with def in a module"),
]


def _label(kwargs: dict) -> str:
    return ", ".join(f"{k}={getattr(v, '__name__', v)!r}" for k, v in kwargs.items())


@pytest.mark.parametrize("kwargs, says", BAD, ids=[_label(kw) for kw, _ in BAD])
def test_bad_arguments_get_one_line_that_says_what_to_do_and_start_nothing(kwargs, says):
    if kwargs.get("backend") == "nccl" and this_machine().n_gpus >= 2:
        pytest.skip("this machine has the GPUs nccl needs")
    rest = {k: v for k, v in kwargs.items() if k != "fn"}

    def trial(i):
        start = time.monotonic()
        with pytest.raises(LaunchError, match=says) as info:
            launch(kwargs.get("fn", smoke.allreduce_rank), **rest)
        assert "\n" not in str(info.value) and time.monotonic() - start < 1.0
    run_trials(f"11. bad argument: {_label(kwargs)}", trial)


# --- The same faults through %%torchrun, in an IPython shell ---------------------------------------

@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "helpers")
    yield ip
    InteractiveShell.clear_instance()


RAISES = "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('bad cell')\n"
HANGS = ("import time\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
         "if dist.get_rank() == 1:\n    time.sleep(3600)\ndist.barrier()\n")
# A cell returns nothing: what travels back from it is its exception, and this one cannot be pickled
# (its class lives in the rank's __main__ and it carries a lambda). It travels as text instead.
UNPICKLABLE = "class CellError(Exception):\n    pass\nraise CellError(lambda: 1)\n"


@pytest.mark.parametrize("fault, cell, check", [
    ("1. a rank raises", RAISES, lambda e: isinstance(e, RankError) and (e.rank, e.message) == (1, "bad cell")),
    ("3. a rank hangs in a collective", HANGS, lambda e: isinstance(e, LaunchTimeout) and "timed out after 2 s" in str(e)),
    ("9. a rank raises what cannot be pickled", UNPICKLABLE, lambda e: isinstance(e, RankError) and e.exc_type == "CellError"
                                 and e.message.startswith("<function <lambda>")),
], ids=["raises", "hangs", "unpicklable"])
def test_the_faults_through_the_torchrun_magic(shell, capsys, fault, cell, check):
    def trial(i):
        result = shell.run_cell(f"%%torchrun -n 2 --timeout 2\n{cell}")
        assert check(result.error_in_exec), repr(result.error_in_exec)
        shown = capsys.readouterr().out
        if isinstance(result.error_in_exec, RankError):  # the rank's traceback, not the launcher's
            assert shown.startswith(f"RankError: {result.error_in_exec.args[0]}\n"), shown[:500]
            assert "launch.py" not in shown and "ChildFailedError" not in shown, shown[-2000:]
    run_trials(f"{fault}, through %%torchrun", trial)


# --- The bound on nprocs, on machines this one is not ---------------------------------------------

@pytest.mark.parametrize("m, most", [
    (Machine(cores=2), 16),                                # memory unknown: 8 a core
    (Machine(cores=2, memory=24 * 2**30), 16),            # this book's own machine: the cores bind
    (Machine(cores=64, memory=8 * 2**30), 32),            # a big CPU with little memory: memory binds
    (Machine(cores=1, memory=128 * 2**20), 1),            # never below one rank
    (Machine(cores=16, gpus=("H100",) * 8, memory=2**40), 128),
])
def test_most_ranks_by_hand(m, most):
    assert plans.most_ranks(m) == most
    assert "\n" not in plans.most_ranks_why(m) and f"at most {most} here" in plans.most_ranks_why(m)


@pytest.mark.parametrize("name, m", list(plans.PROFILES.items()), ids=list(plans.PROFILES))
def test_the_bound_refuses_no_launch_of_the_book(name, m):
    for each in (m, dataclasses.replace(m, memory=m.cores * 2**30)):  # and with 1 GB a core
        # 8.4's mesh is 8 ranks wherever it runs: under 2 GB of memory, launch refuses it in one line
        # that gives the bound's reason (launch_args), rather than start ranks that cannot all fit
        jobs = [n for ch, ns in plans.CHAPTER_JOBS.items() for n in ns
                if each is m or n not in plans.MESH_JOBS.get(ch, ())]
        jobs += [*plans.speedup_ranks(each).ps, *plans.communication_ranks(each).ps, each.cores + 1]
        assert max(jobs) <= plans.most_ranks(each), (name, plans.most_ranks_why(each))

"""Faults done to the launcher on purpose: tests/test_faults*.py and bench/faults.py run them.

The rank functions are real module-level functions, so ``helpers.launch`` can send them to
its ranks. ``python -m helpers.probes.launch_faults`` is a stand-in for a Jupyter kernel: it
reads one command a line on stdin, launches, and answers one JSON line on stdout, so a test
can interrupt it (SIGINT, as the stop button does) or kill it (SIGKILL) in the middle of a job.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from helpers.dist import distributed

a_lambda = lambda: 1  # noqa: E731 - a function with no name to import it by


def killed_after_collective(rank: int = 1) -> dict:
    """Every rank all_reduces once; then ``rank`` SIGKILLs itself while the others all_reduce again."""
    with distributed() as ctx:
        t = torch.ones(1)
        dist.all_reduce(t)
        if ctx.rank == rank:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        return {"rank": ctx.rank}


def fails_as_it_hangs_up(rank: int = 0) -> dict:
    """``rank`` ends its group, so its sockets close, then fails in torch.distributed (no group left).
    The others' all_reduce fails as the sockets close, so their echo ("Connection closed by peer") is
    caught about 10 ms before the error that caused it. On a loaded core, chapter 7.1's trap can put
    gloo's connect failure in one rank and the read error it causes in the other in that order too."""
    with distributed() as ctx:
        dist.barrier()
        if ctx.rank == rank:
            dist.destroy_process_group()
            dist.all_reduce(torch.ones(1))  # raises: the default group is gone
        dist.all_reduce(torch.ones(1))
        return {"rank": ctx.rank}


def where_it_met() -> dict:
    """One all_reduce, and the address and port the ranks' environment named for it."""
    with distributed() as ctx:
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t)
        return {"rank": ctx.rank, "sum": t.item(), "addr": os.environ["MASTER_ADDR"],
                "port": int(os.environ["MASTER_PORT"])}


def return_lambda() -> dict:
    with distributed():
        return {"f": lambda: 1}


def return_graph_tensor() -> dict:
    """Plain pickle takes a tensor that requires grad; torch.multiprocessing's queue does not."""
    with distributed():
        w = torch.ones(2, requires_grad=True)
        return {"y": w * 2}


def return_generator() -> object:
    with distributed() as ctx:
        return (i for i in range(ctx.world_size))


def print_megabytes(megabytes: int = 50, rank: int = 0) -> dict:
    """``rank`` prints ``megabytes`` MB of 100-character lines as fast as it can; the others wait."""
    line = "x" * 99 + "\n"
    with distributed() as ctx:
        if ctx.rank == rank:
            block = line * 10_000  # 1 MB
            for _ in range(megabytes):
                sys.stdout.write(block)
            sys.stdout.write(f"last line of rank {rank}\n")
            sys.stdout.flush()
        dist.barrier()
        return {"rank": ctx.rank}


def own_memory() -> dict:
    """This rank's memory after joining a gloo group and one all_reduce: RSS, and USS (its own pages)."""
    import psutil
    with distributed() as ctx:
        t = torch.ones(1)
        dist.all_reduce(t)
        info = psutil.Process().memory_full_info()
        return {"rank": ctx.rank, "rss": info.rss, "uss": info.uss, "pss": info.pss}


# --- A kernel to interrupt and to kill ----------------------------------------------------------

def _answer(**record) -> None:
    print(json.dumps(record), flush=True)


def serve(preload: list[str] | None = None) -> None:
    """Answer commands until stdin closes: ``ok`` (a 2-rank all_reduce) or ``hang`` (a job that never ends).

    ``preload``: the forkserver's imports instead of the launcher's; a kernel that lives for one
    job starts quicker on ``["torch"]`` (the ranks import the rest).
    """
    import logging

    import helpers
    from helpers.recipes import smoke
    launcher = sys.modules["helpers.launch"]  # the module: the package's name ``launch`` is the function
    if preload:
        launcher.PRELOAD = preload
    loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic", "torch.multiprocessing")]
    for lg in loggers:
        lg.setLevel(logging.INFO)  # what a launch must give back, however it ends
    # ipykernel installs Python's KeyboardInterrupt handler while a cell runs; do so here too, for a
    # process started from a background job of a non-interactive shell inherits SIGINT ignored, and
    # Python then leaves it ignored (a CI run started with `&` lost every interrupt this way).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _answer(event="ready", pid=os.getpid())
    for command in sys.stdin:
        start = time.monotonic()
        try:
            if command.strip() == "ok":
                results = helpers.launch(smoke.allreduce_rank, nprocs=2, show=None)
                _answer(event="ok", sums=[r["sum"] for r in results], start=start, end=time.monotonic())
            elif command.strip() == "hang":
                helpers.launch(smoke.hang_in_collective, nprocs=2, timeout=300, show=None)
                _answer(event="finished")
        except KeyboardInterrupt:
            _answer(event="interrupted", levels=[lg.level for lg in loggers], seconds=time.monotonic() - start)
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            _answer(event="error", error=f"{type(e).__name__}: {e}")


def fork_kernels() -> None:
    """For each temp dir named on stdin, fork a kernel that launches a job that never ends there.

    A kernel to kill costs a fork instead of a fresh Python importing torch: it begins where this
    process is, helpers imported, no forkserver yet. Its forkserver preloads torch alone. The
    kernels are reaped by the system when killed (SIGCHLD ignored here, restored in each kernel).
    """
    import tempfile

    import helpers  # noqa: F401 - imports helpers.launch
    from helpers.recipes import smoke
    launcher = sys.modules["helpers.launch"]
    launcher.PRELOAD = ["torch"]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _answer(event="ready", pid=os.getpid())
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.environ["TMPDIR"] = tempfile.tempdir = line.strip()
            try:
                launcher.launch(smoke.hang_in_collective, nprocs=2, timeout=300, show=None)
            except BaseException as e:  # noqa: BLE001 - said where the test reads it, then gone
                _answer(event="error", error=f"{type(e).__name__}: {e}")
            os._exit(1)
        _answer(event="forked", pid=pid)


if __name__ == "__main__":
    if sys.argv[1:] == ["fork"]:
        fork_kernels()
    else:
        serve(sys.argv[1].split(",") if len(sys.argv) > 1 else None)

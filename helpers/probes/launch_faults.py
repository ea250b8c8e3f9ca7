"""Rank functions that break the launcher on purpose: tests/test_faults.py and bench/faults.py run them.

Each is a real module-level function, so ``helpers.launch`` can send it to its ranks.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from helpers.dist import distributed


def killed_after_collective(rank: int = 1) -> dict:
    """Every rank all_reduces once; then ``rank`` SIGKILLs itself while the others all_reduce again."""
    with distributed() as ctx:
        t = torch.ones(1)
        dist.all_reduce(t)
        if ctx.rank == rank:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        return {"rank": ctx.rank}


def print_megabytes(megabytes: int = 50, rank: int = 0) -> dict:
    """``rank`` prints ``megabytes`` MB of 100-character lines as fast as it can; the others wait."""
    line = "x" * 99 + "\n"
    with distributed() as ctx:
        if ctx.rank == rank:
            block = line * 10_000  # 1 MB
            for _ in range(megabytes):
                sys.stdout.write(block)
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

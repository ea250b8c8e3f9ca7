"""Chapter 7.2's workloads: three hangs caused on purpose, and the tools that name them.

    helpers.launch(hangs.hang, nprocs=2, case="skip", tool="monitored", timeout_s=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run hangs.hang --case shape --tool detail

``case`` is the bug, in rank 1: "skip" (it never calls the step's all_reduce), "mismatch"
(it broadcasts while rank 0 all-reduces), "shape" (its tensor has one value more).
``tool`` is what is switched on to name it: "timeout" (only the group's own, ``timeout_s``
seconds), "detail" (TORCH_DISTRIBUTED_DEBUG=DETAIL), "monitored" (a monitored_barrier
first), or "none" (a group timeout of an hour: only the launcher's timeout ends the job).
``timeout_s`` is the group's timeout (launch's own ``timeout`` is the job's).
``recorded`` is no hang: a healthy all_reduce, then what gloo wrote into the flight recorder.
"""
from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

BACKEND = "gloo"  # monitored_barrier is gloo's, and the hangs are shown on the CPU (helpers.devices)
CASES = ("skip", "mismatch", "shape")
TOOLS = ("timeout", "detail", "monitored", "none")


def _step(case: str, rank: int, check: timedelta | None) -> torch.Tensor:
    """One training step's collective, with rank 1's bug in it; ``check``: a monitored_barrier first."""
    grad = torch.ones(4)
    if rank == 1 and case == "skip":
        time.sleep(3600)  # busy elsewhere: an evaluation, a stuck data loader, a `continue`
        return grad
    if check:  # every rank checks in before the step; the ones that do not are named
        dist.monitored_barrier(timeout=check, wait_all_ranks=True)
    if rank == 1 and case == "mismatch":
        dist.broadcast(grad, src=0)
    elif rank == 1 and case == "shape":
        dist.all_reduce(torch.ones(5))
    else:
        dist.all_reduce(grad)
    return grad


def hang(case: str = "skip", tool: str = "timeout", timeout_s: float = 2.0) -> dict:
    """Rank 1 breaks one step's collective (``case``); ``tool`` decides what names it."""
    if case not in CASES or tool not in TOOLS:
        raise ValueError(f"case must be one of {CASES} and tool one of {TOOLS}")
    if tool == "detail":
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()  # torch read the variable at import; read it again
    seconds = 3600 if tool == "none" else timeout_s
    dist.init_process_group("gloo", timeout=timedelta(seconds=seconds))
    try:
        rank = dist.get_rank()
        grad = _step(case, rank, timedelta(seconds=timeout_s) if tool == "monitored" else None)
        return {"rank": rank, "sum": grad.tolist()}
    finally:
        dist.destroy_process_group()


def recorded(detail: bool = False, entries: int = 64) -> dict:
    """One healthy all_reduce, then this rank's flight recorder, dumped on demand.

    gloo records its collectives too, not only NCCL, once ``TORCH_FR_BUFFER_SIZE`` is set
    before the group is made. ``detail``: under TORCH_DISTRIBUTED_DEBUG=DETAIL the recorder
    also holds the checks the wrapper ran before the all_reduce.
    """
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(entries)
    if detail:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    try:
        from torch._C import _distributed_c10d as c10d
        dump = getattr(c10d, "_dump_fr_trace_json", None)  # private, and new: 2.14 has it
        if dump is None:
            raise RuntimeError(f"torch {torch.__version__} cannot dump its flight recorder on demand")
        before = len(json.loads(dump()).get("entries", []))  # the group's own set-up
        dist.all_reduce(torch.ones(4))
        found = json.loads(dump()).get("entries", [])[before:]
        return {"rank": dist.get_rank(),
                "entries": [(e["profiling_name"], e["input_sizes"]) for e in found]}
    finally:
        dist.destroy_process_group()

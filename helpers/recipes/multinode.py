"""Rank code for chapter 7.3: where each rank finds itself in a multi-node job, and one timed all_reduce.

Run on each "node" (two torchrun agents on one machine, or two real machines)::

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HEAD:29400 \\
             -m helpers.run multinode.whoami --out_dir /shared/run
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helpers import devices
from helpers.dist import distributed
from helpers.training import median

# What torchrun's agent tells each worker about its place in the job.
ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _time_all_reduce(numel: int, repeats: int, device: torch.device) -> float:
    """Median seconds of one all_reduce of ``numel`` float32 values, after a warm-up."""
    x = torch.ones(numel, device=device)
    times = []
    for i in range(repeats + 2):
        dist.barrier()  # start together, so a rank's time is the collective's, not its wait for a peer
        start = time.perf_counter()
        dist.all_reduce(x)
        devices.sync(device)  # NCCL's call returns before the GPU has reduced anything
        if i >= 2:  # the first calls open gloo's connections
            times.append(time.perf_counter() - start)
    return median(times)


def whoami(out_dir: str = "", numel: int = 1 << 14, repeats: int = 20, hold: float = 0.0) -> dict:
    """Report this rank's environment, all_reduce (rank + 1) and time one all_reduce.

    ``hold``: seconds to stay in the group before leaving, so that the notebook can look
    at the sockets of a running job. ``out_dir``: where each rank writes its record
    (under the torchrun CLI only rank 0's result is printed).
    """
    with distributed() as ctx:
        t = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(t)
        record = {**{k.lower(): os.environ.get(k) for k in ENV},
                  "hostname": socket.gethostname(), "pid": os.getpid(), "sum": t.item(),
                  "numel": numel, "all_reduce_s": _time_all_reduce(numel, repeats, ctx.device),
                  "backend": ctx.backend}
        time.sleep(hold)
        dist.barrier()
    if out_dir:
        path = Path(out_dir) / f"rank{ctx.rank}.json"
        path.write_text(json.dumps(record))
    return record

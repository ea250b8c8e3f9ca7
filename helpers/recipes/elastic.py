"""Chapter 7.1's workloads: a job that loses a rank and carries on, by the elastic agent's restart.

    helpers.launch(elastic.train, folder, nprocs=2, max_restarts=1, fail_at=37)
    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m helpers.run elastic.train \\
        --folder ckpts --fail-at 37

The agent, not this code, restarts the job: every rank is started again, from the
top, with TORCHELASTIC_RESTART_COUNT one higher. What carries over is what chapter
5.4's checkpoints hold, so ``train`` is that chapter's training, resumed on every attempt.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from helpers import protocol
from helpers.recipes import checkpointing


def train(folder: str, fail_at: int | None = None, fail_rank: int = 1, how: str = "exception",
          **kwargs) -> dict:
    """``checkpointing.train`` resumed from the newest checkpoint; on the first attempt only,
    rank ``fail_rank`` fails after step ``fail_at`` (``how``: "exception", "sigkill", or "node"
    to take its torchrun agent down with it; see ``checkpointing.crash``)."""
    restart = protocol.restart_count()
    result = checkpointing.train(folder, crash_at=fail_at if restart == 0 else None, crash_rank=fail_rank,
                                 crash_with=how, resume="elastic", **kwargs)
    return {**result, "restart": restart}


def rejoin(fail_rank: int = 1) -> dict:
    """The smallest job that must rejoin: plain ``init_process_group``, one all_reduce.

    On the first attempt ``fail_rank`` raises once the group is up, so the agent
    restarts everyone and the new ranks must form a group again. No helpers code
    makes the group (``helpers.dist`` keys its store by attempt), so this is what any
    script meets under ``torchrun --max-restarts``.
    """
    restart = protocol.restart_count()
    dist.init_process_group("gloo", timeout=protocol.group_timeout(60))
    try:
        if restart == 0 and dist.get_rank() == fail_rank:
            raise RuntimeError(f"rank {fail_rank} failed on purpose (attempt {restart})")
        total = torch.ones(1)
        dist.all_reduce(total)
        return {"rank": dist.get_rank(), "restart": restart, "sum": float(total),
                "store_shared": os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"}
    finally:
        dist.destroy_process_group()

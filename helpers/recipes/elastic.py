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
from helpers.dist import distributed
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


def fail_always(fail_rank: int = 1) -> dict:
    """A job that no restart saves: ``fail_rank`` fails in every attempt, saying which attempt."""
    restart = protocol.restart_count()
    with distributed() as ctx:
        if ctx.rank == fail_rank:
            raise RuntimeError(f"rank {fail_rank} failed in attempt {restart}")
        dist.barrier()
        return {"rank": ctx.rank, "restart": restart}


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


def store_memory(fail_rank: int = 1) -> dict:
    """What the store behind ``MASTER_PORT`` holds after a restart: no group, only the store.

    Every rank writes a key into that store, the way ``init_process_group`` does, and on the
    first attempt ``fail_rank`` then fails. The restarted ranks look for the dead round's keys.
    Under the agent's store (``TORCHELASTIC_USE_AGENT_STORE=True``) every rank is a client of
    a store node 0's agent keeps; otherwise rank 0 serves a new one, as ``init_process_group`` would.
    """
    restart, rank = protocol.restart_count(), int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # multi_tenant, as init_process_group asks: under helpers.launch rank 0 already serves this port
    # on 127.0.0.1 (helpers.loopback), and a multi-tenant request reuses that server.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not shared, timeout=protocol.group_timeout(60), multi_tenant=True)
    store.set(f"attempt{restart}/rank{rank}", str(os.getpid()))
    store.wait([f"attempt{restart}/rank{r}" for r in range(world)])
    if restart == 0 and rank == fail_rank:
        raise RuntimeError(f"rank {fail_rank} failed on purpose (attempt {restart})")
    old = [r for r in range(world) if restart and store.check([f"attempt0/rank{r}"])]
    store.set(f"attempt{restart}/done{rank}", "1")
    if rank == 0:  # the host of a store of the ranks' own must outlive every client's last call
        store.wait([f"attempt{restart}/done{r}" for r in range(world)])
    return {"rank": rank, "restart": restart, "shared": shared, "dead_round_keys": old,
            "master_port": int(os.environ["MASTER_PORT"])}

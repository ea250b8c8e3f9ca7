"""Inside a rank: set up the process group from torchrun's environment, and tear it down.

The same code runs under ``helpers.launch`` (a notebook cell), under the
``torchrun`` CLI on a GPU node, or as a single plain process::

    with distributed() as ctx:          # reads RANK, LOCAL_RANK, WORLD_SIZE
        model = DDP(model.to(ctx.device), device_ids=ctx.device_ids)
        ...
        report(step, total, loss=loss.item())   # rank 0 feeds the launcher's progress bar
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from . import devices, protocol
from .machine import this as this_machine
from .protocol import DEFAULT_SEED


@dataclass(frozen=True)
class Context:
    """Where this rank stands: its place in the job and the device it owns."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device_ids(self) -> list[int] | None:
        """What DDP's ``device_ids`` wants: the one local GPU, or None on the CPU."""
        return [self.device.index] if self.device.type == "cuda" else None


def setup(seed: int = DEFAULT_SEED) -> Context:
    """Join the process group described by torchrun's environment variables.

    Without them (a plain ``python script.py``) it sets up a group of one, so a
    recipe runs unchanged as a single process.
    """
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    # LOCAL_RANK, not RANK, indexes this host's GPUs: on the second node RANK is 8..15.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))

    backend = os.environ.get(protocol.BACKEND) or this_machine().backend(local_world_size)
    device = devices.for_rank(backend, local_rank)  # the one decision: NCCL owns a GPU, gloo the CPU
    if device.type == "cuda":
        torch.cuda.set_device(device)

    if not dist.is_initialized():
        timeout = protocol.group_timeout()
        dist.init_process_group(backend, store=_fresh_store(rank, world_size, timeout),
                                rank=rank, world_size=world_size, timeout=timeout,
                                device_id=device if backend == "nccl" else None)
    protocol.prepare_process(local_world_size, seed)
    return Context(rank, local_rank, world_size, backend, device)


_groups_made = 0


def _fresh_store(rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    """The rendezvous store, under a prefix that is new for each group this process makes,
    in each attempt of the job.

    A second group reusing the first one's keys would hang; with a prefix, a rank can
    set up, tear down and set up again (two recipes in one job). A plain process with
    no torchrun environment gets an in-memory store: a group of one needs no network.
    """
    global _groups_made
    _groups_made += 1
    if "WORLD_SIZE" not in os.environ:
        base = dist.HashStore()
    else:
        from torch.distributed.rendezvous import rendezvous
        base, _, _ = next(rendezvous("env://", rank, world_size, timeout=timeout))
    # The attempt too: after a restart the agent's store still holds the failed round's keys,
    # and a group made under the same names would dial the dead ranks (pytorch/pytorch#135712).
    return dist.PrefixStore(f"helpers-restart{protocol.restart_count()}-group-{_groups_made}", base)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def distributed(seed: int = DEFAULT_SEED):
    """``setup()`` on entry, and ``teardown()`` however the block ends."""
    ctx = setup(seed)
    try:
        yield ctx
    except BaseException as e:
        protocol.write_error(e)  # before teardown: peers fail the moment the group goes away
        raise
    finally:
        teardown()


def report(step: int, total: int, **metrics: float) -> None:
    """Tell the launcher how far rank 0 has got; other ranks' calls do nothing.

    Under ``helpers.launch`` the launcher draws this as a progress bar (and
    hands it to ``on_progress``). Under the torchrun CLI it prints a line at
    every tenth of the way.
    """
    if int(os.environ.get("RANK", 0)) != 0:
        return
    if protocol.append_progress(protocol.progress_record(step, total, **metrics)):
        return
    if total and (step == total or step % max(1, total // 10) == 0):
        extra = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        print(f"step {step}/{total} {extra}", flush=True)

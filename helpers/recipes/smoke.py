"""Tiny jobs that exercise the launcher itself: the tests and bench/launch.py use them."""
import os
import time

import torch
import torch.distributed as dist

from helpers import machine
from helpers.dist import distributed, report


def allreduce_rank() -> dict:
    """Init the process group, all_reduce each rank's id, return what every rank saw."""
    with distributed() as ctx:
        t = torch.tensor([float(ctx.rank)], device=ctx.device)
        dist.all_reduce(t)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "sum": t.item(),
                "threads": torch.get_num_threads(), "backend": ctx.backend, "pid": os.getpid(),
                "machine": machine.to_json(machine.this())}


def stamped_allreduce() -> dict:
    """``allreduce_rank``'s job, stamped on the host's shared clock (``time.perf_counter``): when the
    rank's code began, when its group had connected, when it had torn the group down. The launcher's
    own stages are stamped around it by bench/launch.py."""
    began = time.perf_counter()
    with distributed() as ctx:
        connected = time.perf_counter()
        t = torch.ones(1, device=ctx.device)
        dist.all_reduce(t)
        worked = time.perf_counter()
    return {"rank": ctx.rank, "began": began, "connected": connected, "worked": worked,
            "torn_down": time.perf_counter()}


def fail_on(rank: int, message: str = "boom") -> dict:
    with distributed() as ctx:
        print(f"rank {ctx.rank} starting", flush=True)
        if ctx.rank == rank:
            raise ValueError(message)
        dist.barrier()
        return {"rank": ctx.rank}


def hang_in_collective(rank: int = 1) -> None:
    """Every rank but ``rank`` enters a barrier that ``rank`` never joins."""
    with distributed() as ctx:
        print("entering barrier" if ctx.rank != rank else "sleeping instead", flush=True)
        if ctx.rank == rank:
            time.sleep(3600)
        dist.barrier()


def count(steps: int = 20, delay: float = 0.01) -> dict:
    """Reports progress for ``steps`` steps and prints a line on each rank."""
    with distributed() as ctx:
        for step in range(1, steps + 1):
            time.sleep(delay)
            report(step, steps, value=step * 0.5)
        print(f"done on rank {ctx.rank}", flush=True)
        return {"rank": ctx.rank, "steps": steps}


def return_unpicklable() -> dict:
    """Returns a lambda: a value that cannot travel back to the launcher."""
    with distributed():
        return {"f": lambda: 1}


def save_fails_on_rank0(path: str) -> dict:
    """Save a checkpoint, then save again with rank 0's disk full; report what every rank saw."""
    from helpers import checkpoint
    from helpers.checkpoint import atomic
    from helpers.models import SimpleModel
    with distributed() as ctx:
        model = SimpleModel()
        checkpoint.save(path, model=model, step=1)
        if ctx.rank == 0:  # the disk fills up: the write is buffered, its fsync fails
            def full_disk(fd):
                raise OSError(28, "No space left on device")
            atomic.os.fsync = full_disk  # in rank 0's own process, which ends with the job
        try:
            checkpoint.save(path, model=model, step=2)
            error = None
        except checkpoint.CheckpointError as e:
            error = str(e)
        dist.barrier()
        return {"rank": ctx.rank, "error": error}


def return_tensor(n: int = 4) -> dict:
    with distributed() as ctx:
        return {"rank": ctx.rank, "tensor": torch.arange(n) * (ctx.rank + 1)}


def two_groups_in_a_row() -> dict:
    """Set up, tear down and set up again in one rank, as two recipes called in turn would."""
    sums = []
    for _ in range(2):
        with distributed() as ctx:
            t = torch.tensor([1.0], device=ctx.device)
            dist.all_reduce(t)
            sums.append(t.item())
    return {"rank": ctx.rank, "sums": sums}


def hold(path: str, most: float = 60.0) -> dict:
    """Join the group, report once, then wait until ``path`` exists (at most ``most`` s): a test
    looks at the running job from ``on_progress`` and lets it finish by creating the file. The record
    says which port the group met on (MASTER_PORT)."""
    with distributed() as ctx:
        report(1, 1, master_port=float(os.environ.get("MASTER_PORT", 0)))
        deadline = time.monotonic() + most
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        dist.barrier()
        return {"rank": ctx.rank}

"""The article's basic DDP training (its section 5.1), corrected, as a recipe.

Runs unchanged as one process, from a notebook cell, or under torchrun::

    helpers.launch(train, nprocs=2, epochs=3)                 # in a notebook
    torchrun --nproc-per-node 8 -m helpers.run ddp_mnist.train --epochs 3
    python -m helpers.run ddp_mnist.train                      # one plain process

Below ``train`` sit the rank-side runs of the article's own setup
(``helpers.article.article_setup``), so that chapter 5.1 can show what goes wrong
(``run_article_setup``, ``failure_leftovers``).
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import amp, data, devices
from helpers.article import article_setup
from helpers.dist import distributed, report
from helpers.models import SimpleModel
from helpers.training import snapshot, train_step


def evaluate(model: nn.Module, device: torch.device, rank: int, world_size: int) -> float:
    """Accuracy on the whole test split: each rank scores every world_size-th sample, then all_reduce.

    A strided slice, not DistributedSampler: the sampler pads with duplicates, which would skew the count.
    """
    x, y = data.load(train=False).tensors
    x, y = x[rank::world_size].to(device), y[rank::world_size].to(device)
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).sum()
    counts = torch.stack([correct, torch.tensor(len(y), device=device)]).double()
    dist.all_reduce(counts)
    model.train()
    return (counts[0] / counts[1]).item()


def train(epochs: int = 3, batch_size: int = 64, lr: float = 0.05, log_every: int = 10,
          seed: int = 0, use_amp: bool = False) -> dict:
    """Train ``SimpleModel`` with DDP; return rank-local measurements and the final weights.

    ``use_amp=True`` is the article's section 5.2: autocast plus GradScaler (``helpers.amp``).
    """
    with distributed(seed) as ctx:
        # Every rank says where it runs: under torchrun on many nodes, RANK and LOCAL_RANK differ.
        print(f"rank {ctx.rank} of {ctx.world_size}: LOCAL_RANK {ctx.local_rank}, "
              f"device {ctx.device}, backend {ctx.backend}", flush=True)
        model = DDP(SimpleModel().to(ctx.device), device_ids=ctx.device_ids)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        # The article's section 5.2 (use_amp=True): autocast, and a GradScaler where float16 needs one.
        dtype = amp.autocast_dtype(ctx.device) if use_amp else None
        scaler = amp.grad_scaler(ctx.device, enabled=use_amp)
        dataset = data.load(train=True)
        sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

        total, step, losses, step_seconds = epochs * len(loader), 0, [], []
        start = time.perf_counter()
        for epoch in range(epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
            for batch_idx, (x, target) in enumerate(loader):
                t0 = time.perf_counter()
                x, target = x.to(ctx.device), target.to(ctx.device)
                # forward, then backward, in which DDP all-reduces the gradients, then the update
                losses.append(train_step(model, optimizer, x, target, scaler, dtype))
                step += 1  # the loss's .item() waited for the device: the step is done
                step_seconds.append(time.perf_counter() - t0)
                report(step, total, loss=losses[-1], epoch=epoch)
                if ctx.is_main and batch_idx % log_every == 0:
                    print(f"epoch {epoch} batch {batch_idx:3d} loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, ctx.device, ctx.rank, ctx.world_size)
        return {
            "rank": ctx.rank, "local_rank": ctx.local_rank, "world_size": ctx.world_size,
            "backend": ctx.backend, "device": str(ctx.device),
            "data": str(data.source()), "steps": step, "seconds": seconds,
            "steps_per_s": step / seconds,
            "samples_per_s": step * batch_size * ctx.world_size / seconds,  # global throughput
            "step_seconds": step_seconds,  # the loop's work per step, without the data loader
            "losses": losses, "accuracy": accuracy,
            "peak_memory": devices.peak_memory(ctx.device),  # the host's RSS, and the GPU's on a GPU
            "state": snapshot(model),
        }


# --- The article's setup, run in N ranks, for chapter 5.1 -------------------------------

def run_article_setup() -> dict:
    """The article's first lines of ``train()``: its setup, then the global RANK as the GPU index."""
    rank, world_size = article_setup()
    torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}")
    dist.destroy_process_group()
    return {"rank": rank, "device": str(device)}


def _open_tcp_connections() -> int:
    import psutil
    return len(psutil.Process().net_connections(kind="tcp"))


def _job_that_raises(cleanup_in_finally: bool) -> None:
    """The article's ``train()`` shape on gloo: set up, work, fail, and (maybe) clean up."""
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))  # the group is live: its connections are open
    if not cleanup_in_finally:
        raise RuntimeError("a bad batch")  # the article's cleanup() after the loop is never reached
    try:
        raise RuntimeError("a bad batch")
    finally:
        dist.destroy_process_group()  # the fix: runs however the block ends


def failure_leftovers(cleanup_in_finally: bool) -> dict:
    """What an exception in training leaves behind in a process that goes on (a notebook, a sweep)."""
    before = _open_tcp_connections()
    try:
        _job_that_raises(cleanup_in_finally)
    except RuntimeError:
        pass
    after = {"rank": dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"]),
             "initialized": dist.is_initialized(),
             "connections_before": before, "connections_after": _open_tcp_connections()}
    if dist.is_initialized():
        try:  # what the next job in this process would do first
            dist.init_process_group("gloo")
        except ValueError as e:
            after["next_init_error"] = str(e)
        dist.destroy_process_group()
    return after

"""The article's basic DDP training (its section 5.1), corrected, as a recipe.

Runs unchanged as one process, from a notebook cell, or under torchrun::

    helpers.launch(train, nprocs=2, epochs=3)                 # in a notebook
    torchrun --nproc-per-node 8 -m helpers.run ddp_mnist.train --epochs 3
    python -m helpers.run ddp_mnist.train                      # one plain process
"""
from __future__ import annotations

import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import amp as mixed
from helpers import data
from helpers.dist import distributed, report
from helpers.models import SimpleModel


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
          seed: int = 0, amp: bool = False) -> dict:
    """Train ``SimpleModel`` with DDP; return rank-local measurements and the final weights.

    ``amp=True`` is the article's section 5.2: autocast plus GradScaler (see ``helpers.amp``).
    """
    with distributed(seed) as ctx:
        model = DDP(SimpleModel().to(ctx.device), device_ids=ctx.device_ids)
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scaler = mixed.grad_scaler(ctx.device, enabled=amp)
        dataset = data.load(train=True)
        sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

        total, step, losses = epochs * len(loader), 0, []
        start = time.perf_counter()
        for epoch in range(epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
            for batch_idx, (x, target) in enumerate(loader):
                x, target = x.to(ctx.device), target.to(ctx.device)
                with mixed.autocast(ctx.device, enabled=amp):
                    loss = criterion(model(x), target)
                optimizer.zero_grad()
                scaler.scale(loss).backward()  # DDP all-reduces the gradients here
                scaler.step(optimizer)  # skips the step if a gradient overflowed
                scaler.update()
                step += 1
                losses.append(loss.item())
                report(step, total, loss=losses[-1], epoch=epoch)
                if ctx.is_main and batch_idx % log_every == 0:
                    print(f"epoch {epoch} batch {batch_idx:3d} loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, ctx.device, ctx.rank, ctx.world_size)
        return {
            "rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
            "data": str(data.source()), "steps": step, "seconds": seconds,
            "steps_per_s": step / seconds,
            "samples_per_s": step * batch_size * ctx.world_size / seconds,  # global throughput
            "losses": losses, "accuracy": accuracy,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "state": {k: v.detach().cpu().clone() for k, v in model.module.state_dict().items()},
        }

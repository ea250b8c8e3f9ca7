"""Chapter 3.1's baselines, run in the notebook's own process: what data parallelism must equal.

``train_single`` trains one process on the global batches that the ranks of
``helpers.recipes.data_parallel.train`` see together; ``train_dataparallel`` is the
article's DP row, ``nn.DataParallel``, one process driving every GPU. ``more_timeline_rounds``
adds steps to a timing comparison of ``timeline``'s, launched from the notebook's process.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
from helpers import data, models
from helpers.data import batch_plan
from helpers.machine import this as this_machine
from helpers.models import SimpleModel
from helpers.training import flat_params, train_step


def _train_global(net: nn.Module, device, world_size: int, steps: int, batch_size: int, lr: float,
                  seed: int, accumulate: int = 1) -> list[float]:
    """SGD in one process, each update on the global batch: ``accumulate`` steps of every rank's batch."""
    x, y = data.load(train=True).tensors
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    plan = batch_plan(len(y), world_size, batch_size, steps * accumulate, seed)
    losses = []
    for step in range(steps):
        idx = torch.tensor([i for per_rank in plan[step * accumulate:(step + 1) * accumulate]
                            for batch in per_rank for i in batch])
        losses.append(train_step(net, optimizer, x[idx].to(device), y[idx].to(device)))
    return losses


def train_single(world_size: int = 2, model: str = "simple", steps: int = 20, batch_size: int = 32,
                 lr: float = 0.05, seed: int = 0, accumulate: int = 1, device: str = "cpu") -> dict:
    """The baseline: one process, no communication, the same global batches in the same order."""
    torch.manual_seed(seed)  # what distributed(seed) does in every rank before building the model
    module = models.build(model).to(device)
    losses = _train_global(module, device, world_size, steps, batch_size, lr, seed, accumulate)
    return {"losses": losses, "params": flat_params(module)}


def train_dataparallel(steps: int = 20, batch_size: int = 32, lr: float = 0.05, seed: int = 0) -> dict:
    """The article's DP row: ``nn.DataParallel``, ONE process driving every visible GPU with threads.

    Each forward splits the batch over the GPUs, copies the model from cuda:0 to
    each of them (every step), runs the copies in threads and gathers the outputs
    on cuda:0; the backward sums the gradients onto cuda:0's parameters. Needs 2+
    GPUs. Trains on the same global batches as ``train_single(world_size=2)``.
    """
    gpus = this_machine().n_gpus
    if gpus < 2:
        raise RuntimeError(f"nn.DataParallel needs 2 or more GPUs; this machine has {gpus}")
    torch.manual_seed(seed)
    module = SimpleModel().to("cuda:0")
    losses = _train_global(nn.DataParallel(module), "cuda:0", 2, steps, batch_size, lr, seed)
    return {"gpus": gpus, "losses": losses, "params": flat_params(module)}


def more_timeline_rounds(slow: str, fast: str, caps: tuple = (32,)) -> Callable[[int], list[float]]:
    """``more(k)``: k more timed steps of ``helpers.recipes.data_parallel.timeline`` on 2 ranks (the
    variants in turns, as the chapter ran them), and each step's ratio of ``slow``'s time in
    all_reduce over ``fast``'s (``analysis.step_ratios``), for ``analysis.margins.until_clear``."""
    import helpers
    from helpers import analysis
    from helpers.recipes import data_parallel

    def more(k: int) -> list[float]:
        return analysis.step_ratios(helpers.launch(data_parallel.timeline, nprocs=2, caps=caps, steps=k), slow, fast)
    return more

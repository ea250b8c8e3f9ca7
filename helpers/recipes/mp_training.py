"""The article's model-parallel training (its section 5.3), corrected, then combined with DDP.

Three ways to train the same model on the same batches:

* ``train_in_process``: the article's loop on its ``ModelParallelModel``, in one
  process, layers on ``cuda:0`` and ``cuda:1`` where two GPUs exist.
* ``train``: the model as 2 pipeline stages in 2 processes (``naive_step`` of
  chapter 3.2), and with ``dp > 1`` each stage replicated with DDP. A
  ``Topology(dp, pp)`` decides which rank holds which stage of which replica.
* ``train_unsplit``: the reference, ``ThreeLayerMLP`` whole in this process.

With the same seed and the same global batches, all three follow the same loss curve::

    helpers.launch(train, nprocs=2)                     # 2 stages
    helpers.launch(train, nprocs=4, dp=2, batch_size=32)  # 2 replicas x 2 stages
    torchrun --nproc-per-node 4 -m helpers.run mp_training.train --dp 2 --batch-size 32
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from helpers.data import load
from helpers.dist import distributed, report
from helpers.models import ThreeLayerMLP
from helpers.recipes.model_parallel import ModelParallelModel, naive_step
from helpers.topology import Topology


def replica_batches(n: int, batch_size: int, epochs: int, seed: int, dp: int = 1,
                    dp_rank: int = 0, max_steps: int | None = None) -> list[torch.Tensor]:
    """Sample indices of each step for one replica: DistributedSampler's order, ``set_epoch`` each epoch.

    With dp = 1 this is the article's ``shuffle=True``, made reproducible by the seed.
    Every stage of a replica computes the same list, so its stages agree on the batch
    without sending it (the first stage uses the images, the last the labels).
    ``max_steps`` cuts the list short (on full MNIST, 5 epochs are 4,690 steps).
    """
    sampler = DistributedSampler(range(n), num_replicas=dp, rank=dp_rank, shuffle=True, seed=seed)
    steps = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        steps += list(torch.tensor(list(sampler)).split(batch_size))
    return steps[:max_steps]


def global_batches(n: int, batch_size: int, epochs: int, seed: int, dp: int = 1,
                   max_steps: int | None = None) -> list[torch.Tensor]:
    """What the dp replicas see together at each step: their batches, concatenated."""
    per_replica = [replica_batches(n, batch_size, epochs, seed, dp, r, max_steps) for r in range(dp)]
    return [torch.cat(step) for step in zip(*per_replica)]


def train_in_process(dev0: str = "cuda:0", dev1: str = "cuda:1", epochs: int = 5,
                     batch_size: int = 64, lr: float = 0.05, seed: int = 0,
                     max_steps: int | None = None) -> dict:
    """The article's ``train_model_parallel``, corrected; runs in the calling process.

    On two GPUs it splits the model across them. With ``dev0 = dev1 = "cpu"`` it is
    the same program with nothing moved: it checks the arithmetic, not the split.
    The article's lr = 0.01 suits MNIST's 4,690 steps in 5 epochs; the book's default
    0.05 learns in the 115 steps that 5 epochs of the offline digits give.
    """
    torch.manual_seed(seed)
    model = ModelParallelModel(dev0, dev1)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x_all, y_all = load(train=True).tensors
    losses = []
    model.train()
    for idx in replica_batches(len(y_all), batch_size, epochs, seed, max_steps=max_steps):
        data, target = x_all[idx], y_all[idx]
        data = data.view(data.size(0), -1)  # still on the CPU (not "on GPU 0"): forward() moves it
        target = target.to(model.dev1)  # right as the article has it: where the output (layer3) is
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()  # autograd carries the gradient from dev1 back to dev0 by itself
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            "devices": {n: str(p.device) for n, p in model.named_parameters()}}


def train_unsplit(epochs: int = 5, batch_size: int = 64, lr: float = 0.05, seed: int = 0,
                  dp: int = 1, max_steps: int | None = None) -> dict:
    """The reference: the whole model in this process, on the dp replicas' global batches."""
    torch.manual_seed(seed)
    model = ThreeLayerMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x_all, y_all = load(train=True).tensors
    losses = []
    for idx in global_batches(len(y_all), batch_size, epochs, seed, dp, max_steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def train(dp: int = 1, pp: int = 2, epochs: int = 5, batch_size: int = 64, lr: float = 0.05,
          seed: int = 0, max_steps: int | None = None) -> dict:
    """Train ``ThreeLayerMLP`` as ``pp`` = 2 stages in separate processes, times ``dp`` DDP replicas.

    ``batch_size`` is per replica, as in DDP: the global batch is ``dp * batch_size``.
    The DeviceMesh gives the groups: DDP averages gradients over ``mesh["dp"]`` (the
    same stage in every replica), and activations travel along the replica's pipeline.
    """
    with distributed(seed) as ctx:
        topo = Topology(dp=dp, pp=pp).check(ctx.world_size)
        if pp != 2:
            raise ValueError(f"ThreeLayerMLP.stages() cuts the article's model in 2, not {pp}")
        mesh = topo.build_mesh(ctx.device.type)
        dp_rank, pp_rank = topo.coords(ctx.rank)
        assert (mesh.get_local_rank("dp"), mesh.get_local_rank("pp")) == (dp_rank, pp_rank)
        pipeline = topo.stage_ranks(dp_rank)
        prev_rank = pipeline[pp_rank - 1] if pp_rank > 0 else None
        next_rank = pipeline[pp_rank + 1] if pp_rank < pp - 1 else None

        # The same seed everywhere: every stage of every replica starts from one initialization.
        # (A model too big for one device would be built on the "meta" device, then only
        # this rank's stage materialized; here the whole model fits, and only the stage moves.)
        model = ThreeLayerMLP()
        stage = model.stages()[pp_rank].to(ctx.device)
        if dp > 1:
            stage = DDP(stage, device_ids=ctx.device_ids, process_group=mesh["dp"].get_group())
        optimizer = torch.optim.SGD(stage.parameters(), lr=lr)

        x_all, y_all = load(train=True).tensors
        batches = replica_batches(len(y_all), batch_size, epochs, seed, dp, dp_rank, max_steps)
        losses = []
        start = time.perf_counter()
        for step, idx in enumerate(batches, 1):
            optimizer.zero_grad()
            _, loss = naive_step(stage, x_all[idx], y_all[idx], prev_rank, next_rank)
            optimizer.step()
            if loss is not None:  # the last stage holds the loss
                losses.append(loss.item())
            report(step, len(batches))
        mine = {name for name, layer in model.named_children()
                if any(layer is m for m in stage.modules())}
        return {"rank": ctx.rank, "dp_rank": dp_rank, "pp_rank": pp_rank, "steps": len(batches),
                "seconds": time.perf_counter() - start, "losses": losses,
                "dp_group": mesh["dp"].mesh.tolist(), "pp_group": mesh["pp"].mesh.tolist(),
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()
                          if k.split(".")[0] in mine}}


def assemble(ranks: list[dict], dp_rank: int = 0) -> dict:
    """One replica's full state dict, put together from its stages' ranks."""
    state = {}
    for r in ranks:
        if r["dp_rank"] == dp_rank:
            state.update(r["state"])
    return state


def replica_mean_losses(ranks: list[dict]) -> list[float]:
    """The global batch's loss per step: the mean of the replicas' last-stage losses (equal batches)."""
    last = [r["losses"] for r in ranks if r["losses"]]
    return torch.tensor(last).mean(0).tolist()


def accuracy(state: dict) -> float:
    """Accuracy of a trained state dict on the test split, evaluated whole in this process."""
    model = ThreeLayerMLP()
    model.load_state_dict(state)
    x, y = load(train=False).tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()

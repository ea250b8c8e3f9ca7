"""The article's model-parallel training (its section 5.3), corrected, then combined with DDP.

Three ways to train the same model on the same batches:

* ``helpers.probes.model_parallel.train_in_process``: the article's loop on its
  ``ModelParallelModel``, in one process, layers on ``cuda:0`` and ``cuda:1`` where two
  GPUs exist.
* ``train`` (here): the model as 2 pipeline stages in 2 processes (``naive_step`` of
  chapter 3.2), and with ``dp > 1`` each stage replicated with DDP. A
  ``Topology(dp, pp)`` decides which rank holds which stage of which replica.
* ``helpers.probes.model_parallel.train_unsplit``: the reference, ``ThreeLayerMLP`` whole.

With the same seed and the same global batches, all three follow the same loss curve::

    helpers.launch(train, nprocs=2)                     # 2 stages
    helpers.launch(train, nprocs=4, dp=2, batch_size=32)  # 2 replicas x 2 stages
    torchrun --nproc-per-node 4 -m helpers.run model_parallel_training.train --dp 2 --batch-size 32
"""
from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.data import load, replica_batches
from helpers.dist import distributed, report
from helpers.models import ThreeLayerMLP
from helpers.recipes.model_parallel import naive_step
from helpers.topology import Topology
from helpers.training import Timeline, snapshot


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
        mesh = topo.build_mesh(ctx.device)
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
        losses, clock = [], Timeline(ctx.device)
        start = clock.now()
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
                "seconds": clock.now() - start, "losses": losses,
                "dp_group": mesh["dp"].mesh.tolist(), "pp_group": mesh["pp"].mesh.tolist(),
                "state": {k: v for k, v in snapshot(model).items() if k.split(".")[0] in mine}}

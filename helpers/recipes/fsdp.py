"""FSDP2 (chapter 6.2): ``fully_shard``, ZeRO-3 as a library, and activation checkpointing beside it.

``apply_fsdp`` shards each Linear of a model as its own group, then the root, as torchtitan's
``apply_fsdp`` does per block: a group's parameters are all-gathered just before it runs and
freed after. Its mesh always comes from ``devices.mesh``: left to itself, ``fully_shard`` puts
the parameters on ``torch._C._get_accelerator()``, a GPU on any machine that has one, even in
gloo ranks whose inputs are on the CPU.

``reshard`` measures what ``reshard_after_forward`` changes on a model whose states DDP could
not keep within a rank's share of this machine; ``checkpointing`` measures what recomputing
activations saves, and what it costs. Every step is timed on a ``Timeline``, which waits for a
GPU's kernels before it reads the clock::

    helpers.launch(reshard, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run fsdp.reshard
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from helpers import devices
from helpers.dist import distributed, report
from helpers.measure import held_state_bytes, saved_activation_bytes
from helpers.models import WideMLP, n_params, widths
from helpers.recipes.traffic import Traffic
from helpers.theory.sharding import segment_bounds
from helpers.training import Timeline, median

BIG = (2048, 6)  # WideMLP(width, depth): 18.4 M parameters, 295 MB of fp32 Adam training states


def apply_fsdp(model: nn.Module, mesh, reshard_after_forward: bool = True) -> nn.Module:
    """``fully_shard`` each Linear (one all-gather group each), then the whole model, over the
    1-D ``mesh`` (``devices.mesh(ctx.device, (p,))``)."""
    from torch.distributed.fsdp import fully_shard
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def unsharded_bytes(model: nn.Module) -> int:
    """Bytes of parameters held in full right now: FSDP2 swaps a plain tensor in for the DTensor
    while a group is unsharded."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def reshard(steps: int = 2, batch_size: int = 64, width: int = BIG[0], depth: int = BIG[1],
            lr: float = 1e-3, seed: int = 0) -> dict:
    """FSDP2 on ``WideMLP(width, depth)``, ``reshard_after_forward`` on then off; per rank and per step:
    the states it holds, the parameters left unsharded between forward and backward, and the
    collectives (``Traffic``)."""
    with distributed(seed) as ctx:
        out = {"rank": ctx.rank, "p": ctx.world_size, "backend": ctx.backend}
        mesh, clock = devices.mesh(ctx.device, (ctx.world_size,)), Timeline(ctx.device)
        for i, (name, after) in enumerate((("on", True), ("off", False))):
            torch.manual_seed(seed)
            model = apply_fsdp(WideMLP(width, depth).to(ctx.device), mesh, reshard_after_forward=after)
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)
            gen = torch.Generator().manual_seed(seed + ctx.rank)
            x = torch.randn(batch_size, 784, generator=gen).to(ctx.device)
            y = torch.randint(0, 10, (batch_size,), generator=gen).to(ctx.device)
            times, between = [], 0
            for step in range(steps):
                with Traffic() as traffic:  # the last step's collectives are the ones kept
                    start = clock.now()
                    loss = F.cross_entropy(model(x), y)
                    between = unsharded_bytes(model)
                    loss.backward()
                    optimizer.step()
                    held = held_state_bytes(model.parameters(), optimizer)
                    optimizer.zero_grad()
                    times.append(clock.now() - start)
                report(i * steps + step + 1, 2 * steps)
            out[name] = {"states": held, "between_bytes": between, "calls": traffic.calls,
                          "wire_bytes": traffic.wire_bytes, "step_s": median(times[1:] or times)}
        out.update(n_params=n_params(model), n_tensors=len(list(model.parameters())), width=width, depth=depth)
        return out


class Segments(nn.Module):
    """WideMLP's Linear+ReLU blocks in ``segments`` runs (``theory.segment_bounds``), each checkpointed
    if ``ac``: its forward keeps only its input, and backward runs it again to get the rest."""

    def __init__(self, mlp: WideMLP, segments: int):
        super().__init__()
        layers = list(mlp.net)
        self.flatten, self.head = layers[0], layers[-1]
        blocks = [nn.Sequential(layers[i], layers[i + 1]) for i in range(1, len(layers) - 1, 2)]
        self.runs = nn.ModuleList(nn.Sequential(*blocks[a:b]) for a, b in segment_bounds(len(blocks), segments))
        self.ac = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.flatten(x)
        for run in self.runs:
            # use_reentrant=False: the recommended form; it saves the run's input for the recompute
            h = checkpoint(run, h, use_reentrant=False) if self.ac else run(h)
        return self.head(h)


def checkpointing(rounds: int = 3, batch_size: int = 128, width: int = BIG[0], depth: int = BIG[1],
                  segments: int = 2, seed: int = 0) -> dict:
    """One rank: the bytes autograd keeps after the forward, and forward and backward times, with
    and without checkpointing the model's blocks in ``segments`` runs. Plain and checkpointed
    steps take turns, so a busy moment of the machine slows both."""
    with distributed(seed) as ctx:
        torch.manual_seed(seed)
        mlp = WideMLP(width, depth)
        model = Segments(mlp, segments).to(ctx.device)
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(batch_size, 784, generator=gen).to(ctx.device)
        y = torch.randint(0, 10, (batch_size,), generator=gen).to(ctx.device)
        kept, times, box, clock = {}, {"plain": [], "checkpointed": []}, {}, Timeline(ctx.device)
        for r in range(rounds + 1):
            for mode in ("plain", "checkpointed") if r % 2 else ("checkpointed", "plain"):
                model.ac = mode == "checkpointed"
                start = clock.now()
                kept[mode] = saved_activation_bytes(model, lambda: box.update(loss=F.cross_entropy(model(x), y)))
                mid = clock.now()
                box["loss"].backward()
                end = clock.now()
                model.zero_grad(set_to_none=True)
                if r:  # round 0 warms up
                    times[mode].append((mid - start, end - mid))
            report(r + 1, rounds + 1)
        return {"rank": ctx.rank, "backend": ctx.backend, "kept": {mode: k["activations"] for mode, k in kept.items()},
                "forward_s": {mode: median(t[0] for t in ts) for mode, ts in times.items()},
                "backward_s": {mode: median(t[1] for t in ts) for mode, ts in times.items()},
                "step_s": {mode: median(a + b for a, b in ts) for mode, ts in times.items()},
                "batch_size": batch_size, "widths": widths(mlp), "segments": segments}

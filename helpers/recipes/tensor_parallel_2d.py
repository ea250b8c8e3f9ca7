"""Tensor parallelism beside the other strategies (chapter 6.3): what each costs one rank per step,
and FSDP x TP on one 2-D DeviceMesh, trained and checked against the unsplit model.

The model is a stack of transformer layers without norms (``TinyTransformer``): attention,
then the MLP, each with its residual. Each strategy is one small ``apply_*`` function with
explicit arguments, as in torchtitan::

    helpers.launch(strategy_costs, nprocs=4)      # DDP, FSDP, TP on 4 ranks, then FSDP 2 x TP 2
    torchrun --standalone --nproc-per-node 4 -m helpers.run tensor_parallel_2d.strategy_costs
"""
from __future__ import annotations

import logging
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.dist import distributed, report
from helpers.recipes.tensor_parallel import CommBytes, MLPBlock, SelfAttention, apply_tp
from helpers.topology import Topology


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.mlp = MLPBlock(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class TinyTransformer(nn.Module):
    """``layers`` transformer layers of width ``hidden``: two TP blocks (attention, MLP) each."""

    def __init__(self, hidden: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.layers = nn.ModuleList(Layer(hidden, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def split_params(model: TinyTransformer) -> tuple[int, int]:
    """(parameters TP splits, parameters it replicates): the row-split Linears' biases are whole
    on every rank, since they are added once, after the all_reduce."""
    kept = sum(m.bias.numel() for layer in model.layers for m in (layer.attn.out, layer.mlp.down))
    return sum(p.numel() for p in model.parameters()) - kept, kept


def apply_stack_tp(model: TinyTransformer, tp_mesh) -> TinyTransformer:
    for layer in model.layers:
        apply_tp(layer.attn, "attention", tp_mesh)
        apply_tp(layer.mlp, "mlp", tp_mesh)
    return model


def apply_fsdp(model: TinyTransformer, dp_mesh) -> TinyTransformer:
    """ZeRO-3 by FSDP2: each layer a unit, gathered for its forward and again for its backward."""
    from torch.distributed.fsdp import fully_shard
    for layer in model.layers:
        fully_shard(layer, mesh=dp_mesh)
    return fully_shard(model, mesh=dp_mesh)


def apply_ddp(model: nn.Module, ctx, dp_mesh) -> nn.Module:
    return DDP(model, device_ids=ctx.device_ids, process_group=dp_mesh.get_group())


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """What this rank holds of the parameters, gradients and optimizer states. A DTensor's own
    ``numel`` is the whole tensor's, so each is counted by its local shard."""
    def nbytes(tensors):
        local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors if t is not None]
        return sum(t.numel() * t.element_size() for t in local)
    params = list(model.parameters())
    states = [t for s in optimizer.state.values() for t in s.values()
              if isinstance(t, torch.Tensor) and t.dim() > 0]  # Adam's step counters are scalars
    return {"parameters": nbytes(params), "gradients": nbytes(p.grad for p in params),
            "optimizer states": nbytes(states)}


def whole_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole, under the unwrapped model's names (collective for DTensors)."""
    # A (dp, tp)-sharded weight is gathered in two all_gathers, and torch logs that this is slower
    # than one: true, and beside the point of a check that runs once.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    return {n.removeprefix("module."): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
            for n, p in model.named_parameters()}


def _data(steps: int, batch: int, seq: int, hidden: int, seed: int, device) -> list:
    gen = torch.Generator().manual_seed(seed + 7)
    return [(torch.randn(batch, seq, hidden, generator=gen).to(device),
             torch.randn(batch, seq, hidden, generator=gen).to(device)) for _ in range(steps)]


def train(model: nn.Module, batches: list, dp_size: int, dp_rank: int, lr: float) -> tuple[list, list]:
    """Adam on mean-squared error; each replica takes its 1/dp of every global batch. Returns the
    global losses (this replica's, to be averaged over replicas) and the last step's collectives."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses, calls = [], []
    for x, y in batches:
        n = len(x) // dp_size
        x, y = x[dp_rank * n:(dp_rank + 1) * n], y[dp_rank * n:(dp_rank + 1) * n]
        with CommBytes() as comm:  # counted at every step; the last one is kept (the first two set up)
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
        calls = comm.calls
    return losses, calls, local_state_bytes(model, optimizer)


def strategy_costs(hidden: int = 64, heads: int = 4, layers: int = 2, batch: int = 8, seq: int = 16,
                   steps: int = 3, lr: float = 1e-3, seed: int = 0) -> dict:
    """The same model and global batches under DDP, FSDP, TP (each over every rank), then FSDP x TP
    (``Topology(dp=2, tp=world_size // 2)``): each one's losses, final weights, last-step
    collectives and state bytes on this rank. The reference trains unsplit in this same process."""
    # FSDP2 warns that an in-place op on a module's output view would skip its hook; none is done here.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
    with distributed(seed) as ctx:
        p = ctx.world_size
        batches = _data(steps, batch, seq, hidden, seed, ctx.device)
        torch.manual_seed(seed)
        init = TinyTransformer(hidden, heads, layers).state_dict()

        def fresh():
            model = TinyTransformer(hidden, heads, layers).to(ctx.device)
            model.load_state_dict(init)
            return model

        if p < 4 or p % 2:
            raise ValueError(f"FSDP x TP here is 2 x (p / 2): launch an even p >= 4, not {p}")
        if steps < 3:  # DDP's step 2 broadcasts the buckets it rebuilt from step 1's gradient order
            raise ValueError(f"the last step is the one counted, and steps 1 and 2 set up: steps >= 3, not {steps}")
        if heads % p:
            raise ValueError(f"TP over {p} ranks gives each whole heads: heads = {heads} must be a multiple of {p}")
        dp_mesh, tp_mesh = (Topology(**{k: p}).build_mesh(ctx.device)[k] for k in ("dp", "tp"))
        topo = Topology(dp=2, tp=p // 2).check(p)
        mesh = topo.build_mesh(ctx.device)  # ("dp", "tp"): FSDP over rows, TP within a row
        dp_rank = topo.coords(ctx.rank)[0]
        layouts = {  # name: (model, dp size, this rank's replica)
            "DDP": (apply_ddp(fresh(), ctx, dp_mesh), p, ctx.rank),
            "FSDP": (apply_fsdp(fresh(), dp_mesh), p, ctx.rank),
            "TP": (apply_stack_tp(fresh(), tp_mesh), 1, 0),
            "FSDP x TP": (apply_fsdp(apply_stack_tp(fresh(), mesh["tp"]), mesh["dp"]), topo.dp, dp_rank),
        }
        out = {}
        for i, (name, (model, dp_size, replica)) in enumerate(layouts.items()):
            losses, calls, states = train(model, batches, dp_size, replica, lr)
            out[name] = {"losses": losses, "calls": calls, "states": states, "dp": dp_size, "replica": replica,
                         "tp": p // dp_size, "weights": whole_state(model)}
            report(i + 1, len(layouts))
        reference = fresh()
        ref_losses, _, ref_states = train(reference, batches, 1, 0, lr)
        n_split, n_kept = split_params(reference)
        return {"rank": ctx.rank, "p": p, "layouts": out, "dp_rank": dp_rank,
                "tp_rank": topo.tp_rank(ctx.rank), "mesh": {k: mesh[k].mesh.tolist() for k in ("dp", "tp")},
                "reference": {"losses": ref_losses, "weights": whole_state(reference), "states": ref_states,
                              "initial": {k: v.cpu() for k, v in init.items()}},
                "n_split": n_split, "n_kept": n_kept, "shape": (batch, seq, hidden), "layers": layers}

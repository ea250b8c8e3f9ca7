"""Tensor parallelism (chapter 6.3): one layer's weight matrices split across ranks, Megatron's way.

Two small blocks, in ``helpers/models.py`` style, and the same split of each written twice:

* by hand (``naive_block_step``): each rank keeps a slice of every weight, and two
  autograd functions move the data: ``copy_to_tp`` (forward: identity, backward:
  all_reduce) and ``reduce_from_tp`` (forward: all_reduce, backward: identity). These are
  the f and g of Megatron-LM (Shoeybi et al., 2019), one pair per block.
* with DTensor (``library_block_step``): ``parallelize_module`` with ``ColwiseParallel``
  on the first Linear(s) and ``RowwiseParallel`` on the last; torch inserts the same
  collectives, and ``CommDebugMode`` counts them.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(block_equality, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run tensor_parallel.block_equality
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor.debug import CommDebugMode

from helpers import devices
from helpers.dist import distributed


class MLPBlock(nn.Module):
    """A transformer's MLP: hidden -> 4 hidden -> hidden, GELU between (Megatron's split: up by
    columns, down by rows, so the 4h-wide activation never has to be gathered)."""

    def __init__(self, hidden: int = 64, ratio: int = 4):
        super().__init__()
        self.up = nn.Linear(hidden, ratio * hidden)
        self.down = nn.Linear(ratio * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class SelfAttention(nn.Module):
    """Causal multi-head self-attention. Heads are independent, so a rank holding q, k, v's
    columns for some heads computes those heads whole; ``view(..., -1, head_dim)`` finds how
    many heads this rank holds from the width it was given."""

    def __init__(self, hidden: int = 64, heads: int = 4):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden = {hidden} must be a multiple of heads = {heads}")
        self.head_dim = hidden // heads
        # No bias on the keys: it adds one constant to each query's scores, which softmax ignores, so
        # its gradient is zero, and Adam would turn that zero's rounding noise into full-size steps.
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=name != "k") for name in "qkv")
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (f(x).view(b, s, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


BLOCKS = {"mlp": MLPBlock, "attention": SelfAttention}
# Which Linears are split by columns (their outputs) and which by rows (their inputs).
COLUMNS = {"mlp": ("up",), "attention": ("q", "k", "v")}
ROWS = {"mlp": ("down",), "attention": ("out",)}


# --- By hand: slices of the weights, and Megatron's f and g --------------------------------

class _CopyToTP(torch.autograd.Function):
    """f: every rank needs the whole input; its gradient is the sum of each rank's part."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class _ReduceFromTP(torch.autograd.Function):
    """g: each rank holds a partial sum of the output; every rank gets the whole sum."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def copy_to_tp(x: torch.Tensor) -> torch.Tensor:
    return _CopyToTP.apply(x)


def reduce_from_tp(x: torch.Tensor) -> torch.Tensor:
    return _ReduceFromTP.apply(x)


def column_slice(linear: nn.Linear, rank: int, t: int) -> nn.Linear:
    """Output features rank*out/t ... (rank+1)*out/t: rows of ``weight`` (y = x W^T), columns of W^T."""
    n = linear.out_features // t
    part = nn.Linear(linear.in_features, n, bias=linear.bias is not None, device=linear.weight.device)
    with torch.no_grad():
        part.weight.copy_(linear.weight[rank * n:(rank + 1) * n])
        if linear.bias is not None:
            part.bias.copy_(linear.bias[rank * n:(rank + 1) * n])
    return part


def row_slice(linear: nn.Linear, rank: int, t: int) -> nn.Linear:
    """Input features rank*in/t ...: a partial product on each rank. The bias is added once,
    after the sum, so the slice has none (``naive_forward`` adds it)."""
    n = linear.in_features // t
    part = nn.Linear(n, linear.out_features, bias=False, device=linear.weight.device)
    with torch.no_grad():
        part.weight.copy_(linear.weight[:, rank * n:(rank + 1) * n])
    return part


def naive_shard(block: nn.Module, kind: str, rank: int, t: int) -> nn.ModuleDict:
    """This rank's slices of ``block``, under the block's own Linear names."""
    parts = {n: column_slice(getattr(block, n), rank, t) for n in COLUMNS[kind]}
    parts |= {n: row_slice(getattr(block, n), rank, t) for n in ROWS[kind]}
    return nn.ModuleDict(parts)


def naive_forward(block: nn.Module, parts: nn.ModuleDict, kind: str, x: torch.Tensor) -> torch.Tensor:
    """The block's forward on this rank's slices: f, the columns, the rows, g, then the bias."""
    x = copy_to_tp(x)
    if kind == "mlp":
        partial = parts["down"](F.gelu(parts["up"](x)))
    else:
        b, s, _ = x.shape
        q, k, v = (parts[n](x).view(b, s, -1, block.head_dim).transpose(1, 2) for n in "qkv")
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        partial = parts["out"](y.transpose(1, 2).reshape(b, s, -1))
    return reduce_from_tp(partial) + getattr(block, ROWS[kind][0]).bias


def column_gather(linear: nn.Linear, x: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """One Linear split by columns and nothing after it: all_gather the slices of its output."""
    part = column_slice(linear, rank, t)(x)
    pieces = [torch.empty_like(part) for _ in range(t)]
    dist.all_gather(pieces, part.contiguous())
    return torch.cat(pieces, dim=-1)


def row_reduce(linear: nn.Linear, x: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """One Linear split by rows: each rank takes its slice of the input features; all_reduce the sums."""
    n = linear.in_features // t
    out = row_slice(linear, rank, t)(x[..., rank * n:(rank + 1) * n]).contiguous()
    dist.all_reduce(out)
    return out + linear.bias


# --- With DTensor: parallelize_module, and the collectives counted -------------------------

def tp_plan(kind: str, one_input: bool = True) -> dict:
    """The block's plan for ``parallelize_module``. With ``one_input``, the attention block's input
    becomes one replicated DTensor before q, k and v read it (torchtitan's ``PrepareModuleInput``),
    so its gradient is summed over the three and all-reduced once, as Megatron's f does."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel
    plan = {n: ColwiseParallel() for n in COLUMNS[kind]} | {n: RowwiseParallel() for n in ROWS[kind]}
    if one_input and len(COLUMNS[kind]) > 1:
        plan[""] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))
    return plan


def apply_tp(block: nn.Module, kind: str, tp_mesh, one_input: bool = True) -> nn.Module:
    """Split ``block`` over the 1-D ``tp_mesh`` in place (torchtitan's apply_tp, for one block)."""
    from torch.distributed.tensor.parallel import parallelize_module
    plan = tp_plan(kind, one_input)
    if "" in plan:
        parallelize_module(block, tp_mesh, plan.pop(""))
    return parallelize_module(block, tp_mesh, plan)


class CommBytes(CommDebugMode):
    """``CommDebugMode``, also keeping each collective's kind, phase and message size M: the bytes
    of the whole tensor reduced or gathered (nccl-tests' size; ``theory.BUS_FACTOR`` turns it into
    what one rank sends)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self.get_total_counts()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.get_total_counts() > before:
            phase = "backward" if self.advanced_module_tracker.is_bw else "forward"
            self.calls.append((_kind(func), phase, _message_bytes(func, args)))
        return out


def _kind(func) -> str:
    name = func._overloadpacket.__name__.strip("_")
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        if kind.replace("_", "") in name.replace("_", "").replace("base", ""):
            return kind
    return name


def _tensors(args) -> list[torch.Tensor]:
    flat = []
    for a in args:
        if isinstance(a, torch.Tensor):
            flat.append(a)
        elif isinstance(a, (list, tuple)):
            flat += _tensors(a)
    return flat


def _message_bytes(func, args) -> int:
    """The whole message: an all_gather's output, a reduce_scatter's input, an all_reduce's tensor."""
    sizes = [t.numel() * t.element_size() for t in _tensors(args)]
    if str(func).startswith(("all_gather_into_tensor", "_c10d_functional.all_gather_into_tensor")):
        return sizes[0] * int(args[1])  # functional all_gather: (shard, group_size, group)
    return max(sizes) if _kind(func) != "all_reduce" else sum(sizes)


def _grads(block: nn.Module) -> dict[str, torch.Tensor]:
    """Whole gradients under the block's names; a DTensor's are gathered (a collective)."""
    return {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().cpu()
            for n, p in block.named_parameters()}


def _gather_naive_grads(block: nn.Module, parts: nn.ModuleDict, kind: str, t: int) -> dict:
    """The slices' gradients put back together: columns along dim 0, rows along dim 1."""
    grads = {}
    for name, part in parts.items():
        for pname, p in part.named_parameters():
            pieces = [torch.empty_like(p.grad) for _ in range(t)]
            dist.all_gather(pieces, p.grad.contiguous())
            grads[f"{name}.{pname}"] = torch.cat(pieces, dim=0 if name in COLUMNS[kind] else 1).cpu()
    rows_bias = f"{ROWS[kind][0]}.bias"
    grads[rows_bias] = dict(block.named_parameters())[rows_bias].grad.cpu()
    return grads


def _run(fn, x: torch.Tensor):
    """Forward and backward of a sum-of-squares loss, collectives counted: (out, x.grad, calls)."""
    x = x.detach().clone().requires_grad_()
    with CommBytes() as comm:
        out = fn(x)
        out.pow(2).sum().backward()
    return out.detach().cpu(), x.grad.cpu(), comm.calls


def block_equality(hidden: int = 64, heads: int = 4, batch: int = 4, seq: int = 16, seed: int = 0) -> dict:
    """Each block three ways on t = world-size ranks: whole, by hand, and with ``parallelize_module``
    (attention also with a Colwise plan alone, no ``PrepareModuleInput``). Each returns its output,
    the input's gradient, the block's whole gradients, and the collectives it made."""
    with distributed(seed) as ctx:
        t, rank = ctx.world_size, ctx.rank
        mesh = devices.mesh(ctx.device, (t,), ("tp",))
        x = torch.randn(batch, seq, hidden, device=ctx.device)  # the same seed: the same x everywhere
        results = {}
        for kind, make in BLOCKS.items():
            torch.manual_seed(seed + 1)
            block = make(hidden, heads).to(ctx.device) if kind == "attention" else make(hidden).to(ctx.device)
            state = {k: v.clone() for k, v in block.state_dict().items()}
            runs = {"whole": (*_run(block, x), _grads(block))}
            block.zero_grad(set_to_none=True)
            parts = naive_shard(block, kind, rank, t)
            runs["naive"] = (*_run(lambda v: naive_forward(block, parts, kind, v), x),
                             _gather_naive_grads(block, parts, kind, t))
            variants = {"library": True} | ({"library, q k v apart": False} if kind == "attention" else {})
            for name, one_input in variants.items():
                fresh = make(hidden, heads) if kind == "attention" else make(hidden)
                fresh.load_state_dict(state)
                fresh = apply_tp(fresh.to(ctx.device), kind, mesh["tp"], one_input)
                runs[name] = (*_run(fresh, x), _grads(fresh))
            results[kind] = {name: {"out": o, "x_grad": g, "calls": c, "grads": w}
                             for name, (o, g, c, w) in runs.items()}
        probe = torch.randn(batch, hidden, device=ctx.device)
        linear = nn.Linear(hidden, 2 * hidden).to(ctx.device)
        return {"rank": rank, "t": t, "shape": (batch, seq, hidden), "blocks": results,
                "one_linear": {"whole": linear(probe).detach().cpu(),
                               "columns": column_gather(linear, probe, rank, t).detach().cpu(),
                               "rows": row_reduce(linear, probe, rank, t).detach().cpu()}}

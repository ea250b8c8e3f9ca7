"""Sequence parallelism (chapter 8.2): chapter 6.3's tensor parallelism on part 8's GPT, with the
LayerNorm and dropout regions split along the sequence (Korthikanti et al., 2022).

Outside the split Linears (LayerNorms, residual adds, dropouts) TP leaves every rank the whole
sequence. SP splits those regions along the sequence, and swaps each of TP's all-reduces for its
two halves: an all-gather where a block starts, a reduce-scatter where it ends.

* by hand (``sharded_forward``): 6.3's column and row slices of each block, entered and left
  by TP's f and g (``mode="tp"``) or by SP's gather and scatter (``mode="sp"``); with
  ``keep="shard"``, the block's first Linears keep only this rank's slice of their input for the
  backward and gather it again there, as Megatron-LM does;
* with DTensor (``apply_sp``): torchtitan's plan, ``SequenceParallel`` on the norms,
  ``PrepareModuleInput`` before attention and the MLP, and ``loss_parallel`` on the head.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(sp_equality, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run sequence_parallel.sp_equality
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from helpers import compat, devices, gpt, measure
from helpers.dist import distributed
from helpers.recipes.tensor_parallel import CommBytes, column_slice, copy_to_tp, reduce_from_tp, row_slice

MODES = ("tp", "sp")


# --- By hand: the sequence gathered where a block starts, reduce-scattered where it ends -------

def _gather_seq(x: torch.Tensor) -> torch.Tensor:
    """(b, s/t, h) on each rank -> (b, s, h), the ranks' slices in rank order."""
    t = dist.get_world_size()
    part = x.transpose(0, 1).contiguous()  # the collective concatenates along dim 0
    out = torch.empty((t * part.shape[0], *part.shape[1:]), dtype=x.dtype, device=x.device)
    compat.all_gather_single(out, part)
    # Contiguous once here: a Linear reading a transposed view copies it, and saves the copy, each.
    return out.transpose(0, 1).contiguous()


def _scatter_seq(x: torch.Tensor) -> torch.Tensor:
    """(b, s, h) partial sums on each rank -> this rank's (b, s/t, h) slice of their sum."""
    t = dist.get_world_size()
    whole = x.transpose(0, 1).contiguous()
    out = torch.empty((whole.shape[0] // t, *whole.shape[1:]), dtype=x.dtype, device=x.device)
    compat.reduce_scatter_single(out, whole)
    return out.transpose(0, 1)


class _GatherFromSP(torch.autograd.Function):
    """g: forward all-gathers the sequence; backward reduce-scatters the gradient."""

    @staticmethod
    def forward(ctx, x):
        return _gather_seq(x)

    @staticmethod
    def backward(ctx, grad):  # each rank's split Linears gave a partial gradient for every position
        return _scatter_seq(grad)


class _ScatterToSP(torch.autograd.Function):
    """g-bar: forward reduce-scatters the partial sums; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x):
        return _scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad)


class _GatheredLinears(torch.autograd.Function):
    """g and the column-split Linears that read its output, fused (Megatron-LM's way): the backward
    needs the whole input for the weights' gradients, but only this rank's slice is kept, and
    it is gathered again in the backward. Memory saved, one all-gather more."""

    @staticmethod
    def forward(ctx, x, *weights_and_biases):
        ctx.save_for_backward(x, *weights_and_biases)
        whole = _gather_seq(x)
        pairs = zip(weights_and_biases[::2], weights_and_biases[1::2])
        return tuple(F.linear(whole, w, b) for w, b in pairs)

    @staticmethod
    def backward(ctx, *grads):
        x, *wb = ctx.saved_tensors
        whole = _gather_seq(x)
        grad_x, out = 0, []
        for g, w in zip(grads, wb[::2]):
            grad_x = grad_x + g @ w
            out += [g.flatten(0, -2).T @ whole.flatten(0, -2), g.sum(dim=tuple(range(g.dim() - 1)))]
        return (_scatter_seq(grad_x), *out)


gather_from_sp, scatter_to_sp = _GatherFromSP.apply, _ScatterToSP.apply


def shard_gpt(model: gpt.GPT, rank: int, t: int) -> nn.ModuleList:
    """This rank's slices of every block: q, k, v and the MLP's first Linear by columns (heads),
    each block's last Linears by rows (6.3's ``column_slice`` and ``row_slice``)."""
    if model.cfg.heads % t:
        raise ValueError(f"{model.cfg.heads} heads do not split evenly over {t} ranks")
    return nn.ModuleList(nn.ModuleDict({
        "attn": nn.ModuleDict({n: column_slice(getattr(b.attn, n), rank, t) for n in ("wq", "wk", "wv")}
                              | {"proj": row_slice(b.attn.proj, rank, t)}),
        "mlp": nn.ModuleDict({"fc": column_slice(b.mlp.fc, rank, t), "proj": row_slice(b.mlp.proj, rank, t)}),
    }) for b in model.blocks)


def _first_linears(x, linears, mode: str, keep: str):
    """The block's entry (f under TP, g under SP), then its column-split Linears."""
    if mode == "sp" and keep == "shard":
        return _GatheredLinears.apply(x, *(p for lin in linears for p in (lin.weight, lin.bias)))
    x = copy_to_tp(x) if mode == "tp" else gather_from_sp(x)
    return tuple(lin(x) for lin in linears)


def _exit(partial: torch.Tensor, mode: str) -> torch.Tensor:  # g under TP, g-bar under SP
    return reduce_from_tp(partial) if mode == "tp" else scatter_to_sp(partial)


def sharded_forward(model: gpt.GPT, parts: nn.ModuleList, idx: torch.Tensor, rank: int, t: int,
                    mode: str = "sp", keep: str = "whole") -> torch.Tensor:
    """``model``'s forward on this rank's slices: the logits of every position under TP, of this
    rank's ``s/t`` positions under SP (they never leave it: the loss is taken there)."""
    if mode not in MODES or keep not in ("whole", "shard"):
        raise ValueError(f"mode must be one of {MODES} and keep 'whole' or 'shard', got {mode!r}, {keep!r}")
    if model.cfg.dropout:
        raise ValueError("the split GPT is checked with dropout = 0: each rank would draw its own masks")
    if (s := idx.shape[1]) % t:
        raise ValueError(f"a sequence of {s} tokens does not split evenly over {t} ranks")
    pos = torch.arange(s, device=idx.device)
    if mode == "sp":
        mine = slice(rank * s // t, (rank + 1) * s // t)
        idx, pos = idx[:, mine], pos[mine]
    x = model.drop(model.tok_emb(idx) + model.pos_emb(pos))
    for block, part in zip(model.blocks, parts):
        x = _block(block, part, x, mode, keep)
    return model.head(model.ln_f(x))


def _block(block: gpt.Block, part: nn.ModuleDict, x: torch.Tensor, mode: str, keep: str) -> torch.Tensor:
    """One pre-LayerNorm block on this rank's slices; ``x`` is this rank's positions under SP."""
    a, m = part["attn"], part["mlp"]
    q, k, v = _first_linears(block.ln1(x), (a["wq"], a["wk"], a["wv"]), mode, keep)
    b, n = q.shape[:2]
    q, k, v = (z.view(b, n, -1, block.attn.head_dim).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, -1)
    x = x + block.attn.resid_drop(_exit(a["proj"](y), mode) + block.attn.proj.bias)
    (hidden,) = _first_linears(block.ln2(x), (m["fc"],), mode, keep)
    return x + block.mlp.drop(_exit(m["proj"](F.gelu(hidden)), mode) + block.mlp.proj.bias)


def replicated(model: gpt.GPT) -> dict[str, nn.Parameter]:
    """The parameters every rank keeps whole: embeddings, norms, the row-split Linears' biases.
    Under SP each rank sees only its positions, so their gradients are partial sums."""
    split = (".wq.", ".wk.", ".wv.", ".fc.", ".proj.weight")  # shard_gpt's slices
    return {n: p for n, p in model.named_parameters() if not (n.startswith("blocks.") and any(k in n for k in split))}


def _whole_grads(model: gpt.GPT, parts: nn.ModuleList, t: int) -> dict[str, torch.Tensor]:
    """Every gradient under the model's names: the slices' gathered (columns on dim 0, rows on dim 1)."""
    grads = {n: p.grad.detach().cpu() for n, p in replicated(model).items()}
    for i, part in enumerate(parts):
        for blk, lins in part.items():
            for name, lin in lins.items():
                for pname, p in lin.named_parameters():
                    pieces = [torch.empty_like(p.grad) for _ in range(t)]
                    dist.all_gather(pieces, p.grad.contiguous())
                    dim = 1 if name == "proj" else 0
                    grads[f"blocks.{i}.{blk}.{name}.{pname}"] = torch.cat(pieces, dim=dim).cpu()
    return grads


def _cpu_grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().cpu()
            for n, p in model.named_parameters()}


def _pending(model: nn.Module) -> list[str]:
    """Parameters whose DTensor gradient is left a partial sum: its all-reduce waits for a reader."""
    from torch.distributed.tensor import Partial
    return [n for n, p in model.named_parameters() if any(isinstance(pl, Partial) for pl in p.grad.placements)]


# --- With DTensor: torchtitan's plan for TP with sequence parallelism -------------------------

def sp_plan(model: gpt.GPT) -> dict:
    """``parallelize_module``'s plan: the embeddings' output and every norm sharded along the
    sequence (``Shard(1)``), gathered (``Replicate``) where attention and the MLP start, and
    reduce-scattered back where their row-split Linears end; the head split by vocabulary, its
    logits left sharded for ``loss_parallel``."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
    )
    plan = {"tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "pos_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
            "ln_f": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    for i in range(len(model.blocks)):
        gathered = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan |= {f"blocks.{i}.ln1": SequenceParallel(), f"blocks.{i}.ln2": SequenceParallel(),
                 f"blocks.{i}.attn": gathered, f"blocks.{i}.mlp": gathered,
                 **{f"blocks.{i}.attn.{n}": ColwiseParallel() for n in ("wq", "wk", "wv")},
                 f"blocks.{i}.attn.proj": RowwiseParallel(output_layouts=Shard(1)),
                 f"blocks.{i}.mlp.fc": ColwiseParallel(),
                 f"blocks.{i}.mlp.proj": RowwiseParallel(output_layouts=Shard(1))}
    return plan


def apply_sp(model: gpt.GPT, tp_mesh) -> gpt.GPT:
    """Split ``model`` over the 1-D ``tp_mesh`` in place. The head and the token embedding are
    both sharded by vocabulary rows (``Shard(0)``), so the tied weight stays one parameter: tie
    the head to the embedding's DTensor again after the plan made each its own."""
    from torch.distributed.tensor.parallel import parallelize_module
    parallelize_module(model, tp_mesh, sp_plan(model))
    if model.cfg.tied:
        model.head.weight = model.tok_emb.weight
    return model


# --- The job: whole, TP and SP by hand, SP with DTensor; equal, counted, measured -------------

def _step(forward, loss_of) -> dict:
    """Forward and backward, the collectives counted."""
    with CommBytes() as comm:
        logits = forward()
        loss = loss_of(logits)
        loss.backward()
    return {"logits": logits.detach(), "loss": loss.detach(), "calls": comm.calls, "sync": []}


def _sync_replicated(model: gpt.GPT) -> list:
    """Megatron's all-reduce of the gradients of the weights SP keeps whole (one flat message)."""
    grads = [p.grad for p in replicated(model).values()]
    with CommBytes() as sync:
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
    torch.nn.utils.vector_to_parameters(flat, grads)
    return sync.calls


def sp_equality(size: str = "gpt-tiny", batch: int = 2, seed: int = 0) -> dict:
    """The GPT four ways on t = world-size ranks: whole, TP and SP by hand (SP keeping the whole
    gathered input, or only its shard), SP with DTensor. Each gives its logits, loss, whole
    gradients and collectives; SP by hand also its replicated weights' gradient all-reduce; and
    the activation bytes each keeps for the backward."""
    with distributed(seed) as ctx:
        t, rank, dev = ctx.world_size, ctx.rank, ctx.device
        cfg = gpt.CONFIGS[size] if isinstance(size, str) else size
        torch.manual_seed(seed)
        model = gpt.build(cfg).to(dev)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        idx = torch.randint(cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(seed)).to(dev)
        idx, targets = idx[:, :-1], idx[:, 1:]
        mine = slice(rank * cfg.seq // t, (rank + 1) * cfg.seq // t)

        def loss_of(wanted, scale=1):
            return lambda z: F.cross_entropy(z.flatten(0, 1), wanted.flatten()) / scale

        runs = {"whole": _step(lambda: model(idx), loss_of(targets)) | {"grads": _cpu_grads(model)}}
        for name, mode, keep in (("TP", "tp", "whole"), ("SP", "sp", "whole"), ("SP, shard kept", "sp", "shard")):
            model.zero_grad(set_to_none=True)
            parts = shard_gpt(model, rank, t)
            # Under SP each rank's loss is the mean over its s/t positions: the whole mean is their mean.
            run = _step(lambda: sharded_forward(model, parts, idx, rank, t, mode, keep),
                        loss_of(targets, 1) if mode == "tp" else loss_of(targets[:, mine], t))
            if mode == "sp":
                run["sync"] = _sync_replicated(model)
                dist.all_reduce(run["loss"])
                run["logits"] = _gather_seq(run["logits"])
            runs[name] = run | {"grads": _whole_grads(model, parts, t)}

        from torch.distributed.tensor.parallel import loss_parallel
        lib = gpt.build(cfg).to(dev)
        lib.load_state_dict(state)
        apply_sp(lib, devices.mesh(dev, (t,), ("tp",))["tp"])
        with loss_parallel():
            run = _step(lambda: lib(idx), loss_of(targets))
        runs["SP, DTensor"] = run | {"logits": run["logits"].full_tensor(), "loss": run["loss"].full_tensor(),
                                     "pending": _pending(lib), "grads": _cpu_grads(lib)}
        for run in runs.values():
            run["logits"], run["loss"] = run["logits"].cpu(), float(run["loss"])
        return {"rank": rank, "t": t, "config": cfg.to_dict(), "batch": batch, "runs": runs,
                "activations": _activation_bytes(model, lib, batch, rank, t, dev)}


def _saved(model: nn.Module, x: torch.Tensor, blocks) -> int:
    """Activation bytes autograd keeps for the blocks' backward (each storage once; weights not)."""
    x = x.detach().requires_grad_()
    return sum(measure.saved_activation_bytes(model, lambda: blocks(x)).values())


def _activation_bytes(model: gpt.GPT, lib: gpt.GPT, batch: int, rank: int, t: int, dev) -> dict[str, int]:
    """Bytes the L blocks keep for their backward on this rank, each way (no embeddings, no head:
    Korthikanti's count is per layer)."""
    s, h = model.cfg.seq, model.cfg.hidden
    x = torch.randn(batch, s, h, device=dev)
    mine = x[:, rank * s // t:(rank + 1) * s // t]
    parts = shard_gpt(model, rank, t)
    both = nn.ModuleList([model, parts])

    def by_hand(mode, keep):
        return lambda z: [z := _block(block, part, z, mode, keep) for block, part in zip(model.blocks, parts)]

    def plain(m):
        return lambda z: [z := block(z) for block in m.blocks]
    return {"whole": _saved(model, x, plain(model)), "TP": _saved(both, x, by_hand("tp", "whole")),
            "SP": _saved(both, mine, by_hand("sp", "whole")),
            "SP, shard kept": _saved(both, mine, by_hand("sp", "shard")), "SP, DTensor": _saved(lib, mine, plain(lib))}

"""4D on a laptop (chapter 8.4): part 8's GPT on one DeviceMesh, pipelined over ``pp``, each layer split
over ``tp`` with its sequence split too (SP), and every shard's states sharded over ``dp`` (FSDP2).

torchtitan's composition, with the GPT of ``helpers.gpt``: the layout is checked once (``Topology``),
the mesh is built once (``devices.mesh``), and each parallelism is a small function with explicit
arguments, applied in torchtitan's order: cut the model into stages, split each stage's layers over
tp, shard what is left over dp::

    helpers.launch(train_4d, nprocs=8)                # dp 2 x tp 2 x pp 2
    torchrun --standalone --nproc-per-node 8 -m helpers.run four_d.train_4d

Every collective of a step is counted by the mesh dimension whose group it ran on
(``traffic.MeshTraffic``): FSDP's all-gathers and reduce-scatters on dp, DTensor's on tp, the
pipeline's sends on pp.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining
from torch.utils.checkpoint import checkpoint
from torch.distributed.tensor import DTensor

from helpers import devices, text
from helpers.dist import distributed, report
from helpers.gpt import CONFIGS, GPT, GPTConfig
from helpers.measure import held_state_bytes
from helpers.recipes.fsdp import apply_fsdp
from helpers.recipes.pipelining import SavedBytes, _Held
from helpers.recipes.traffic import MeshTraffic, counts_sockets, written_bytes
from helpers.theory.four_d import stage_blocks
from helpers.topology import Topology

# gpt-tiny, its head untied: tied, the first stage's embedding and the last stage's head would be one
# weight on two ranks of the pp group, and their gradients would need a sum across stages of their own.
CONFIG = dataclasses.replace(CONFIGS["gpt-tiny"], tied=False)


class GPTStage(nn.Module):
    """One pipeline stage: the GPT's own modules from ``blocks[lo:hi]``, with the embeddings if it
    is the first stage and the final LayerNorm and head if it is the last. Parameter names stay the
    GPT's (``blocks.1.mlp.fc.weight``), so a stage's weights are compared with the whole model's."""

    def __init__(self, gpt: GPT, lo: int, hi: int, first: bool, last: bool, recompute: bool = False):
        super().__init__()
        self.tok_emb, self.pos_emb = (gpt.tok_emb, gpt.pos_emb) if first else (None, None)
        self.blocks = nn.ModuleDict({str(i): gpt.blocks[i] for i in range(lo, hi)})
        self.ln_f, self.head = (gpt.ln_f, gpt.head) if last else (None, None)
        self.recompute = recompute  # full recomputation: a block keeps its input, and runs again in backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None:  # token ids in; a (1, seq) position batch beside them
            pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            x = self.tok_emb(x) + self.pos_emb(pos)
        for block in self.blocks.values():
            # Checkpointed here, not wrapped: a wrapper would rename every parameter of the block.
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return self.head(self.ln_f(x)) if self.head is not None else x


def pipeline_split(gpt: GPT, pp_rank: int, pp: int, recompute: bool = False) -> GPTStage:
    """This pp rank's stage of ``gpt`` (one stage a rank: the 1F1B layout)."""
    lo, hi = stage_blocks(gpt.cfg.layers, pp)[pp_rank]
    return GPTStage(gpt, lo, hi, pp_rank == 0, pp_rank == pp - 1, recompute)


def apply_tp(stage: GPTStage, tp_mesh) -> GPTStage:
    """Megatron's split with sequence parallelism, over the 1-D ``tp_mesh``, as torchtitan plans it.

    Between blocks the residual stream is each rank's slice of the sequence (Shard(1)): LayerNorms
    run on the slice; each block's input is all-gathered before q, k, v (or fc), which are split by
    columns (heads); the row-split output Linear's partial sums are reduce-scattered back to slices.
    The embeddings are split by rows (tokens, positions) and their sums reduce-scattered to slices;
    the head gathers its input's slices and every rank gets whole logits.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    plan = {}
    if stage.tok_emb is not None:
        plan |= {name: RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
                 for name in ("tok_emb", "pos_emb")}
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    for i in stage.blocks:
        b = f"blocks.{i}"
        plan |= {f"{b}.ln1": SequenceParallel(), f"{b}.attn": gather,
                 f"{b}.attn.wq": ColwiseParallel(), f"{b}.attn.wk": ColwiseParallel(),
                 f"{b}.attn.wv": ColwiseParallel(), f"{b}.attn.proj": RowwiseParallel(output_layouts=Shard(1)),
                 f"{b}.ln2": SequenceParallel(), f"{b}.mlp": gather,
                 f"{b}.mlp.fc": ColwiseParallel(), f"{b}.mlp.proj": RowwiseParallel(output_layouts=Shard(1))}
    if stage.head is not None:
        plan |= {"ln_f": SequenceParallel(),
                 "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    return parallelize_module(stage, tp_mesh, plan)


def build_schedule(stage_module: nn.Module, pp_rank: int, pp: int, micro_batches: int, pp_mesh, device):
    """1F1B over the pp group: each micro-batch's loss is a mean, and the schedule divides the sum
    of their gradients by ``micro_batches``, so a step's gradient is the batch mean's."""
    stage = pipelining.PipelineStage(stage_module, pp_rank, pp, device, group=pp_mesh.get_group())
    return stage, pipelining.Schedule1F1B(stage, micro_batches, loss_fn=_loss)


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# --- The run --------------------------------------------------------------------------------------

def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole (a collective over dp and tp for a DTensor), under the GPT's names."""
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone()
            for n, p in module.named_parameters()}


class ActivationBytes(SavedBytes):
    """``SavedBytes`` for a model of DTensors and FSDP: a DTensor counts its local shard, and
    parameters are skipped, with the views of them that Linears save (``weight.t()``): under FSDP
    they are the gathered copies, not the shards the counter could be given, and model states."""

    def _pack(self, t):
        return t if _is_parameter(t) else _LocalHeld(self, t)


def _is_parameter(t) -> bool:
    """A parameter, or a view of one: its autograd history is views back to a parameter's."""
    fn = t.grad_fn
    while fn is not None and fn.name().startswith(("TBackward", "ViewBackward", "TransposeBackward",
                                                    "AliasBackward", "ExpandBackward")):
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return isinstance(t, nn.Parameter) or isinstance(getattr(fn, "variable", None), nn.Parameter)


class _LocalHeld(_Held):
    def __init__(self, owner: SavedBytes, tensor):
        super().__init__(owner, tensor.to_local() if isinstance(tensor, DTensor) else tensor)
        self.tensor = tensor  # unpacked as it was saved


ZERO = {2: False, 3: True}  # ZeRO stage -> FSDP2's reshard_after_forward: 3 gathers each layer again
RECOMPUTE = ("none", "full")


def check_layout(dp: int, tp: int, pp: int, world_size: int, config: GPTConfig, batch: int,
                 micro_batches: int, zero: int = 2, recompute: str = "none") -> Topology:
    """The layout, checked once before any group is made: ``Topology`` for the ranks, then what the
    GPT needs of it. Each refusal is one line that names the numbers."""
    if zero not in ZERO:
        raise ValueError(f"zero must be 2 or 3 (FSDP2 keeps the states sharded: ZeRO-2 without resharding "
                         f"after the forward, ZeRO-3 with it), got {zero!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    topo = Topology(dp=dp, pp=pp, tp=tp).check(world_size)
    stage_blocks(config.layers, pp)
    for what, n in (("sequence", config.seq), ("heads", config.heads), ("vocabulary", config.vocab)):
        if n % tp:
            raise ValueError(f"tp = {tp} must divide the {what} ({n}): each rank takes an equal slice")
    if batch % micro_batches:
        raise ValueError(f"a replica's batch of {batch} sequences does not cut into {micro_batches} "
                         "equal micro-batches")
    return topo


def train_4d(dp: int = 2, tp: int = 2, pp: int = 2, steps: int = 4, batch: int = 4, micro_batches: int = 2,
             lr: float = 0.1, momentum: float = 0.9, config: GPTConfig = CONFIG, seed: int = 0,
             zero: int = 2, recompute: str = "none") -> dict:
    """Train ``config``'s GPT for ``steps`` on dp x tp x pp ranks; each rank returns its losses, its
    stage's whole weights, every collective of the last step by mesh dimension, the model states it
    holds, the most bytes autograd held for backward, and each step's seconds. ``batch`` is one
    replica's sequences a step, cut into ``micro_batches``. Rank 0 also trains the whole GPT in one
    process on the same global batches, with the same optimizer, as the reference. ``zero``: 2 or 3
    (``ZERO``); ``recompute``: "full" checkpoints every block."""
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
    if steps < 3:
        raise ValueError(f"steps must be at least 3 (one sets up, one is timed, the last is counted), got {steps}")
    with distributed(seed) as ctx:
        topo = check_layout(dp, tp, pp, ctx.world_size, config, batch, micro_batches, zero, recompute)
        mesh = topo.build_mesh(ctx.device, every_dim=True)  # ("pp", "dp", "tp"): tp innermost
        dp_rank, pp_rank = topo.coords(ctx.rank)
        torch.manual_seed(seed)
        whole = GPT(config)
        init = {k: v.clone() for k, v in whole.state_dict().items()}
        stage = pipeline_split(whole, pp_rank, pp, recompute == "full").to(ctx.device)
        stage = apply_fsdp(apply_tp(stage, mesh["tp"]), mesh["dp"], reshard_after_forward=ZERO[zero])
        pipe, schedule = build_schedule(stage, pp_rank, pp, micro_batches, mesh["pp"], ctx.device)
        optimizer = torch.optim.SGD(stage.parameters(), lr=lr, momentum=momentum)
        ids, _ = text.split()
        data = text.batches(ids, batch, config.seq, steps, seed, rank=dp_rank, world_size=dp)
        losses, seconds, counter, saved = [], [], MeshTraffic(mesh), ActivationBytes()
        for step, (x, y) in enumerate(data):
            x, y = x.to(ctx.device), y.to(ctx.device)
            # Step 1 also infers the stages' shapes (a forward of its own); the last step is counted,
            # and counting every op in Python costs time: the steps between are the ones timed.
            counted = step == steps - 1
            devices.sync(ctx.device)
            start = time.perf_counter()
            with contextlib.ExitStack() as counting:
                if counted:
                    counting.enter_context(counter), counting.enter_context(saved.hooks())
                    written = written_bytes()  # what this process writes to its sockets (Linux)
                kwargs = {"target": y, "losses": []} if pipe.is_last else {}
                schedule.step(*((x,) if pipe.is_first else ()), **kwargs)
                optimizer.step()
                states = held_state_bytes(stage.parameters(), optimizer)  # gradients still held
                optimizer.zero_grad(set_to_none=True)
            devices.sync(ctx.device)
            seconds.append(time.perf_counter() - start)
            if counted:
                wire = written_bytes() - written if counts_sockets(ctx.backend) and written is not None else None
            if pipe.is_last:
                losses.append(torch.stack(kwargs["losses"]).mean().item())
            report(step + 1, steps)
        weights = _weights(stage)
        out = {"rank": ctx.rank, "dp_rank": dp_rank, "pp_rank": pp_rank, "tp_rank": topo.tp_rank(ctx.rank),
               "layout": {"dp": dp, "tp": tp, "pp": pp}, "losses": losses, "seconds": seconds,
               "calls": counter.calls, "wire_bytes": wire, "states": states, "peak_saved": saved.peak,
               "memory": devices.peak_memory(ctx.device), "config": config.to_dict(),
               "batch": batch, "micro_batches": micro_batches, "backend": ctx.backend,
               "zero": zero, "recompute": recompute,
               "mesh": mesh.mesh.tolist(),  # [pp][dp][tp] -> global rank
               "weights": weights if dp_rank == 0 and topo.tp_rank(ctx.rank) == 0 else None}
        if ctx.rank == 0:
            out["reference"] = reference(config, init, ids, batch * dp, steps, lr, momentum, seed, ctx.device)
        return out


def reference(config: GPTConfig, init: dict, ids: torch.Tensor, global_batch: int, steps: int,
              lr: float, momentum: float, seed: int, device: torch.device) -> dict:
    """The whole GPT in this one process on ``device``, from the same initial weights, on the same
    global batches."""
    model = GPT(config)
    model.load_state_dict(init)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses, seconds = [], []
    for x, y in text.batches(ids, global_batch, config.seq, steps, seed):
        devices.sync(device)
        start = time.perf_counter()
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        devices.sync(device)
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    weights = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    return {"losses": losses, "seconds": seconds, "weights": weights}


def context_parallel_probe(heads: int = 4, seq: int = 64, head_dim: int = 16, seed: int = 0) -> dict:
    """Whether context parallelism (torch's ring attention) runs here: causal attention over a cp mesh
    of every rank, each holding 1/cp of the sequence, with the kernel ``F.scaled_dot_product_attention``
    picks on this device and with its plain-math kernel. Returns each one's error, or its largest
    difference from the whole attention."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with distributed(seed) as ctx:
        mesh = devices.mesh(ctx.device, (ctx.world_size,), ("cp",))
        torch.manual_seed(seed)
        q, k, v = (torch.randn(2, heads, seq, head_dim, device=ctx.device) for _ in range(3))
        whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = {"rank": ctx.rank, "device": str(ctx.device)}
        for name, kernels in (("default kernel", None), ("math kernel", [SDPBackend.MATH])):
            buffers = [t.clone() for t in (q, k, v)]
            try:
                with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2]), \
                        (sdpa_kernel(kernels) if kernels else contextlib.nullcontext()):
                    part = F.scaled_dot_product_attention(*buffers, is_causal=True)
                # context_parallel reorders the sequence to balance causal work; compare the whole back
                (full,) = context_parallel_unshard(mesh, [part], [2])
                out[name] = {"error": None, "max_diff": (full - whole).abs().max().item()}
            except (NotImplementedError, RuntimeError) as e:
                out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        return out

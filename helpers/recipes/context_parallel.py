"""Context parallelism (chapter 8.2): ring attention by hand, and torch's own ``context_parallel``.

Each rank holds some of the sequence's positions (``theory.positions``: one block in order, or
two zig-zag chunks) and their queries, keys and values. The keys and values go round the ring
with ``isend``/``irecv``, the next block already travelling while a rank computes on the one it
has, and an online softmax (a running max and sum per query) folds each block into the output.
The backward goes round again: keys and values, and with them their gradients, which come home
after one hop more. ``RingCounter`` counts the score elements each rank computes and the bytes
it sends, to set beside ``theory.causal_work`` and ``theory.ring_bytes``.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(ring_equality, nprocs=4)
    torchrun --standalone --nproc-per-node 4 -m helpers.run context_parallel.ring_equality
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers import devices, theory
from helpers.dist import distributed


class RingCounter:
    """What one rank did: score elements computed (per batch row and head), bytes sent by phase."""

    def __init__(self):
        self.computed = 0
        self.sent = {"forward": 0, "backward": 0}


def _pass_on(tensors: list[torch.Tensor], counter: RingCounter, phase: str) -> tuple[list, list]:
    """Start sending ``tensors`` to the next rank and receiving the previous rank's: (new, requests)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    new = [torch.empty_like(t) for t in tensors]
    # One batch: NCCL posts the sends and receives together, so no rank waits on its neighbour's send.
    ops = [dist.P2POp(dist.isend, t.contiguous(), (rank + 1) % n) for t in tensors]
    reqs = dist.batch_isend_irecv(ops + [dist.P2POp(dist.irecv, t, (rank - 1) % n) for t in new])
    counter.sent[phase] += sum(t.numel() * t.element_size() for t in tensors)
    return new, reqs


def _pairs(layout: str, rank: int, src: int, n: int, c: int):
    """(query slice, key slice, diagonal?) of every block this rank computes against ``src``'s
    keys: a key chunk after the query chunk is wholly masked, and skipped."""
    for i, x in enumerate(theory.chunks(layout, rank, n)):
        for j, y in enumerate(theory.chunks(layout, src, n)):
            if y <= x:
                yield slice(i * c, (i + 1) * c), slice(j * c, (j + 1) * c), y == x


def _scores(q, k, diagonal: bool, scale: float):
    s = (q @ k.transpose(-2, -1)) * scale
    if diagonal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return s


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, layout, counter):
        rank, n = dist.get_rank(), dist.get_world_size()
        c, scale = q.shape[-2] // len(theory.chunks(layout, rank, n)), 1 / math.sqrt(q.shape[-1])
        m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)  # running max
        total = torch.zeros_like(m)                                                   # running sum
        acc = torch.zeros_like(q)
        kv = [k, v]
        for step in range(n):
            if step < n - 1:  # the next block is on its way while this one is computed
                nxt, reqs = _pass_on(kv, counter, "forward")
            for qs, ks, diag in _pairs(layout, rank, (rank - step) % n, n, c):
                s = _scores(q[..., qs, :], kv[0][..., ks, :], diag, scale)
                counter.computed += s.shape[-2] * s.shape[-1]
                new_m = torch.maximum(m[..., qs], s.amax(-1))
                p, fade = torch.exp(s - new_m[..., None]), torch.exp(m[..., qs] - new_m)
                total[..., qs] = total[..., qs] * fade + p.sum(-1)
                acc[..., qs, :] = acc[..., qs, :] * fade[..., None] + p @ kv[1][..., ks, :]
                m[..., qs] = new_m
            if step < n - 1:
                for r in reqs:
                    r.wait()
                kv = nxt
        out = acc / total[..., None]
        ctx.save_for_backward(q, k, v, out, m + torch.log(total))  # lse: log of the softmax's sum
        ctx.layout, ctx.counter = layout, counter
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        rank, n = dist.get_rank(), dist.get_world_size()
        layout, counter = ctx.layout, ctx.counter
        c, scale = q.shape[-2] // len(theory.chunks(layout, rank, n)), 1 / math.sqrt(q.shape[-1])
        delta = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        kv, dkv = [k, v], [torch.zeros_like(k), torch.zeros_like(v)]
        for step in range(n):
            if step < n - 1:
                nxt, reqs = _pass_on(kv, counter, "backward")
            kb, vb = kv
            for qs, ks, diag in _pairs(layout, rank, (rank - step) % n, n, c):
                s = _scores(q[..., qs, :], kb[..., ks, :], diag, scale)
                counter.computed += s.shape[-2] * s.shape[-1]
                p = torch.exp(s - lse[..., qs, None])
                dkv[1][..., ks, :] += p.transpose(-2, -1) @ dout[..., qs, :]
                ds = p * (dout[..., qs, :] @ vb[..., ks, :].transpose(-2, -1) - delta[..., qs, None])
                dq[..., qs, :] += ds @ kb[..., ks, :] * scale
                dkv[0][..., ks, :] += ds.transpose(-2, -1) @ q[..., qs, :] * scale
            # The gradients follow their block: after n hops they are home, every rank's part added.
            dkv, grad_reqs = _pass_on(dkv, counter, "backward")
            for r in grad_reqs + (reqs if step < n - 1 else []):
                r.wait()
            if step < n - 1:
                kv = nxt
        return dq, dkv[0], dkv[1], None, None


def ring_attention(q, k, v, layout: str = "zigzag", counter: RingCounter | None = None) -> torch.Tensor:
    """Causal attention of this rank's queries over the whole sequence's keys and values.
    ``q``, ``k``, ``v``: (batch, heads, this rank's positions, head_dim), in ``theory.positions`` order."""
    theory.n_chunks(layout, 1)  # a clear error for an unknown layout
    return _RingAttention.apply(q, k, v, layout, counter or RingCounter())


def ring_equality(batch: int = 2, heads: int = 4, seq: int = 64, head_dim: int = 16, seed: int = 0) -> dict:
    """Ring attention on world-size ranks, both layouts, against full causal attention computed on
    every rank from the same seed: the largest error of the output and of each input's gradient,
    and what each rank computed and sent."""
    with distributed(seed) as ctx:
        n, rank, dev = ctx.world_size, ctx.rank, ctx.device
        g = torch.Generator().manual_seed(seed)
        q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, generator=g).to(dev) for _ in range(4))
        full = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*full, is_causal=True)
        ref.backward(dout)
        out = {"rank": rank, "n": n, "shape": (batch, heads, seq, head_dim), "layouts": {}}
        for layout in theory.LAYOUTS:
            mine = torch.tensor(theory.positions(layout, rank, n, seq), device=dev)
            local = [t[..., mine, :].clone().requires_grad_() for t in (q, k, v)]
            counter = RingCounter()
            o = ring_attention(*local, layout=layout, counter=counter)
            forward_work = counter.computed
            o.backward(dout[..., mine, :])
            err = {"out": (o - ref[..., mine, :]).abs().max()}
            err |= {f"d{name}": (t.grad - f.grad[..., mine, :]).abs().max()
                    for name, t, f in zip("qkv", local, full)}
            out["layouts"][layout] = {"errors": {k_: float(e.detach()) for k_, e in err.items()},
                                      "computed": forward_work, "computed_backward": counter.computed - forward_work,
                                      "sent": dict(counter.sent)}
        return out


def torch_ring(batch: int = 2, heads: int = 4, seq: int = 64, head_dim: int = 16, seed: int = 0) -> dict:
    """The same check with torch's ``context_parallel`` (a GPU per rank: its ring wraps only SDPA's
    CUDA kernels, ``probes.context_parallel``): q, k, v and the output's gradient are sharded in
    place by its default load balancer, and the results unsharded back into sequence order."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with distributed(seed) as ctx:
        if ctx.device.type != "cuda":
            raise ValueError(f"torch's context_parallel needs a GPU per rank; this rank runs on {ctx.device}")
        n, dev = ctx.world_size, ctx.device
        mesh = devices.mesh(dev, (n,), ("cp",))
        g = torch.Generator().manual_seed(seed)
        q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, generator=g).to(dev) for _ in range(4))
        full = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*full, is_causal=True)
        ref.backward(dout)
        shards = [t.clone() for t in (q, k, v, dout)]
        # float32: the memory-efficient kernel (flash attention takes 16-bit inputs only)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]), context_parallel(mesh, buffers=shards,
                                                                             buffer_seq_dims=[2] * 4):
            local = [t.detach().requires_grad_() for t in shards[:3]]
            out = F.scaled_dot_product_attention(*local, is_causal=True)
            out.backward(shards[3])
        whole = context_parallel_unshard(mesh, [out.detach(), *(t.grad for t in local)], [2] * 4)
        errors = {name: float((a - b).abs().max()) for name, a, b in
                  zip(("out", "dq", "dk", "dv"), whole, (ref, *(t.grad for t in full)))}
        return {"rank": ctx.rank, "n": n, "errors": errors, "local_positions": local[0].shape[2]}

"""ZeRO by hand (chapter 6.2): shard Adam's states, then the gradients, then the parameters.

Three optimizers, each a small step from the one before (``theory.sharding`` has their bytes):

* ``Zero1``: every rank keeps the whole model and its gradients, but Adam's states only
  for its own 1/p slice of each tensor (its *shard*). After backward the gradients are
  reduce-scattered, so each rank gets the sum of its slice; it updates that slice, and an
  all-gather hands every rank the others' updated slices. DDP's all-reduce is exactly a
  reduce-scatter followed by an all-gather, so this sends what DDP sends.
* ``Zero2``: the same, but each gradient is reduce-scattered the moment backward has made
  it, and the full gradient is dropped: a rank never holds all the gradients at once.
* ``Zero3``: the parameters are sharded too. Each Linear gathers its weights just before
  its forward, frees them after, and gathers them again for its backward.

Each shard is a view into the tensor's own storage in ZeRO-1 and 2 (no copy), and the
only storage of the parameter in ZeRO-3. ``helpers.recipes.sharding.compare`` trains
all three beside DDP and FSDP2 and checks that they end with DDP's weights.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from helpers.compat import all_gather_single, reduce_scatter_single


def shard_range(numel: int, rank: int, p: int) -> tuple[int, int]:
    """[start, end) of this rank's slice of a flat tensor: ceil(numel / p) each, the last ones shorter."""
    chunk = -(-numel // p)
    return min(rank * chunk, numel), min((rank + 1) * chunk, numel)


def reduce_scatter_mean(full: torch.Tensor, rank: int, p: int) -> torch.Tensor:
    """Sum ``full`` over the ranks and keep this rank's slice, divided by p (the mean gradient).

    gloo has no AVG, so: SUM, then divide. The input is padded to p equal chunks."""
    chunk = -(-full.numel() // p)
    flat = torch.zeros(chunk * p, dtype=full.dtype, device=full.device)
    flat[:full.numel()] = full.reshape(-1)
    out = torch.empty(chunk, dtype=full.dtype, device=full.device)
    reduce_scatter_single(out, flat)
    start, end = shard_range(full.numel(), rank, p)
    return out[:end - start].div_(p)


def all_gather_into(out: torch.Tensor, shard: torch.Tensor, p: int) -> torch.Tensor:
    """Every rank's slice, concatenated into the flat tensor ``out`` (which may hold this rank's
    own slice: the slice is copied, padded, before anything is written)."""
    chunk = -(-out.numel() // p)
    padded = torch.zeros(chunk, dtype=shard.dtype, device=shard.device)
    padded[:shard.numel()] = shard
    if chunk * p == out.numel():
        all_gather_single(out, padded)
    else:
        full = torch.empty(chunk * p, dtype=shard.dtype, device=shard.device)
        all_gather_single(full, padded)
        out.copy_(full[:out.numel()])
    return out


class Zero1:
    """ZeRO-1: Adam's states for this rank's shard of each tensor only; full parameters and gradients."""

    def __init__(self, model: nn.Module, lr: float = 1e-3):
        self.rank, self.p = dist.get_rank(), dist.get_world_size()
        self.params = list(model.parameters())
        # The slice this rank updates: a view into the parameter itself, so Adam writes in place.
        self.shards = [nn.Parameter(self._slice(q.data)) for q in self.params]
        self.optimizer = torch.optim.Adam(self.shards, lr=lr)

    def _slice(self, t: torch.Tensor) -> torch.Tensor:
        start, end = shard_range(t.numel(), self.rank, self.p)
        return t.reshape(-1)[start:end]

    def reduce_gradients(self) -> None:
        for q, s in zip(self.params, self.shards):
            s.grad = reduce_scatter_mean(q.grad, self.rank, self.p)

    def gather_parameters(self) -> None:
        for q, s in zip(self.params, self.shards):
            all_gather_into(q.data.view(-1), s.detach(), self.p)

    def step(self) -> None:
        self.reduce_gradients()
        self.optimizer.step()  # on 1/p of the values: 1/p of Adam's states
        self.gather_parameters()

    def zero_grad(self) -> None:
        for q in self.params:
            q.grad = None
        self.optimizer.zero_grad()


class Zero2(Zero1):
    """ZeRO-2: as ZeRO-1, but each gradient is reduce-scattered as soon as backward has made it,
    and then dropped. One tensor's full gradient at a time, instead of all of them."""

    def __init__(self, model: nn.Module, lr: float = 1e-3):
        super().__init__(model, lr)
        for q, s in zip(self.params, self.shards):
            q.register_post_accumulate_grad_hook(self._reduce_hook(s))

    def _reduce_hook(self, shard: nn.Parameter):
        def hook(q: torch.Tensor) -> None:
            shard.grad = reduce_scatter_mean(q.grad, self.rank, self.p)
            q.grad = None  # the full gradient is gone; only this rank's slice of it stays
        return hook

    def reduce_gradients(self) -> None:
        pass  # done during backward, by the hooks


class Zero3(Zero2):
    """ZeRO-3: the parameters are sharded too. A Linear's weights exist in full only from just
    before its forward to just after, and again during its backward (``peak_bytes`` records
    the most that were gathered at once).

    Freeing resizes the parameter's storage to nothing rather than swapping in a new tensor:
    autograd keeps views of the weights for backward (``weight.t()``), and they must see the
    storage the weights are gathered back into, not keep the old one alive.
    """

    def __init__(self, model: nn.Module, lr: float = 1e-3):
        self.rank, self.p = dist.get_rank(), dist.get_world_size()
        self.params = list(model.parameters())
        # The shard is now the parameter's only storage: a copy of the slice, then free the rest.
        self.shards = [nn.Parameter(self._slice(q.data).clone()) for q in self.params]
        self.owner = dict(zip(self.params, self.shards))
        self.optimizer = torch.optim.Adam(self.shards, lr=lr)
        self.live_bytes = self.peak_bytes = 0
        for q in self.params:
            q.untyped_storage().resize_(0)
            q.register_post_accumulate_grad_hook(self._reduce_and_free)
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.register_forward_pre_hook(lambda m, args: self._gather(m))
                layer.register_forward_hook(self._after_forward)

    def _gather(self, layer: nn.Module) -> None:
        for q in layer.parameters(recurse=False):
            nbytes = q.numel() * q.element_size()
            q.untyped_storage().resize_(nbytes)
            all_gather_into(q.data.view(-1), self.owner[q].detach(), self.p)
            self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _free(self, q: torch.Tensor) -> None:
        self.live_bytes -= q.untyped_storage().nbytes()
        q.untyped_storage().resize_(0)

    def _after_forward(self, layer: nn.Module, args, out: torch.Tensor) -> None:
        for q in layer.parameters(recurse=False):
            self._free(q)
        if out.requires_grad:  # gather again when the output's gradient arrives, before backward needs them
            out.register_hook(lambda grad: self._gather(layer))

    def _reduce_and_free(self, q: torch.Tensor) -> None:
        self.owner[q].grad = reduce_scatter_mean(q.grad, self.rank, self.p)
        q.grad = None
        self._free(q)

    def gather_parameters(self) -> None:
        pass  # the next forward gathers what it needs

    def full_parameters(self) -> torch.Tensor:
        """Every parameter gathered into one CPU vector, to compare with DDP's. Collective."""
        return torch.cat([all_gather_into(torch.empty(q.numel(), dtype=q.dtype, device=s.device),
                                          s.detach(), self.p) for q, s in zip(self.params, self.shards)]).cpu()


OPTIMIZERS = {"ZeRO-1": Zero1, "ZeRO-2": Zero2, "ZeRO-3": Zero3}

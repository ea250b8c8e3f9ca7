"""Bytes counted on real tensors, to check ``theory``'s memory formulas against: torch's side.

``theory`` is pure arithmetic; this module runs a model and counts what it really
holds: parameters, gradients and optimizer states, and what autograd saves for
the backward pass.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import amp
from .models import SimpleModel

OPTIMIZERS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05),
              "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
              "adam": lambda p: torch.optim.Adam(p, lr=1e-3)}


def measured_state_bytes(model, optimizer) -> dict[str, int]:
    """The real bytes of a model's parameters, gradients and optimizer states, counted tensor by tensor."""
    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)
    params = list(model.parameters())
    states = [t for s in optimizer.state.values() for t in s.values() if hasattr(t, "element_size")]
    return {"parameters": nbytes(params), "gradients": nbytes(p.grad for p in params),
            "optimizer states": nbytes(states)}


def held_bytes(tensors) -> int:
    """Bytes of the storages behind ``tensors``, as one rank holds them (chapter 6.2).

    Each storage counts once, so a shard that is a view into its parameter costs nothing
    extra; a DTensor counts its local shard only; a freed (resized to 0) storage counts 0.
    """
    from torch.distributed.tensor import DTensor
    seen = {}
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage"):
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        storage = t.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def held_state_bytes(params, optimizer) -> dict[str, int]:
    """``measured_state_bytes`` for a rank that may hold shards: ``params`` is every tensor that
    stores parameters (the model's, and a by-hand ZeRO's shards), ``optimizer`` a torch optimizer."""
    params = list(params)
    states = [t for s in optimizer.state.values() for t in s.values()]
    return {"parameters": held_bytes(params), "gradients": held_bytes(p.grad for p in params),
            "optimizer states": held_bytes(states)}


def saved_activation_bytes(model, run) -> dict[str, int]:
    """Bytes autograd saves for backward while ``run()`` does the forward; each storage counted once.

    A saved view counts its own bytes, so a batch sliced from a bigger tensor
    counts as the slice. Split into activations and autocast's 16-bit weight
    copies (a saved tensor whose autograd parent is a cast of a parameter). The
    fp32 parameters that layers save are model states, counted by
    ``measured_state_bytes``.
    """
    params = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, tuple[int, bool]] = {}

    def is_weight_copy(t) -> bool:
        # Walk up through views (a Linear saves the copy transposed) to a cast of a leaf parameter.
        fn, cast = t.grad_fn, False
        while fn is not None and fn.name().startswith(("TBackward", "ToCopyBackward", "ViewBackward")):
            cast |= fn.name().startswith("ToCopyBackward")
            fn = fn.next_functions[0][0] if fn.next_functions else None
        return cast and hasattr(fn, "variable")

    def pack(saved):
        t = _local(saved)  # a DTensor (chapter 8.2) holds only its local shard
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            nbytes = max(t.numel() * t.element_size(), seen.get(ptr, (0, False))[0])
            seen[ptr] = (nbytes, is_weight_copy(t) if t is saved else False)
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return {"activations": sum(b for b, copy in seen.values() if not copy),
            "autocast copies": sum(b for b, copy in seen.values() if copy)}


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t


def saved_bytes(model: nn.Module, batch: int, dtype: torch.dtype | None, device: torch.device) -> int:
    """Bytes autograd holds for backward after one forward at ``batch`` (None: plain float32)."""
    x = torch.randn(batch, 1, 28, 28, device=device)

    def forward():
        with amp.autocast_to(device, dtype):
            model(x)
    return sum(saved_activation_bytes(model, forward).values())


def one_step_bytes(optimizer: str, precision: str, x: torch.Tensor, y: torch.Tensor,
                   seed: int = 0) -> tuple[nn.Module, dict[str, int]]:
    """One training step of ``SimpleModel`` on (x, y); every kind of byte it held, counted.

    ``precision`` is "fp32" or "autocast" (the book's policy for the CPU: bfloat16).
    Activations are what the model's forward saves; the loss's few bytes are left out.
    """
    torch.manual_seed(seed)
    model = SimpleModel()
    opt = OPTIMIZERS[optimizer](model.parameters())
    out = {}

    def forward():
        with amp.autocast(torch.device("cpu"), enabled=precision == "autocast"):
            out["logits"] = model(x)

    activations = saved_activation_bytes(model, forward)
    F.cross_entropy(out["logits"].float(), y).backward()
    opt.step()
    return model, {**measured_state_bytes(model, opt), **activations}

"""What torch's own context parallelism can run on this machine, asked in the notebook's process
(chapter 8.2).

``torch.distributed.tensor.experimental.context_parallel`` swaps ``F.scaled_dot_product_attention``
for a ring version, but the ring is written only for the CUDA kernels SDPA may pick: in
``torch/distributed/tensor/experimental/_context_parallel/_attention.py``, ``_sdpa_handler``
maps ``aten._scaled_dot_product_flash_attention``, ``..._efficient_attention`` and
``..._cudnn_attention`` (and their backwards) to ring functions, and raises "CP only supports
flash attention and memory efficient attention now." for anything else. On a CPU, SDPA calls
``aten._scaled_dot_product_flash_attention_for_cpu``: no entry. ``torch_cp_facts`` reads both
from this torch, so the chapter states what this machine's torch does, not what it once did.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import devices


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def sdpa_op(device: torch.device) -> str:
    """The aten op causal SDPA runs on ``device`` for float32 (b, a, s, d) inputs."""
    q = torch.randn(1, 2, 8, 4, device=device)
    with _Ops() as ops:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    return next(n for n in ops.names if "attention" in n)


def torch_cp_facts(device: torch.device | None = None) -> dict:
    """The ops torch's ring handles, the op SDPA runs here, and torch's defaults: the load balancer
    it builds for a causal sequence (head-tail: the zig-zag) and how K and V move (all-gather)."""
    from torch.distributed.tensor.experimental._context_parallel import _attention, _load_balancer
    device = device or devices.of_process()
    handled = sorted(str(op) for op in _attention.custom_ops if "backward" not in str(op))
    here = sdpa_op(device)
    balancer = _load_balancer._create_default_load_balancer(16, 2, device)
    return {"handled": handled, "here": here, "device": str(device), "runs_here": here in handled,
            "load_balancer": type(balancer).__name__, "rotate": _attention._cp_options.rotate_method.name,
            "source": _attention.__file__.split("site-packages/")[-1]}


def sdpa_handler_source() -> str:
    """``_sdpa_handler``'s source from this torch, under its file's name: the evidence itself."""
    import inspect
    from torch.distributed.tensor.experimental._context_parallel import _attention
    path = _attention.__file__.split("site-packages/")[-1]
    return f"# {path}\n" + inspect.getsource(_attention._sdpa_handler)

"""The book's mixed-precision policy, in one place.

On CUDA: float16 autocast with a GradScaler, since float16's narrow range
flushes small gradients to zero unless the loss is scaled. On the CPU:
bfloat16 autocast and no scaler: bfloat16 has float32's exponent range, so
nothing underflows that float32 would keep. (Whether bf16 is *faster* on a
CPU depends on AVX512-BF16/AMX; ``helpers.book.cpu_flags()`` tells.)
"""
from __future__ import annotations

import torch


def autocast_dtype(device: torch.device) -> torch.dtype:
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def autocast(device: torch.device, enabled: bool = True):
    """``torch.amp.autocast`` for this device (not the deprecated ``torch.cuda.amp.autocast``)."""
    return torch.amp.autocast(device.type, dtype=autocast_dtype(device), enabled=enabled)


def grad_scaler(device: torch.device, enabled: bool = True) -> torch.amp.GradScaler:
    """A GradScaler that is active only where it is needed: float16 on CUDA."""
    return torch.amp.GradScaler(device.type, enabled=enabled and autocast_dtype(device) == torch.float16)

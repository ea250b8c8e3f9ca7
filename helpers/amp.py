"""The book's mixed-precision policy, in one place.

On CUDA: float16 autocast with a GradScaler, since float16's narrow range
flushes small gradients to zero unless the loss is scaled. On the CPU:
bfloat16 autocast and no scaler: bfloat16 has float32's exponent range, so
nothing underflows that float32 would keep. (Whether bf16 is *faster* on a
CPU depends on AVX512-BF16/AMX; ``helpers.machine.this().native_bf16`` tells.)
"""
from __future__ import annotations

import torch


def autocast_dtype(device: torch.device) -> torch.dtype:
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def dtype_name(dtype: torch.dtype | None) -> str:
    """``torch.bfloat16`` -> "bfloat16"; None (no autocast) -> "float32"."""
    return str(dtype or torch.float32).removeprefix("torch.")


def autocast(device: torch.device, enabled: bool = True, dtype: torch.dtype | None = None):
    """``torch.amp.autocast`` for this device (not the deprecated ``torch.cuda.amp.autocast``),
    at the policy's dtype unless ``dtype`` is given."""
    return torch.amp.autocast(device.type, dtype=dtype or autocast_dtype(device), enabled=enabled)


def autocast_to(device: torch.device, dtype: torch.dtype | None):
    """Autocast to ``dtype``; None is plain float32 (autocast off)."""
    return autocast(device, enabled=dtype is not None, dtype=dtype)


def needs_scaler(device: torch.device) -> bool:
    """Whether the policy's dtype here underflows without loss scaling: float16 does, bfloat16 not."""
    return autocast_dtype(device) == torch.float16


def grad_scaler(device: torch.device, enabled: bool = True) -> torch.amp.GradScaler:
    """A GradScaler that is active only where it is needed: float16 on CUDA."""
    return torch.amp.GradScaler(device.type, enabled=enabled and needs_scaler(device))

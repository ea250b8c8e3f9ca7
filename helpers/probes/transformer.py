"""Chapter 8.1's probe in the notebook's own process: this machine's matmul peak, the denominator of MFU.

A large square matmul is the fastest thing a device does with its arithmetic units: little memory
traffic for each multiply-add. Its best rate over a few tries is the peak the GPT's step is
measured against. On a CPU it runs with the threads one rank gets, so that the GPT's ranks and
the peak are measured on the same cores.
"""
from __future__ import annotations

import time

import torch

from helpers import devices
from helpers.machine import Machine


def peak_dtypes(m: Machine, device: torch.device) -> list[torch.dtype]:
    """float32 everywhere; bfloat16 too on a GPU, or on a CPU with bfloat16 instructions
    (without them torch converts to float32 around each multiply, which measures nothing new)."""
    return [torch.float32] + ([torch.bfloat16] if device.type == "cuda" or m.native_bf16 else [])


def matmul_peak(dtype: torch.dtype = torch.float32, n: int = 1024, repeats: int = 5, threads: int | None = None,
                device: torch.device | None = None) -> float:
    """The best FLOP/s of ``n x n @ n x n`` (2 n³ FLOPs) over ``repeats`` tries, after one warm-up."""
    if n < 1 or repeats < 1:
        raise ValueError(f"n and repeats must be at least 1, got {n} and {repeats}")
    device = device or devices.of_process()
    with devices.cpu_threads(threads):
        g = torch.Generator(device="cpu").manual_seed(0)
        a, b = (torch.randn(n, n, generator=g).to(device, dtype) for _ in range(2))
        best = float("inf")
        for i in range(repeats + 1):
            devices.sync(device)
            start = time.perf_counter()
            a @ b
            devices.sync(device)
            if i:  # the first call warms the caches and the thread pool
                best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def peaks(m: Machine, threads: int | None = None, n: int = 1024, repeats: int = 5,
          device: torch.device | None = None) -> dict[str, float]:
    """FLOP/s by dtype name ("float32", "bfloat16") on ``device``: the one the measured ranks ran on
    (a machine with one GPU runs a 2-rank job on the CPU), by default what a one-rank job gets here."""
    device = device or devices.of_process()
    return {str(dt).removeprefix("torch."): matmul_peak(dt, n, repeats, threads, device)
            for dt in peak_dtypes(m, device)}


def attention_flops(dtype: torch.dtype = torch.float32, seq: int = 1024, heads: int = 8, head_dim: int = 64,
                    repeats: int = 5, threads: int | None = None, device: torch.device | None = None) -> float:
    """The best FLOP/s of one causal ``F.scaled_dot_product_attention`` forward (one sequence, ``heads``
    heads of ``head_dim``) over ``repeats`` tries, after one warm-up, counted as the planner counts the
    attention core it executes: 4 s² x heads x head_dim (QKᵀ and scores x V), at half for the causal mask.
    Set beside ``matmul_peak`` it is the attention core's fraction of peak (``Cluster.flash_efficiency``)."""
    if min(seq, heads, head_dim, repeats) < 1:
        raise ValueError(f"seq, heads, head_dim and repeats must be at least 1, got {seq}, {heads}, {head_dim}, "
                         f"{repeats}")
    device = device or devices.of_process()
    with devices.cpu_threads(threads), torch.no_grad():
        g = torch.Generator(device="cpu").manual_seed(0)
        q, k, v = (torch.randn(1, heads, seq, head_dim, generator=g).to(device, dtype) for _ in range(3))
        best = float("inf")
        for i in range(repeats + 1):
            devices.sync(device)
            start = time.perf_counter()
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            devices.sync(device)
            if i:
                best = min(best, time.perf_counter() - start)
    return 4.0 * seq * seq * heads * head_dim / 2 / best

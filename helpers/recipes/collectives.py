"""Chapter 4.2's measurements: how long one all_reduce takes, by message size, and the copy ceiling.

Timed the way nccl-tests times collectives: warm up, line the ranks up with a
barrier, time the call, repeat, and keep the median. The sizes are taken in
turn, round after round, so a slow spell of a shared machine hits them alike.
A collective is done when its slowest rank is done, so each repetition's time
is the maximum over ranks.
The same run also measures how fast rank 0's device copies its own memory (one core on a CPU,
the GPU's own memory on a GPU), the ceiling for any transfer that goes through it::

    helpers.launch(allreduce_sweep, nprocs=2, sizes=[4096, 2**20])      # in a notebook
    torchrun --nproc-per-node 8 -m helpers.run collectives.allreduce_sweep  # a GPU node: NCCL
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers import devices
from helpers.dist import distributed, report
from helpers.training import median

KB, MB = 1024, 1024 ** 2
SIZES = [4 * KB * 4 ** i for i in range(8)]  # 4 KB, 16 KB, ... 64 MB (4.2 plans its own: plans.allreduce_sizes)


def repeats_for(size: int, budget_bytes: int = 1024 * MB, least: int = 7, most: int = 100) -> int:
    """Many repetitions of small messages (cheap, noisy), fewer of large ones (costly, steady)."""
    return max(least, min(most, budget_bytes // max(size, 1)))


# The collectives a sweep can time, each given its tensor and an output buffer of the same size
# (all_to_all writes into another tensor; made before the clock starts, so no allocation is timed).
COLLECTIVES = {"all_reduce": lambda t, out: dist.all_reduce(t),
               "all_to_all": lambda t, out: dist.all_to_all_single(out, t)}


def time_allreduce(tensor: torch.Tensor, op: str = "all_reduce", out: torch.Tensor | None = None) -> float:
    """Seconds for one ``all_reduce(tensor)`` (or another of ``COLLECTIVES``) on this rank, started
    right after a barrier.

    One call per repetition, not an average of many: a rare stall (a rank's thread
    waiting for a core) then spoils one repetition, which the median drops, instead
    of inflating every average it falls into.
    """
    dist.barrier()
    start = time.perf_counter()
    COLLECTIVES[op](tensor, out)
    devices.sync(tensor.device)
    return time.perf_counter() - start


def spread_rounds(n: int, rounds: int) -> set[int]:
    """The ``n`` rounds, out of ``rounds``, in which a size is timed: spread evenly, not bunched."""
    return {k * rounds // n for k in range(n)}


def copy_bandwidth(nbytes: int = 64 * MB, repeats: int = 7, device: torch.device | None = None) -> float:
    """Bytes per second that ``dst.copy_(src)`` moves on ``device``: one core's memory-copy ceiling on a
    CPU (one thread: as the ranks run), the GPU's copy within its own memory on a GPU.

    Counted as nccl-tests and STREAM's "copy" count it: the bytes of the message, not read + write.
    """
    device = device or torch.device("cpu")
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page once, so page faults are not timed
    times = []
    for _ in range(repeats):
        devices.sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        devices.sync(device)
        times.append(time.perf_counter() - start)
    return nbytes / median(times)


def allreduce_sweep(sizes: list[int] = SIZES, budget_bytes: int = 1024 * MB, min_repeats: int = 7,
                    max_repeats: int = 100, warmup: int = 3, copy_bytes: int = 64 * MB) -> dict:
    """Median all_reduce time for each message size (bytes of float32), over all ranks' slowest.

    Each size is timed ``repeats_for(size, budget_bytes, min_repeats, max_repeats)`` times,
    the sizes taken in turn. Returns ``sizes``, ``seconds`` (median of the per-repetition maximum over ranks),
    ``spread`` (the interquartile range, same units), ``times`` (each size's repetitions, that maximum),
    and ``copy_bw`` (bytes/s on rank 0's device:
    one core, or its GPU; measured while the others wait).
    """
    with distributed() as ctx:
        return sweep(ctx, sizes, budget_bytes, min_repeats, max_repeats, warmup, copy_bytes)


def sweep(ctx, sizes: list[int] = SIZES, budget_bytes: int = 1024 * MB, min_repeats: int = 7,
          max_repeats: int = 100, warmup: int = 3, copy_bytes: int = 64 * MB, op: str = "all_reduce") -> dict:
    """``allreduce_sweep`` inside a group that is already up (``ctx`` from ``distributed()``), so that
    another recipe can run it as one part of its job; ``op`` names another of ``COLLECTIVES`` to time."""
    return sweeps(ctx, (op,), sizes, budget_bytes, min_repeats, max_repeats, warmup, copy_bytes)[op]


def sweeps(ctx, ops: tuple[str, ...], sizes: list[int] = SIZES, budget_bytes: int = 1024 * MB,
           min_repeats: int = 7, max_repeats: int = 100, warmup: int = 3, copy_bytes: int = 64 * MB) -> dict:
    """``sweep`` of several collectives at once, {op: its sweep}: at each size of each round every op is
    timed in turn, seconds apart, so a slow spell of the machine lands on all of them alike."""
    for op in ops:
        if op not in COLLECTIVES:
            raise ValueError(f"op must be one of {sorted(COLLECTIVES)}, got {op!r}")
    tensors = [torch.ones(size // 4, device=ctx.device) for size in sizes]
    outs = {op: [torch.empty_like(t) for t in tensors] if op != "all_reduce" else [None] * len(sizes) for op in ops}
    reps = [repeats_for(size, budget_bytes, min_repeats, max_repeats) for size in sizes]
    for op in ops:
        for t, out in zip(tensors, outs[op]):
            for _ in range(warmup):  # the first calls set up gloo's buffers / NCCL's channels
                COLLECTIVES[op](t, out)
    # Round-robin over the sizes, so that a slow spell of the machine lands on all of them
    # instead of on whichever size was being timed at that moment. Each round goes from
    # small to large after a few untimed small calls: a small message timed right after a
    # 64 MB one would pay for the large one's aftermath (freed buffers, cold caches).
    rounds = max(reps)
    when = [spread_rounds(n, rounds) for n in reps]
    mine = {op: [[] for _ in sizes] for op in ops}
    for r in range(rounds):
        for _ in range(warmup):
            COLLECTIVES[ops[0]](tensors[0], outs[ops[0]][0])
        for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
            if r in when[i]:
                for op in ops:
                    mine[op][i].append(time_allreduce(tensors[i], op, outs[op][i]))
        report(r + 1, rounds)
    out = {}
    for op in ops:
        seconds, spread, every = [], [], []
        for times in mine[op]:
            slowest = torch.tensor(times, dtype=torch.float64, device=ctx.device)  # NCCL reduces GPU tensors only
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the collective ends with its slowest rank
            slowest = slowest.cpu()
            q1, med, q3 = torch.quantile(slowest, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
            seconds.append(med.item())
            spread.append((q3 - q1).item())
            every.append(slowest.tolist())
        out[op] = {"seconds": seconds, "spread": spread, "times": every}
    del tensors, outs
    copy_bw = copy_bandwidth(copy_bytes, device=ctx.device) if ctx.is_main else float("nan")
    dist.barrier()
    return {op: {"rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
                 "threads": torch.get_num_threads(), "sizes": list(sizes), **out[op], "repeats": reps,
                 "copy_bw": copy_bw} for op in ops}

"""When adding ranks pays: the rank code of chapter 4.3 and of ``bench/regimes.py``.

Three workloads, each one job with its variants interleaved round by round:

* ``strong_scaling``: DDP at p = 1 and 2 (one thread per rank) for several models
  and global batches, every (model, p, batch) block in every round, so the
  communication-bound and the compute-bound regimes come out of one run.
* ``allreduce_after_compute``: one small all_reduce timed back to back, after a few
  ms of matmuls, after a few ms of sleep, and with every thread of each rank pinned to
  its own core; on the default group and on gloo groups built with other settings.
  Each call's start and end are read on the host's monotonic clock (shared by the
  ranks), so its time splits into waiting for the peer (rank skew) and the rest.
* ``contention``: one rank's training step alone (the other waits in a barrier) and
  with the other rank computing the same step at the same moment.

All of it is a study of CPU ranks over gloo, on every machine: threads pinned to cores, gloo groups
on ``lo``, CPU tensors handed to the default group, and chapter 5.1 predicting its gloo run from the
fits. The module pins gloo (``BACKEND``), so ``launch`` and ``python -m helpers.run`` pick it, and
each recipe refuses another backend chosen by hand (``on_gloo``).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import time

import torch
import torch.distributed as dist

from helpers import models
from helpers.machine import loopback_interface, usable_cpus
from helpers.dist import distributed, report
from helpers.training import median, train_step, turns

from .collectives import sweep
from .scaling import Trainer, medians

BACKEND = "gloo"  # helpers.devices.pinned_backend: CPU ranks over gloo on every machine


def on_gloo(ctx, recipe: str) -> None:
    """Refuse a job that is not gloo's: its CPU tensors would meet an NCCL group, and its fits would
    mix a GPU's compute with the CPU's story."""
    if ctx.backend != "gloo":
        raise RuntimeError(f"regimes.{recipe} studies CPU ranks over gloo, and this job runs {ctx.backend}: "
                           f"launch it with backend='gloo' (HELPERS_BACKEND=gloo under torchrun)")


@contextlib.contextmanager
def gloo_job(recipe: str):
    """``helpers.dist.distributed``, refusing any backend but gloo (``on_gloo``)."""
    with distributed() as ctx:
        on_gloo(ctx, recipe)
        yield ctx


# Chapter 4.3: the predictor is fitted on CALIBRATION's blocks (the blocking, timed hook) and tested
# on HELD_OUT's (plain DDP); the two share no (model, global batch). Calibration comes in pairs G, 2G,
# so that p = 1 at G and p = 2 at 2G run the same per-rank batch: their compute, side by side, is the
# contention. HELD_OUT's grids of G also give each model's crossover, where S(2) reaches 1.5.
CALIBRATION = {"simple": [96, 192, 3072, 6144], "wide-512x4": [768, 1536], "wide-1024x4": [384, 768]}
HELD_OUT = {"simple": [256, 512, 1024, 2048, 4096, 8192], "wide-1024x4": [256, 512, 1024, 2048, 4096],
            "wide-512x4": [512, 4096]}
# The two ends the chapter sets side by side: a held-out job whose step is matmuls, and one whose step
# is mostly its all_reduce. Each one's S(2) is timed in the same rounds as the other's.
COMPUTE_BOUND, TALK_BOUND = ("wide-1024x4", 4096), ("simple", 256)
STEPS = {"simple": 10, "wide-512x4": 5, "wide-1024x4": 3}  # per block: each about 0.1-3 s
SWEEP = [4096 * 2**k for k in range(13)]  # 4 KB to 16 MB, as chapter 4.2 steps them


def prediction_blocks(calibration: dict = CALIBRATION, held_out: dict = HELD_OUT) -> dict:
    """``strong_scaling``'s ``model_names`` and ``global_sizes`` for both sets in one job."""
    sizes = {**calibration, **{m + " overlap": Gs for m, Gs in held_out.items()}}
    return {"model_names": list(sizes), "global_sizes": sizes}


def lead_blocks(ahead: tuple[str, int] = COMPUTE_BOUND, behind: tuple[str, int] = TALK_BOUND) -> dict:
    """``strong_scaling``'s ``model_names`` and ``global_sizes`` for the two held-out jobs 4.3 sets side
    by side, alone: the rounds it adds where the job's own leave their comparison short."""
    sizes = {m + " overlap": [G] for m, G in (ahead, behind)}
    return {"model_names": list(sizes), "global_sizes": sizes}


def predictor_job(dataset, rounds: int = 3, sizes: list[int] = SWEEP, budget_bytes: int = 2**28) -> dict:
    """Everything chapter 4.3's predictor is fitted on and tested against, in one 2-rank job: chapter
    4.2's all_reduce sweep (``sweep``, to 16 MB: the largest model's gradients are 11 MB), then
    ``strong_scaling`` over ``prediction_blocks()``, the calibration and the held-out blocks interleaved."""
    with gloo_job("predictor_job") as ctx:
        swept = sweep(ctx, sizes, budget_bytes)
        return {"sweep": {k: swept[k] for k in ("sizes", "seconds", "backend")},
                **_strong_scaling(ctx, dataset=dataset, rounds=rounds, steps=STEPS, **prediction_blocks())}


def strong_scaling(model_names: list[str], global_sizes: list[int] | dict[str, list[int]], dataset, per_rank_batches=(),
                   steps: dict | None = None, rounds: int = 7, warmup: int = 2, pin: bool = False) -> dict:
    """``scaling.scaling_sweep`` at p = 1, 2 for several models in one job; rows carry ``model``.

    ``global_sizes``: one list for every model, or {model: list} (a model left out: none);
    "NAME overlap" is model NAME under plain DDP (all_reduce overlapped with backward)
    instead of the timed hook. ``steps``: {model NAME: steps per block}, default 10.
    ``pin``: every thread of each rank (gloo's too) on a core of its own, where there are enough.
    """
    with gloo_job("strong_scaling") as ctx:
        return _strong_scaling(ctx, model_names, global_sizes, dataset, per_rank_batches, steps, rounds, warmup, pin)


def _strong_scaling(ctx, model_names, global_sizes, dataset, per_rank_batches=(), steps=None, rounds=7,
                    warmup=2, pin=False) -> dict:
    steps = steps or {}
    sizes = global_sizes if isinstance(global_sizes, dict) else dict.fromkeys(model_names, global_sizes)
    groups = {1: dist.new_group([0]), 2: dist.new_group([0, 1])}
    every = usable_cpus()
    if pin and len(every) >= ctx.world_size:
        pin_threads({sorted(every)[ctx.rank]})
    work = {(m, p): sorted({G // p for G in sizes.get(m, ())} | set(per_rank_batches))
            for m in model_names for p in groups}
    trainers = {(m, p, b): Trainer(b, dataset, groups[p], m.removesuffix(" overlap"),
                                   overlap=m.endswith(" overlap"))
                for m in model_names for p in groups for b in work[(m, p)] if ctx.rank < p}
    for t in trainers.values():
        t.run(warmup)
    dist.barrier()
    runs = []
    for r in range(rounds):
        for m in model_names:
            for p in turns([1, 2], r):  # which p goes first alternates
                if ctx.rank < p:
                    for b in work[(m, p)]:
                        t = trainers[(m, p, b)]
                        runs.append({"round": r, "model": m, "p": p, "G": b * p, "per_rank_batch": b,
                                     **medians(t.run(steps.get(m.removesuffix(" overlap"), 10))),
                                     "calls": t.calls if p > 1 else []})
                dist.barrier()
        report(r + 1, rounds)
    return {"rank": ctx.rank, "runs": runs, "threads": torch.get_num_threads(),
            # at p = 2, where DDP has rebuilt its buckets in the order gradients arrive
            "facts": {m: trainers[(m, 2, work[(m, 2)][0])].facts() for m in model_names} if ctx.rank == 0 else None}


def pin_threads(cpus: set[int] | None, every: set[int] | None = None) -> None:
    """Every thread of this process (gloo's included) onto ``cpus``; None: back onto ``every``."""
    cpus = cpus or every
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that ended meanwhile


class idle_poll:
    """While held: a PM QoS request of 0 us wake-up latency (``/dev/cpu_dma_latency``), so an idle
    CPU polls (cpuidle state POLL) instead of halting; the kernel drops it when the fd closes.
    ``held`` says whether it took (it needs root)."""

    def __init__(self, on: bool = True):
        self.on, self.fd, self.held = on, None, False

    def __enter__(self):
        if self.on:
            try:
                self.fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
                os.write(self.fd, (0).to_bytes(4, "little"))
                self.held = True
            except OSError:
                pass
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


def _gloo_group(name: str, threads: int, lazy: bool | None = None):
    """A gloo backend over the default store with ``threads`` worker threads (default group: 2)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._threads = threads
    opts._timeout = datetime.timedelta(seconds=60)
    opts._devices = [dist.ProcessGroupGloo.create_device(interface=loopback_interface(), lazy_init=lazy)]
    store = dist.PrefixStore(name, dist.distributed_c10d._get_default_store())
    return dist.ProcessGroupGloo(store, dist.get_rank(), dist.get_world_size(), opts)


def allreduce_after_compute(sizes: list[int], compute_ms: float = 3.0, reps: int = 30,
                            rounds: int = 3) -> dict:
    """Each (group, condition, size) block: ``reps`` calls; per call its seconds and start/end stamps.

    Conditions: ``back-to-back``; ``compute`` (matmuls for ``compute_ms`` first);
    ``sleep`` (idle for as long); ``pinned`` (compute, with each rank's threads on its
    usable core number rank); ``pinned sleep`` (the same, sleeping); ``barrier`` (compute, then a
    barrier, then the timed all_reduce); "X +poll": X while ``idle_poll`` holds idle CPUs
    polling (skipped where it cannot).
    ``sizes`` in bytes (float32).
    """
    with gloo_job("allreduce_after_compute") as ctx:
        a = torch.randn(256, 256)
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        per = torch.tensor([(time.perf_counter() - t0) / 20])
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
        n_mm = max(1, round(compute_ms * 1e-3 / per.item()))
        groups = {"default (2 threads)": None, "gloo 1 thread": _gloo_group("t1", 1),
                  "gloo 8 threads": _gloo_group("t8", 8), "gloo lazy init": _gloo_group("lazy", 2, lazy=True)}
        conditions = ["back-to-back", "compute", "sleep", "pinned", "pinned sleep", "barrier",
                      "compute +poll", "sleep +poll", "pinned sleep +poll"]
        every = usable_cpus()  # this rank's affinity as the launcher left it, restored after "pinned"
        mine = {sorted(every)[ctx.rank % len(every)]}

        def allreduce(group, x):
            if group is None:
                dist.all_reduce(x)
            else:
                group.allreduce([x]).wait()

        rows = []
        for r in range(rounds):
            for g, group in groups.items():
                for cond in turns(conditions, r):
                    pin_threads(mine if cond.startswith("pinned") else None, every)
                    what = cond.removesuffix(" +poll")
                    with idle_poll(cond.endswith(" +poll")) as poll:
                        for size in sizes if poll.held or not poll.on else ():  # no PM QoS: skip
                            x = torch.ones(size // 4)
                            allreduce(group, x)
                            dist.barrier()
                            calls = []
                            for _ in range(reps):
                                if what in ("compute", "pinned", "barrier"):
                                    for _ in range(n_mm):
                                        a @ a
                                elif what in ("sleep", "pinned sleep"):
                                    time.sleep(compute_ms * 1e-3)
                                if what == "barrier":
                                    dist.barrier()
                                start = time.perf_counter()
                                allreduce(group, x)
                                calls.append((start, time.perf_counter()))
                            rows.append({"round": r, "group": g, "condition": cond, "size": size, "calls": calls})
            pin_threads(None, every)
            report(r + 1, rounds)
        return {"rank": ctx.rank, "rows": rows, "matmuls": n_mm, "matmul_s": per.item()}


def contention(configs: list[tuple[str, int]], steps: int = 10, rounds: int = 7) -> dict:
    """Per (model, per-rank batch): each rank's median step alone and with the other rank computing.

    A step is forward, backward and SGD on one random batch, no DDP and no communication.
    Alone: rank q computes while the other waits in a barrier (idle); together: both at once.
    """
    with gloo_job("contention") as ctx:
        work = {}
        for m, b in configs:
            torch.manual_seed(0)
            net = models.build(m)
            work[(m, b)] = (net, torch.optim.SGD(net.parameters(), lr=0.01),
                            torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,)))
        def step_times(key, n):
            out = []
            for _ in range(n):
                t = time.perf_counter()
                train_step(*work[key])
                out.append(time.perf_counter() - t)
            return out

        for key in work:
            step_times(key, 2)
        rows = []
        for r in range(rounds):
            for key in work:
                for mode in turns(["alone 0", "alone 1", "together"], r):
                    dist.barrier()
                    if mode == "together" or mode == f"alone {ctx.rank}":
                        rows.append({"rank": ctx.rank, "round": r, "model": key[0], "per_rank_batch": key[1],
                                     "mode": "together" if mode == "together" else "alone",
                                     "step": median(step_times(key, steps))})
                    dist.barrier()
            report(r + 1, rounds)
        return {"rank": ctx.rank, "rows": rows}

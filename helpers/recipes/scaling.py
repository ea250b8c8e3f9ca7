"""Chapter 4.1's workload: DDP training of the article's model, timed phase by phase inside every rank.

Strong scaling keeps the global batch G fixed and splits it over p ranks
(per-rank batch G/p); weak scaling keeps the per-rank batch b fixed (global
batch p*b). ``scaling_sweep`` runs every p in one job, interleaved, so that
both can be read off one grid of (p, G). Threads per rank are fixed by the
caller (``launch(..., threads=1)``): if one rank got two cores and two ranks
one each, a speedup would measure the thread split, not the parallelism::

    helpers.launch(scaling_sweep, nprocs=4, threads=1, ps=[1, 2, 4], global_sizes=[640],
                   per_rank_batches=[320])
    torchrun --standalone --nproc-per-node 8 -m helpers.run scaling.scaling_sweep \\
             --ps "[1, 2, 4, 8]" --global-sizes "[640, 1280]"
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import data, devices, models
from helpers.dist import distributed, report
from helpers.models import linear_macs, n_params, param_bytes
from helpers.training import PHASES, Timeline, median


def timed_allreduce_hook(state, bucket):  # unannotated: DDP checks annotations, and this module's are strings
    """DDP's default gradient averaging, made blocking so that its time is this rank's to measure.

    ``state`` is (Timeline, process group). DDP normally launches each bucket's
    all_reduce asynchronously and overlaps it with the rest of backward; this hook
    waits for it instead, and charges the wait to ``comm`` rather than ``backward``.
    """
    clock, group = state
    buf = bucket.buffer()
    clock.lap("backward")  # backward up to this bucket
    buf.div_(dist.get_world_size(group))
    with clock.span("all_reduce", bucket.index()):  # start and end on the host's shared clock
        dist.all_reduce(buf, group=group)
    clock.lap("comm")
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


class Trainer:
    """DDP training of one workload on one process group, run block by block and timed by phase.

    overlap=False times the all_reduce separately (``timed_allreduce_hook``);
    overlap=True leaves DDP's asynchronous all_reduce alone, so ``comm`` reads 0
    and whatever communication is not hidden shows up in ``backward``.
    """

    def __init__(self, per_rank_batch: int, dataset, group=None, model: str = "simple",
                 overlap: bool = False, lr: float = 0.05, seed: int = 0):
        self.device = devices.of_group(group)  # this rank's GPU under NCCL, the CPU under gloo
        torch.manual_seed(seed)
        self.net = models.build(model).to(self.device)
        self.ddp = DDP(self.net, process_group=group,
                       device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.clock = Timeline(self.device, PHASES)
        if not overlap:
            self.ddp.register_comm_hook((self.clock, group), timed_allreduce_hook)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=lr)
        # The article's input pipeline: a DataLoader over a DistributedSampler, cycled over epochs.
        self.sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(group),
                                          rank=dist.get_rank(group), seed=seed, drop_last=True)
        self.loader = DataLoader(dataset, batch_size=per_rank_batch, sampler=self.sampler, drop_last=True)
        if len(self.loader) == 0:
            raise ValueError(f"per-rank batch {per_rank_batch} exceeds this rank's {len(self.sampler)} samples")
        self.per_rank_batch, self.epoch, self.batches = per_rank_batch, 0, iter(self.loader)
        self.criterion = nn.CrossEntropyLoss()

    def _next_batch(self):
        try:
            return next(self.batches)
        except StopIteration:
            self.epoch += 1
            self.sampler.set_epoch(self.epoch)
            self.batches = iter(self.loader)
            return next(self.batches)

    def run(self, steps: int) -> list[dict]:
        """``steps`` training steps; each step's seconds by phase. ``calls``: the timed hook's
        all_reduces of these steps, (start, end) on the host's monotonic clock."""
        rows, clock = [], self.clock
        clock.spans.clear()
        for _ in range(steps):
            clock.start()
            x, y = self._next_batch()
            x, y = x.to(self.device), y.to(self.device)
            clock.lap("data")
            loss = self.criterion(self.ddp(x), y)
            clock.lap("forward")
            loss.backward()  # the hook, if registered, laps 'backward' and 'comm' inside
            clock.lap("backward")
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            clock.lap("optimizer")
            rows.append(clock.phases)
        self.loss = loss.item()
        self.calls = [(start, end) for _, _, start, end in clock.spans]
        return rows

    def facts(self) -> dict:
        """What the predictions need: gradient bytes, parameters, and how many all_reduces DDP issues."""
        # Private, so read defensively. DDP rebuilds its buckets after the first backward, in the
        # order the gradients arrived; these are the sizes it all-reduces from then on (torch >= 2.7).
        logged = self.ddp._get_ddp_logging_data()
        sizes = [int(s) for s in str(logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes", "")).split(",")
                 if s.strip()]
        return {"grad_bytes": param_bytes(self.net), "n_params": n_params(self.net), "macs": linear_macs(self.net),
                "buckets": len(sizes), "bucket_bytes": sizes, "per_rank_batch": self.per_rank_batch}


def medians(rows: list[dict]) -> dict:
    """The median of each phase, and of the whole step, over steps (seconds)."""
    out = {phase: median(r[phase] for r in rows) for phase in PHASES}
    out["step"] = median(sum(r.values()) for r in rows)
    return out


def timed_training(configs: list[dict], steps: int = 30, warmup: int = 5, rounds: int = 5,
                   dataset=None) -> dict:
    """All ranks, every workload in turn: a ``Trainer(**config)`` each, timed over ``steps``.

    A config sets ``per_rank_batch`` and optionally ``model`` and ``overlap``.
    The steps are taken in ``rounds`` that visit every config, so that a busy moment
    on the machine slows all configs alike instead of one pair's timed half.
    ``dataset`` (a TensorDataset) spares every rank from loading the data itself.
    """
    with distributed() as ctx:
        dataset = dataset if dataset is not None else data.load(train=True)
        trainers = [Trainer(dataset=dataset, **config) for config in configs]
        for trainer in trainers:
            trainer.run(warmup)  # the first steps allocate buffers and warm caches
        rows = [[] for _ in configs]
        for r in range(rounds):
            for i, trainer in enumerate(trainers):
                rows[i] += trainer.run(max(1, steps // rounds))
            report(r + 1, rounds)
        runs = [{**config, **medians(rs), **t.facts()} for config, rs, t in zip(configs, rows, trainers)]
        return {"rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
                "threads": torch.get_num_threads(), "runs": runs}


def scaling_sweep(ps: list[int], global_sizes: list[int], per_rank_batches: list[int] = (),
                  rounds: int = 5, steps: int = 10, warmup: int = 5, model: str = "simple", dataset=None) -> dict:
    """Strong and weak scaling at every p in ``ps``, all in one job of max(ps) ranks.

    Strong: each global batch G, split as G/p per rank. Weak: each per-rank batch b,
    at every p. For each p, DDP runs on ranks 0..p-1 (a subgroup) while the other
    ranks wait in a barrier, using no CPU. The rounds take every p in turn for
    ``steps`` steps, so a busy moment on the machine hits all p alike; each
    (round, p, per-rank batch) block gives one median. Rank 0 takes part in every block.
    """
    with distributed() as ctx:
        dataset = dataset if dataset is not None else data.load(train=True)
        groups = {p: dist.new_group(list(range(p))) for p in ps}  # every rank creates every group
        work = {p: sorted({G // p for G in global_sizes} | set(per_rank_batches)) for p in ps}
        trainers = {(p, b): Trainer(b, dataset, groups[p], model) for p in ps for b in work[p] if ctx.rank < p}
        for t in trainers.values():
            t.run(warmup)
        dist.barrier()
        runs, start = [], time.perf_counter()
        for r in range(rounds):
            for p in ps:
                if ctx.rank < p:
                    for b in work[p]:
                        runs.append({"round": r, "p": p, "G": b * p, "per_rank_batch": b,
                                     **medians(trainers[(p, b)].run(steps))})
                dist.barrier()  # ranks >= p wait here while the first p train
            report(r + 1, rounds)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
                "threads": torch.get_num_threads(), "runs": runs, "loop_seconds": time.perf_counter() - start,
                "facts": next(iter(trainers.values())).facts() if ctx.rank == 0 else None}

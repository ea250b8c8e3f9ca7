"""Data parallelism by hand and by DDP (chapter 3.1): the article's four steps, run in real ranks.

The article's recipe: (1) replicate the model on every device, (2) shard the
data, (3) compute gradients independently, (4) average them and update. Here
step 4 is done by hand first (``allreduce_gradients``, the naive version), then
by ``DistributedDataParallel``, and both are checked against one process that
trains on the whole global batch::

    helpers.launch(train, nprocs=2, mode="naive")                      # in a notebook
    torchrun --standalone --nproc-per-node 2 -m helpers.run data_parallel.train --mode ddp

The one-process baselines they are checked against are ``helpers.probes.data_parallel``.
"""
from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from helpers import data, models
from helpers.analysis import hidden_fraction
from helpers.dist import distributed, report
from helpers.models import SimpleModel, WideMLP
from helpers.training import DeviceClock, Timeline, flat_params, turns


# --- Step 1: replicate -------------------------------------------------------------------

def replicate(seed: int = 0) -> dict:
    """Each rank builds its model from its *own* seed; then rank 0's weights are broadcast.

    Also wraps a second, differently seeded model in DDP, whose constructor does the same broadcast.
    """
    with distributed(seed) as ctx:
        torch.manual_seed(seed + 1 + ctx.rank)  # deliberately different on every rank
        model = SimpleModel().to(ctx.device)
        before = flat_params(model)
        for p in model.parameters():
            dist.broadcast(p.data, src=0)  # in place: every rank now holds rank 0's values
        torch.manual_seed(seed + 100 + ctx.rank)
        fresh = SimpleModel().to(ctx.device)
        fresh_before = flat_params(fresh)
        DDP(fresh, device_ids=ctx.device_ids)
        return {"rank": ctx.rank, "before": before, "after": flat_params(model),
                "ddp_before": fresh_before, "ddp_after": flat_params(fresh)}


# --- Step 2: shard the data --------------------------------------------------------------

def shard_indices(n: int = 10, epochs: int = 2, seed: int = 0) -> dict:
    """The sample indices DistributedSampler hands this rank in each epoch, with and without set_epoch."""
    with distributed(seed) as ctx:
        told = DistributedSampler(range(n), num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        never_told = DistributedSampler(range(n), num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        with_epoch, without_epoch = [], []
        for epoch in range(epochs):
            told.set_epoch(epoch)
            with_epoch.append(list(told))
            without_epoch.append(list(never_told))
        return {"rank": ctx.rank, "set_epoch": with_epoch, "no_set_epoch": without_epoch}


def _rank_batches(ctx, batch_size: int, steps: int, seed: int):
    """This rank's batches, epoch after epoch, as the article builds them (plus each sample's index)."""
    x, y = data.load(train=True).tensors
    dataset = TensorDataset(x, y, torch.arange(len(y)))
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{len(y)} samples over {ctx.world_size} ranks make no full batch of {batch_size}")
    done, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)  # without it every epoch repeats epoch 0's order
        for batch in loader:
            if done == steps:
                return
            yield batch
            done += 1
        epoch += 1


# --- Steps 3 and 4: gradients, then their average ----------------------------------------

def allreduce_gradients(model: nn.Module, world_size: int, log: Timeline | None = None,
                        clock: DeviceClock | None = None) -> None:
    """The naive step 4: after backward, sum each gradient over the ranks, then divide.

    One blocking all_reduce per tensor, started only once the whole backward is done.
    Each call goes to ``log`` as a span of ``clock``'s moments (the host's clock by default).
    """
    clock = clock or DeviceClock()
    for p in model.parameters():
        start = clock.now()
        dist.all_reduce(p.grad)  # SUM over ranks, in place
        p.grad /= world_size
        if log is not None:
            log.record("all_reduce", p.grad.numel() * p.grad.element_size(), start, clock.now())


def train(mode: str = "ddp", model: str = "simple", steps: int = 20, batch_size: int = 32,
          lr: float = 0.05, seed: int = 0) -> dict:
    """Data-parallel SGD with step 4 done by hand (``mode="naive"``) or by DDP (``mode="ddp"``)."""
    with distributed(seed) as ctx:
        module = models.build(model).to(ctx.device)  # the same seed on every rank...
        if mode == "naive":
            for p in module.parameters():
                dist.broadcast(p.data, src=0)  # ...but step 1 does not rely on it
            net = module
        elif mode == "ddp":
            net = DDP(module, device_ids=ctx.device_ids)  # broadcasts rank 0's weights itself
        else:
            raise ValueError(f"mode is 'naive' or 'ddp', got {mode!r}")
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(net.parameters(), lr=lr)
        seen, losses = [], []
        for step, (x, target, idx) in enumerate(_rank_batches(ctx, batch_size, steps, seed), 1):
            x, target = x.to(ctx.device), target.to(ctx.device)
            loss = criterion(net(x), target)
            optimizer.zero_grad()
            loss.backward()  # step 3; under DDP step 4 runs inside it, bucket by bucket
            if mode == "naive":
                allreduce_gradients(module, ctx.world_size)
            optimizer.step()
            seen.append(idx.tolist())
            losses.append(loss.item())
            report(step, steps, loss=losses[-1])
        return {"rank": ctx.rank, "mode": mode, "indices": seen, "losses": losses,
                "params": flat_params(module)}


# --- What DDP adds: buckets, overlap, no_sync --------------------------------------------

def logged_allreduce_hook(state: tuple[Timeline, DeviceClock], bucket):  # unannotated: DDP checks
    """DDP's default communication (average each bucket with one all_reduce), noted in a log.

    ``ddp.register_comm_hook((timeline, clock), logged_allreduce_hook)``; each bucket adds a span
    ("all_reduce", bytes, started, done) of the clock's moments. With gloo they are host times,
    when the transfer ran. With NCCL they are CUDA events: ``start`` on the backward's stream,
    when the bucket's gradients were computed; ``done`` inside the future's callback, which torch
    runs on a stream made to wait for the all_reduce, so it is when the GPU finished it.
    """
    log, clock = state
    start, nbytes = clock.now(), bucket.buffer().numel() * bucket.buffer().element_size()

    def done(fut):
        log.record("all_reduce", nbytes, start, clock.now())
        return fut.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


def timeline(caps: tuple = (0.5, 2, 8, 32), steps: int = 6, warmup: int = 2, width: int = 512,
             depth: int = 12, batch_size: int = 64, seed: int = 0) -> dict:
    """One training step timed phase by phase, for several variants trained side by side in one run.

    Variants: "local" (no communication: the compute alone), "naive" (backward, then
    ``allreduce_gradients``), and DDP with each ``bucket_cap_mb`` in ``caps``, plus DDP's
    default. They take turns step by step, so a slow moment of the machine hits all of them.
    Returns, per variant, each timed step's measures and the last step's events.
    """
    with distributed(seed) as ctx:
        base = WideMLP(width, depth).to(ctx.device)
        x, y = data.load(train=True).tensors
        x = x[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)  # any real batch will do
        y = y[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)
        variants = {"local": (copy.deepcopy(base), None), "naive": (copy.deepcopy(base), None)}
        for cap in (*caps, None):
            module = copy.deepcopy(base)
            variants[f"DDP {cap} MB" if cap else "DDP default"] = (
                module, DDP(module, device_ids=ctx.device_ids, bucket_cap_mb=cap))
        clock = DeviceClock(ctx.device)  # on a GPU, events: when the device did the work
        runs = {}
        for name, (module, ddp) in variants.items():
            log = Timeline()
            if ddp is not None:
                ddp.register_comm_hook((log, clock), logged_allreduce_hook)
            ready: list = []
            for p in module.parameters():
                p.register_post_accumulate_grad_hook(lambda p, ready=ready: ready.append(clock.now()))
            runs[name] = {"net": ddp or module, "module": module, "log": log, "ready": ready,
                          "opt": torch.optim.SGD(module.parameters(), lr=0.01), "steps": []}
        criterion = nn.CrossEntropyLoss()
        names = list(runs)
        for step in range(warmup + steps):
            for name in turns(names, step):
                r = runs[name]
                r["log"].spans.clear()
                r["ready"].clear()
                dist.barrier()  # every variant's step starts together on all ranks
                clock.start()
                t = {"start": clock.now()}
                r["opt"].zero_grad()
                loss = criterion(r["net"](x), y)
                t["forward"] = clock.now()
                loss.backward()
                t["backward"] = clock.now()
                if name == "naive":
                    allreduce_gradients(r["module"], ctx.world_size, r["log"], clock)
                t["comm"] = clock.now()
                r["opt"].step()
                t["end"] = clock.now()
                # Every moment on the host's clock (on a GPU this waits for the step to finish).
                t = {k: clock.seconds(v) for k, v in t.items()}
                r["ready"][:] = [clock.seconds(v) for v in r["ready"]]
                r["log"].spans[:] = [(k, n, clock.seconds(a), clock.seconds(b)) for k, n, a, b in r["log"].spans]
                events, compute_end = r["log"].spans, max(r["ready"])  # backward compute ends at the last grad
                if step >= warmup:
                    r["steps"].append({"seconds": t["end"] - t["start"], "backward": compute_end - t["forward"],
                                       "comm": sum(b - a for *_, a, b in events),
                                       "hidden": hidden_fraction([(a, b) for *_, a, b in events], compute_end)})
                r["last"] = {**t, "ready": list(r["ready"]), "comm_events": list(events)}
            report(step + 1, warmup + steps)
        n_params = sum(p.numel() for p in base.parameters())
        return {"rank": ctx.rank, "grad_bytes": 4 * n_params, "steps": steps,
                "runs": {name: {"steps": r["steps"], **r["last"]} for name, r in runs.items()}}


def accumulate(micro_batches: int = 4, steps: int = 6, batch_size: int = 16, lr: float = 0.05,
               model: str = "wide-512x4", seed: int = 0) -> dict:
    """Gradient accumulation over ``micro_batches`` with ``no_sync`` against syncing every micro-batch.

    Two DDP copies of one model train side by side on the same batches; each
    logs its all_reduces. Each step's loss is divided by ``micro_batches`` so the
    accumulated gradient is the mean over the whole accumulated global batch.
    """
    with distributed(seed) as ctx:
        base = models.build(model).to(ctx.device)
        clock = DeviceClock(ctx.device)
        runs = {}
        for name in ("no_sync", "every micro-batch"):
            module = copy.deepcopy(base)
            ddp = DDP(module, device_ids=ctx.device_ids)
            log = Timeline()
            ddp.register_comm_hook((log, clock), logged_allreduce_hook)
            runs[name] = {"ddp": ddp, "module": module, "log": log, "seconds": [], "calls": [], "bytes": [],
                          "comm_s": [], "opt": torch.optim.SGD(ddp.parameters(), lr=lr)}
        criterion = nn.CrossEntropyLoss()
        batches = list(_rank_batches(ctx, batch_size, steps * micro_batches, seed))
        for step in range(steps):
            micro = batches[step * micro_batches:(step + 1) * micro_batches]
            for name in turns(list(runs), step + 1):  # who goes first alternates
                r = runs[name]
                r["log"].spans.clear()
                dist.barrier()
                clock.start()
                start = clock.now()
                r["opt"].zero_grad()
                for i, (x, target, _) in enumerate(micro):
                    last = i == micro_batches - 1
                    # no_sync: gradients pile up locally; only the last backward all-reduces them.
                    skip = r["ddp"].no_sync() if name == "no_sync" and not last else contextlib.nullcontext()
                    with skip:
                        loss = criterion(r["ddp"](x.to(ctx.device)), target.to(ctx.device)) / micro_batches
                        loss.backward()
                r["opt"].step()
                end = clock.now()
                r["seconds"].append(clock.seconds(end) - clock.seconds(start))
                spans = [(k, n, clock.seconds(a), clock.seconds(b)) for k, n, a, b in r["log"].spans]
                r["calls"].append(len(spans))
                r["bytes"].append(sum(nbytes for _, nbytes, _, _ in spans))
                r["comm_s"].append(sum(b - a for *_, a, b in spans))
            report(step + 1, steps)
        return {"rank": ctx.rank, "micro_batches": micro_batches,
                "runs": {name: {k: r[k] for k in ("seconds", "calls", "bytes", "comm_s")}
                         | {"params": flat_params(r["module"])} for name, r in runs.items()}}

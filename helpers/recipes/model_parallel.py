"""Model parallelism (the article's section 3.2): one model's layers on different devices.

Three versions, each a small step from the one before:

* ``helpers.article.ModelParallelModel``: the article's class. Its layers sit on two
  devices of ONE process (``cuda:0`` and ``cuda:1``); the forward moves the activations
  across, and autograd moves their gradients back. It needs two GPUs to split anything.
* ``naive_step``: the same cut across processes, one stage per rank. The forward
  sends activations to the next rank, the backward sends their gradients back. One
  stage works while the others wait, so each is busy about 1/p of the time.
* ``gpipe_step``: the batch cut into m micro-batches, all forwards, then all
  backwards (GPipe). Stages now work at the same time, and the idle "bubble"
  shrinks to (p - 1) / (m + p - 1) of the step (``helpers.theory.bubble_fraction``).
  ``helpers.analysis.summarize_schedules`` reads the busy fractions off the spans.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(split_step, nprocs=2)
    helpers.launch(schedule_timeline, nprocs=2, micro_batches=[1, 4])
    torchrun --nproc-per-node 2 -m helpers.run model_parallel.schedule_timeline
"""
from __future__ import annotations


import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from helpers.data import first_batch
from helpers.dist import distributed, report
from helpers.models import ThreeLayerMLP, balanced_mlp, linear_macs, param_bytes
from helpers.probes.model_parallel import forward_backward
from helpers.training import Timeline, median


def _input_width(stage: nn.Module) -> int:
    """What a stage receives per sample: the input size of its first Linear layer."""
    return next(m for m in stage.modules() if isinstance(m, nn.Linear)).in_features


def receive_activations(stage: nn.Module, n: int, src: int, tag: int = 0) -> torch.Tensor:
    """Wait for ``n`` samples' activations from the previous stage, as a leaf that wants its gradient:
    backward then computes d(loss)/d(input), which the previous stage needs."""
    inp = torch.empty(n, _input_width(stage), device=next(stage.parameters()).device)
    dist.recv(inp, src=src, tag=tag)
    return inp.requires_grad_()


def naive_step(stage: nn.Module, x: torch.Tensor, y: torch.Tensor, prev_rank: int | None,
               next_rank: int | None, timeline: Timeline | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward and backward of naive model parallelism, as one stage sees it.

    ``prev_rank``/``next_rank`` are the neighbouring stages' ranks (None at the ends).
    Every stage is handed the batch: the first uses the images, the last the labels,
    and the others only its size. Returns (this stage's output, the loss on the last
    stage or None). Gradients are left in the stage's parameters; compute spans go
    to ``timeline`` if one is given.
    """
    timeline = timeline or Timeline()
    device = next(stage.parameters()).device
    # Forward: take the images, or wait for the previous stage's activations.
    inp = x.to(device) if prev_rank is None else receive_activations(stage, len(y), prev_rank)
    with timeline.span("F"):
        out = stage(inp)
        loss = F.cross_entropy(out, y.to(device)) if next_rank is None else None
    if next_rank is not None:
        dist.send(out.detach(), dst=next_rank)
    # Backward: start from the loss, or wait for the gradient of this stage's output.
    if next_rank is None:
        with timeline.span("B"):
            loss.backward()
    else:
        grad = torch.empty_like(out)
        dist.recv(grad, src=next_rank)
        with timeline.span("B"):
            out.backward(grad)
    if prev_rank is not None:
        dist.send(inp.grad, dst=prev_rank)
    return out.detach(), None if loss is None else loss.detach()


def gpipe_step(stage: nn.Module, x: torch.Tensor, y: torch.Tensor, prev_rank: int | None,
               next_rank: int | None, micro_batches: int, timeline: Timeline | None = None):
    """GPipe: the batch in ``micro_batches`` pieces; every forward, then every backward.

    While stage s computes micro-batch i, stage s+1 computes micro-batch i-1: that
    overlap is the whole gain. The loss of each micro-batch is weighted by its share
    of the batch, so the summed gradients equal the whole batch's mean-loss gradient.
    Sends are non-blocking (``isend``), so a stage moves on to its next micro-batch.
    (Under DDP, wrap all but the last backward in ``no_sync()``.)
    """
    timeline = timeline or Timeline()
    device = next(stage.parameters()).device
    first, last = prev_rank is None, next_rank is None
    ys = y.chunk(micro_batches)
    xs = x.chunk(micro_batches) if first else [None] * len(ys)
    inputs, outputs, losses, sends = [], [], [], []
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        inp = xi.to(device) if first else receive_activations(stage, len(yi), prev_rank, tag=i)
        with timeline.span("F", i):
            out = stage(inp)
            if last:
                losses.append(F.cross_entropy(out, yi.to(device)) * (len(yi) / len(y)))
        if not last:
            sent = out.detach()
            sends.append((dist.isend(sent, dst=next_rank, tag=i), sent))
        inputs.append(inp)
        outputs.append(out)
    for i in reversed(range(len(ys))):  # backward in reverse: the last forward's activations go first
        if last:
            with timeline.span("B", i):
                losses[i].backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, src=next_rank, tag=i)
            with timeline.span("B", i):
                outputs[i].backward(grad)
        if not first:
            sends.append((dist.isend(inputs[i].grad, dst=prev_rank, tag=i), inputs[i].grad))
    for work, _ in sends:
        work.wait()
    return torch.cat(outputs).detach(), sum(losses).detach() if last else None


def _neighbours(rank: int, p: int) -> tuple[int | None, int | None]:
    return (rank - 1 if rank > 0 else None), (rank + 1 if rank < p - 1 else None)


def _stage_grads(model: nn.Module) -> dict:
    """The gradients this rank computed, under the unsplit model's parameter names."""
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def split_step(batch_size: int = 64, micro_batches: tuple[int, ...] | list[int] = (1,),
               seed: int = 0) -> dict:
    """The article's model cut in two (``ThreeLayerMLP.stages()``), stage r on rank r: one step.

    For each entry of ``micro_batches`` (1 is naive, more is GPipe) it returns this
    rank's stage output and gradients under the full model's names, to be compared
    with the unsplit model's (``forward_backward``).
    """
    with distributed(seed) as ctx:
        if ctx.world_size != 2:
            raise ValueError(f"the article's model has 2 stages; launch 2 ranks, not {ctx.world_size}")
        model = ThreeLayerMLP().to(ctx.device)  # the same seed on every rank: the same initial weights
        stage = model.stages()[ctx.rank]
        x, y = first_batch(batch_size)
        prev_rank, next_rank = _neighbours(ctx.rank, 2)
        runs = {}
        for m in micro_batches:
            model.zero_grad(set_to_none=True)
            if m == 1:
                out, loss = naive_step(stage, x, y, prev_rank, next_rank)
            else:
                out, loss = gpipe_step(stage, x, y, prev_rank, next_rank, m)
            runs[m] = {"out": out.cpu(), "loss": None if loss is None else loss.item(),
                       "grads": {n: g.cpu() for n, g in _stage_grads(model).items()}}
        return {"rank": ctx.rank, "runs": runs, "stage_bytes": param_bytes(stage),
                "model_bytes": param_bytes(model),
                # what crosses the boundary each way per step: stage 0's output, then its gradient
                "boundary_bytes": out.numel() * out.element_size() if ctx.rank == 0 else None}


def _paired_times(model: nn.Module, stage: nn.Module, x, y, prev_rank, next_rank, rank: int,
                  steps: int, device: torch.device) -> tuple[float, float] | None:
    """Median seconds of a naive step and of the unsplit model's step, taken in turns.

    Alternating the two, rather than timing one after the other, lets both see the
    same load on a shared machine. Rank 0 runs the unsplit model while the other
    ranks wait in a barrier, which costs no CPU (gloo blocks, it does not spin).
    """
    clock = Timeline(device)  # its now() waits for the GPU first
    naive, unsplit = [], []
    for _ in range(steps):
        dist.barrier()
        start = clock.now()
        naive_step(stage, x, y, prev_rank, next_rank)
        dist.barrier()  # the step ends when the last stage is done
        naive.append(clock.now() - start)
        stage.zero_grad(set_to_none=True)
        if rank == 0:
            start = clock.now()
            forward_backward(model, x, y)
            unsplit.append(clock.now() - start)
    return (median(naive), median(unsplit)) if rank == 0 else None


def schedule_timeline(micro_batches: tuple[int, ...] | list[int] = (1,), steps: int = 4,
                      warmup: int = 1, batch_size: int = 1024, width: int = 784,
                      layers_per_stage: int = 2, seed: int = 0) -> dict:
    """Time the schedules on ``balanced_mlp``, one stage per rank; return each rank's spans.

    ``micro_batches=1`` is naive model parallelism (``naive_step``); more is GPipe.
    Only the schedule is measured: there is no optimizer step, since it would run on
    every stage at once and change nothing about who waits for whom. At the end, naive
    steps and steps of the whole model unsplit on rank 0 (same threads) are timed in turns.
    """
    with distributed(seed) as ctx:
        p = ctx.world_size
        model = balanced_mlp(p, width, layers_per_stage).to(ctx.device)
        stage = model[ctx.rank]
        x, y = first_batch(batch_size)
        prev_rank, next_rank = _neighbours(ctx.rank, p)
        runs, done, total = {}, 0, len(micro_batches) * (warmup + steps)
        for m in micro_batches:
            # On a GPU the timeline waits for the device at each span's ends: a span is then when the
            # work ran, not when it was queued (NCCL's send and recv return before anything moved).
            timeline = Timeline(ctx.device)
            for step in range(warmup + steps):
                if step == warmup:
                    dist.barrier()  # the measured steps start together
                    timeline = Timeline(ctx.device)  # and keep no warm-up spans
                if m == 1:
                    naive_step(stage, x, y, prev_rank, next_rank, timeline)
                else:
                    gpipe_step(stage, x, y, prev_rank, next_rank, m, timeline)
                stage.zero_grad(set_to_none=True)
                done += 1
                report(done, total, micro_batches=m)
            runs[m] = timeline.spans
        paired = _paired_times(model, stage, x, y, prev_rank, next_rank, ctx.rank, steps, ctx.device)
        return {"rank": ctx.rank, "p": p, "steps": steps, "runs": runs,
                "naive_vs_unsplit_s": paired,  # (naive step, unsplit step), rank 0 only
                "threads": torch.get_num_threads(), "stage_macs": linear_macs(stage),
                "stage_bytes": param_bytes(stage), "model_bytes": param_bytes(model)}

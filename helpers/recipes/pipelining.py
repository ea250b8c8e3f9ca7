"""Pipeline schedules from ``torch.distributed.pipelining`` (chapter 6.1), timed stage by stage.

Chapter 3.2 wrote GPipe by hand (``model_parallel.gpipe_step``). Here the library runs it,
and the schedules that came after it:

* ``ScheduleGPipe``: every forward, then every backward; a stage holds all m micro-batches.
* ``Schedule1F1B``: after p forwards, one backward for each forward; at most p in flight.
* ``ScheduleInterleaved1F1B``: v stages per rank, taken in a loop (rank r holds r, r + p, ...),
  so the fill and drain are made of chunks v times shorter.
* ``ScheduleZBVZeroBubble``: two stages per rank in a V (r and 2p - 1 - r), each backward split
  into the input's gradient (needed upstream now) and the weights' (which can wait for a gap).

Every schedule runs the same model: ``balanced_mlp(p * CHUNKS)``, 2 chunks a rank, either
joined into one stage or kept as 2. A schedule's own hooks are its stage's
``forward_one_chunk``/``backward_one_chunk``/``backward_weight_one_chunk``: wrapping them
records each span ("F", "B" full backward, "I" input gradient, "W" weight gradient).

    helpers.launch(compare_gradients, nprocs=2)
    helpers.launch(schedule_timelines, nprocs=2, micro_batches=[2, 4, 8])
    torchrun --nproc-per-node 2 -m helpers.run pipelining.schedule_timelines
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining

from helpers.data import first_batch
from helpers.dist import distributed, report
from helpers.models import balanced_mlp
from helpers.probes.model_parallel import forward_backward
from helpers.recipes.model_parallel import _neighbours, gpipe_step
from helpers.training import Timeline

CHUNKS = 2  # model chunks per rank: one stage of 2 chunks, or 2 stages (virtual stages, v = 2)

# name -> (schedule class, layout of the p * CHUNKS chunks over ranks)
SCHEDULES = {
    "GPipe": (pipelining.ScheduleGPipe, "joined"),
    "1F1B": (pipelining.Schedule1F1B, "joined"),
    "Interleaved1F1B": (pipelining.ScheduleInterleaved1F1B, "loop"),
    "ZBV": (pipelining.ScheduleZBVZeroBubble, "v"),
}


def stage_chunks(layout: str, rank: int, p: int) -> list[list[int]]:
    """Which chunks rank ``rank`` holds, as one list per pipeline stage it runs.

    joined: chunks 2r, 2r+1 as one stage (v = 1); loop: stages r and r + p (Megatron's
    interleaving); v: stages r and 2p - 1 - r, so the last rank holds the turn of the V.
    """
    if layout == "joined":
        return [list(range(CHUNKS * rank, CHUNKS * (rank + 1)))]
    if layout == "loop":
        return [[rank + k * p] for k in range(CHUNKS)]
    if layout == "v":
        return [[rank], [2 * p - 1 - rank]]
    raise ValueError(f"unknown layout {layout!r}")


def stage_indices(layout: str, rank: int, p: int) -> list[int]:
    """The pipeline's stage numbers of ``stage_chunks``: the chunk's own index, or the rank's."""
    return [rank] if layout == "joined" else [c[0] for c in stage_chunks(layout, rank, p)]


class SavedBytes:
    """Live bytes that autograd holds for backward, over time: what a stage's activations cost.

    ``torch.autograd.graph.saved_tensors_hooks`` packs every saved tensor into a small holder;
    when autograd frees the graph after the backward, the holder goes and its bytes with it.
    A tensor saved twice (a ReLU's output is also the next Linear's input) counts once, and
    parameters (which layers also save) are model state, not activations, so they are skipped.
    """

    def __init__(self, params=()):
        self.params = {q.untyped_storage().data_ptr() for q in params}
        self.holders: dict[tuple[int, int], int] = {}
        self.live = self.peak = 0

    def _pack(self, t):
        if t.untyped_storage().data_ptr() in self.params:
            return t
        return _Held(self, t)

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda h: h.tensor if isinstance(h, _Held) else h)

    def add(self, key, n: int, sign: int) -> None:
        before = self.holders.get(key, 0)
        self.holders[key] = before + sign
        if (before, sign) in ((0, 1), (1, -1)):  # the first holder of these bytes came, or the last went
            self.live += sign * n
            self.peak = max(self.peak, self.live)


class _Held:
    def __init__(self, owner: SavedBytes, tensor):
        self.owner, self.tensor = owner, tensor
        self.nbytes = tensor.numel() * tensor.element_size()
        self.key = (tensor.data_ptr(), self.nbytes)  # a view's own bytes, where they start
        owner.add(self.key, self.nbytes, +1)

    def __del__(self):
        self.owner.add(self.key, self.nbytes, -1)


def instrument(stage, index: int, timeline: Timeline, in_flight: dict):
    """Wrap the stage's three hooks: each call becomes a span ``(kind, (stage, micro-batch), t0, t1)``.

    ``in_flight`` counts micro-batches whose forward ran and whose backward (full, or the input
    part) has not: a micro-batch's activations stay alive exactly that long.
    """
    fwd, bwd, wgt = stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk

    def forward_one_chunk(mb, *args, **kwargs):
        with timeline.span("F", (index, mb)):
            out = fwd(mb, *args, **kwargs)
        in_flight["now"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        return out

    def backward_one_chunk(mb, *args, full_backward: bool = True, **kwargs):
        with timeline.span("B" if full_backward else "I", (index, mb)):
            out = bwd(mb, *args, full_backward=full_backward, **kwargs)
        in_flight["now"] -= 1
        return out

    def backward_weight_one_chunk(mb, *args, **kwargs):
        with timeline.span("W", (index, mb)):
            return wgt(mb, *args, **kwargs)

    stage.forward_one_chunk, stage.backward_one_chunk = forward_one_chunk, backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk


def build_schedule(name: str, model: nn.Sequential, rank: int, p: int, m: int, device):
    """This rank's ``PipelineStage``s of ``model`` for schedule ``name``, and the schedule over them."""
    cls, layout = SCHEDULES[name]
    n_stages = p if layout == "joined" else len(model)
    stages = [pipelining.PipelineStage(nn.Sequential(*(model[c] for c in chunks)), index, n_stages, device)
              for index, chunks in zip(stage_indices(layout, rank, p), stage_chunks(layout, rank, p))]
    loss = F.cross_entropy  # a mean per micro-batch; scale_grads divides the sum by m: the batch's mean
    schedule = cls(stages[0], m, loss_fn=loss) if layout == "joined" else cls(stages, m, loss_fn=loss)
    return stages, schedule


def library_step(schedule, stages, x, y, rank: int, p: int) -> torch.Tensor | None:
    """One schedule step: the first rank feeds the images, the rank of the last stage the labels."""
    last = any(s.is_last for s in stages)
    kwargs = {"target": y, "losses": []} if last else {}
    args = (x,) if any(s.is_first for s in stages) else ()
    schedule.step(*args, **kwargs)
    return torch.stack(kwargs["losses"]).mean() if last else None


def _grads(model: nn.Module) -> dict:
    return {n: q.grad.detach().cpu().clone() for n, q in model.named_parameters() if q.grad is not None}


def compare_gradients(schedules: list[str] | tuple[str, ...] = tuple(SCHEDULES), micro_batches: int = 4,
                      batch_size: int = 64, width: int = 64, seed: int = 0) -> dict:
    """One step of each schedule, of chapter 3.2's hand-written GPipe, and of the unsplit model.

    Each rank returns the gradients it computed, under the unsplit model's parameter names,
    and the unsplit model's own (every rank builds it from the same seed, and runs it whole).
    """
    with distributed(seed) as ctx:
        p = ctx.world_size
        model = balanced_mlp(CHUNKS * p, width, 1).to(ctx.device)
        x, y = first_batch(batch_size)
        x, y = x.to(ctx.device), y.to(ctx.device)
        unsplit = forward_backward(model, x, y)["grads"]
        model.zero_grad(set_to_none=True)
        runs = {}
        prev_rank, next_rank = _neighbours(ctx.rank, p)
        mine = nn.Sequential(*(model[c] for c in stage_chunks("joined", ctx.rank, p)[0]))
        gpipe_step(mine, x, y, prev_rank, next_rank, micro_batches)
        runs["hand-written GPipe"] = _grads(model)
        for name in schedules:
            model.zero_grad(set_to_none=True)
            stages, schedule = build_schedule(name, model, ctx.rank, p, micro_batches, ctx.device)
            library_step(schedule, stages, x, y, ctx.rank, p)
            runs[name] = _grads(model)
        return {"rank": ctx.rank, "p": p, "unsplit": {n: g.cpu() for n, g in unsplit.items()}, "runs": runs}


def schedule_timelines(schedules: list[str] | tuple[str, ...] = tuple(SCHEDULES),
                       micro_batches: list[int] | tuple[int, ...] = (2, 4, 8), steps: int = 3,
                       warmup: int = 1, batch_size: int = 512, width: int = 1024, seed: int = 0) -> dict:
    """Time each schedule at each micro-batch count; return this rank's spans and activation counts.

    Per (schedule, m): the spans of the measured steps, the most micro-batches in flight at once
    on this rank, the peak of live saved bytes, the bytes one micro-batch's forward saves, and
    how many model chunks each of this rank's stages holds (what ``theory.replay_idle`` weighs).
    The first step of each also infers the stages' shapes (one extra message), so it is warm-up.
    """
    with distributed(seed) as ctx:
        p = ctx.world_size
        model = balanced_mlp(CHUNKS * p, width, 1).to(ctx.device)
        x, y = first_batch(batch_size)
        x, y = x.to(ctx.device), y.to(ctx.device)
        plan = [(name, m) for name in schedules for m in micro_batches if name != "1F1B" or m >= p]
        runs, done = {}, 0
        for name, m in plan:
            stages, schedule = build_schedule(name, model, ctx.rank, p, m, ctx.device)
            timeline, in_flight, peaks = Timeline(ctx.device), {"now": 0, "peak": 0}, []
            for s, index in zip(stages, stage_indices(SCHEDULES[name][1], ctx.rank, p)):
                instrument(s, index, timeline, in_flight)
            saved, steps_spans = SavedBytes(model.parameters()), []
            for step in range(warmup + steps):
                # The first step also infers the stages' shapes, and keeps one micro-batch's graph
                # alive for it: warm-up runs outside the hooks, so none of that is counted.
                torch.distributed.barrier()  # each measured step starts together: its own window
                timeline.spans.clear()
                in_flight["peak"] = 0
                with saved.hooks() if step >= warmup else contextlib.nullcontext():
                    library_step(schedule, stages, x, y, ctx.rank, p)
                model.zero_grad(set_to_none=True)
                if step >= warmup:
                    steps_spans.append(list(timeline.spans))
                    peaks.append(in_flight["peak"])
            per_mb = _one_micro_batch_bytes(stages, x, m, width, saved.params)
            layout = SCHEDULES[name][1]
            runs[(name, m)] = {"steps": steps_spans, "in_flight": max(peaks),
                               "peak_saved": saved.peak, "micro_batch_saved": per_mb,
                               "chunks": {i: len(c) for i, c in zip(stage_indices(layout, ctx.rank, p),
                                                                    stage_chunks(layout, ctx.rank, p))}}
            done += 1
            report(done, len(plan), micro_batches=m)
        return {"rank": ctx.rank, "p": p, "steps": steps, "runs": runs, "threads": torch.get_num_threads()}


def _one_micro_batch_bytes(stages, x, m: int, width: int, params: set) -> int:
    """What one micro-batch's forward through this rank's stages saves for backward, alone: the
    unit of ``peak_saved``. A later stage's input is a stand-in of the received activations' shape."""
    counter, n = SavedBytes(), len(x) // m
    counter.params = params
    with counter.hooks():
        outs = [s.submod(x[:n] if s.is_first else torch.randn(n, width, device=x.device, requires_grad=True))
                for s in stages]
        losses = [F.cross_entropy(o, torch.zeros(n, dtype=torch.long, device=x.device))
                  for s, o in zip(stages, outs) if s.is_last]
    del outs, losses
    return counter.peak

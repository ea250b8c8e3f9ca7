"""Chapter 8.1: part 8's GPT trained with DDP on Python's documentation, and a few of its steps profiled.

* ``train``: the GPT (``helpers.gpt``) learns the text (``helpers.text``) with DDP; every rank
  returns its losses and its steps' seconds, rank 0 also the validation loss before and after and
  a sample of generated text.
* ``profile_steps``: a few DDP steps under ``torch.profiler`` on every rank. Each rank writes one
  Chrome/Perfetto trace, ``trace{rank}.json.gz``, into ``out_dir``, and keeps the book's own
  ``Timeline`` of the same steps; each phase is also marked in the trace (``record_function``),
  so the two clocks can be held against each other.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(train, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run transformer.profile_steps --out_dir /tmp/traces
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import gpt, text
from helpers.dist import distributed, report
from helpers.training import Timeline, median

PHASES = ("forward", "backward", "optimizer")  # one step of the GPT, as the Timeline and the trace mark it
TRACE_NAME = "trace{rank}.json.gz"  # gzipped (torch writes .gz when asked): Perfetto opens it as it is
# kineto, the profiler's C++ side, logs to the process's stderr at its ERROR level and above: two
# "USDT ... profiler_start/stop" markers per profile, and, where torch was built for CUDA but the
# machine has no driver, "gpuGetDeviceCount failed with code 35" (cudaErrorInsufficientDriver) as it
# looks for GPUs to describe in the trace. Its levels run VERBOSE 0 ... ERROR 4, USDT 5; 6 is above them all.
KINETO_QUIET = "6"


def quiet_kineto(device: torch.device) -> None:
    """Silence kineto's stderr on a CPU rank, before its first profile reads ``KINETO_LOG_LEVEL``.

    On a CPU there is nothing for it to report but the two lines above; on a GPU its errors
    (CUPTI's, say) matter, so they are left alone. A level the reader set is kept."""
    if device.type != "cuda":
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)


def _model(ctx, config: str, lr: float):
    model = gpt.build(config).to(ctx.device)
    ddp = DDP(model, device_ids=ctx.device_ids)
    return model, ddp, torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)


def _step(ddp, opt, x, y) -> torch.Tensor:
    _, loss = ddp(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()  # DDP all-reduces the gradients, bucket by bucket, while backward runs
    opt.step()
    return loss


@torch.no_grad()
def _val_loss(model, ids: torch.Tensor, batch: int, seq: int, device) -> float:
    x, y = text.batch(ids, batch, seq, torch.Generator().manual_seed(1))  # the same windows every time
    return model(x.to(device), y.to(device))[1].item()


def train(config: str = "gpt-small", steps: int = 200, batch: int = 8, lr: float = 3e-3, seed: int = 0,
          prompt: str = "The ", sample_tokens: int = 240) -> dict:
    """``steps`` AdamW steps of DDP on ``batch`` windows a rank; losses, step seconds, a sample."""
    with distributed(seed) as ctx:
        model, ddp, opt = _model(ctx, config, lr)
        cfg = model.cfg
        train_ids, val_ids = text.split()
        val_before = _val_loss(model, val_ids, 32, cfg.seq, ctx.device)
        losses, seconds = [], []
        for i, (x, y) in enumerate(text.batches(train_ids, batch, cfg.seq, steps, seed, ctx.rank, ctx.world_size)):
            start = time.perf_counter()
            loss = _step(ddp, opt, x.to(ctx.device), y.to(ctx.device)).item()  # .item() waits for a GPU
            seconds.append(time.perf_counter() - start)
            losses.append(loss)
            report(i + 1, steps, loss=loss)
        out = {"rank": ctx.rank, "world_size": ctx.world_size, "config": cfg.to_dict(), "batch": batch,
               "losses": losses, "seconds": seconds, "step_s": median(seconds[len(seconds) // 4:]),
               "threads": torch.get_num_threads(), "device": str(ctx.device)}
        if ctx.is_main:
            g = torch.Generator(device=ctx.device).manual_seed(seed)
            ids = model.generate(text.encode(prompt)[None].to(ctx.device), sample_tokens, top_k=10, generator=g)
            out |= {"val_before": val_before, "val_after": _val_loss(model, val_ids, 32, cfg.seq, ctx.device),
                    "prompt": prompt, "sample": text.decode(ids[0].cpu())}
        return out


def clock_marks(record_function, label: str, tries: int = 5) -> list[tuple[str, float, float]]:
    """Empty ``record_function`` events, each opened and closed between two ``perf_counter`` reads:
    points where the trace's clock and the Timeline's are known together. The tightest pair of reads
    is the one ``helpers.analysis.traces`` uses (the first ``record_function`` of a process is slow)."""
    marks = []
    for k in range(tries):
        name = f"clock:{label}{k}"
        before = time.perf_counter()
        with record_function(name):
            pass
        marks.append((name, before, time.perf_counter()))
    return marks


def profile_steps(out_dir: str, config: str = "gpt-small", steps: int = 3, warmup: int = 2, batch: int = 8,
                  lr: float = 3e-3, seed: int = 0) -> dict:
    """``warmup`` DDP steps, then ``steps`` under ``torch.profiler`` on every rank; each rank writes
    ``out_dir/trace{rank}.json.gz`` and returns its Timeline of the same steps' phases."""
    from torch.profiler import ProfilerActivity, profile, record_function
    with distributed(seed) as ctx:
        quiet_kineto(ctx.device)
        model, ddp, opt = _model(ctx, config, lr)
        train_ids, _ = text.split()
        batches = text.batches(train_ids, batch, model.cfg.seq, warmup + steps, seed, ctx.rank, ctx.world_size)
        for x, y in batches[:warmup]:  # gloo's connections and DDP's buckets are set up here, not traced
            _step(ddp, opt, x.to(ctx.device), y.to(ctx.device))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
        timeline = Timeline(ctx.device)
        with profile(activities=activities) as prof:
            marks = {"start": clock_marks(record_function, "start")}
            for i, (x, y) in enumerate(batches[warmup:]):
                x, y = x.to(ctx.device), y.to(ctx.device)
                with timeline.span("forward", i), record_function("phase:forward"):
                    _, loss = ddp(x, y)
                with timeline.span("backward", i), record_function("phase:backward"):
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                with timeline.span("optimizer", i), record_function("phase:optimizer"):
                    opt.step()
                report(i + 1, steps)
            marks["end"] = clock_marks(record_function, "end")
        path = Path(out_dir) / TRACE_NAME.format(rank=ctx.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
        return {"rank": ctx.rank, "trace": str(path), "spans": timeline.spans, "clock_marks": marks,
                "pid": os.getpid(), "main_tid": _main_tid(), "steps": steps, "batch": batch,
                "config": model.cfg.to_dict(), "device": str(ctx.device)}


def _main_tid() -> int:
    """The thread id the profiler gives this (the main) thread: the OS's, on Linux and macOS alike."""
    import threading
    return threading.get_native_id()

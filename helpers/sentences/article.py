"""The article's chapters (1, 3.x, 5.x): where their runs ran, and what that means for the prose."""
from __future__ import annotations

from .. import plans
from ..machine import Machine
from .common import _runs, _ran_on_gpus, _split_why, _p_list, _where, _loopback_nodes


def background(m: Machine) -> dict[str, str]:
    return {"machine_described": m.describe(), **_runs(m, "01_background")}


def data_parallel(m: Machine) -> dict[str, str]:
    """3.1: the bucket timeline ran with 2 ranks, on GPUs or not; nn.DataParallel ran where 2 GPUs are."""
    on_gpus = _ran_on_gpus(m, 2)
    case = "the run above is that case" if on_gpus else "that case was not measured"
    if plans.two_gpus_in_one_process(m):
        dp = (f"ran here, on {m.n_gpus} GPUs, and ended with the weights of one GPU training on the "
              "global batch (asserted)")
    else:
        dp = (f"did not run here: this machine has {m.describe()}, and nn.DataParallel needs at least "
              "2 GPUs. On a machine with 2 or more, this cell runs it and asserts its weights equal "
              "those of one GPU training on the global batch")
    clock = ("Each moment in it is a CUDA event recorded on the stream that did the work, placed on the "
             "host's clock afterwards: it shows when the GPU computed or reduced, not when the host queued "
             "the work (NCCL's calls return at once)." if on_gpus else
             "Each moment in it is the host's clock, read as the work happens: on the CPU the backward "
             "runs inside `backward()`, and an all-reduce's end is read when gloo's thread finishes it.")
    return {"tl_clock": clock, "tl_where": "unlike this run, which used NCCL" if on_gpus else "as in this run",
            "tl_gpu_case": f"This machine has {m.describe()}, so {case}", "dp_status": dp,
            **_runs(m, "03_1_data_parallel")}


def model_parallel(m: Machine) -> dict[str, str]:
    first, second = plans.split_devices(m)
    where = f"{first} and {second}" if second != "cpu" else "the CPU for both halves"
    on_cpu = plans.cpu_stage_counts(m)
    on_gpu = [p for p in plans.MP_TIMELINE_RANKS if p not in on_cpu]
    floor = (f"Where the stages were CPU cores ({_p_list(on_cpu)}), each was also busy at least 0.5/p of "
             f"the time: a send is short next to a stage's compute there (asserted)." if on_cpu else "")
    if on_gpu:
        floor += (f" Where the stages were GPUs ({_p_list(on_gpu)}), no lower bound is asserted: a GPU "
                  f"computes a 784-wide layer in microseconds, about what a send and a synchronize cost, "
                  f"so waiting on the link is a visible share of the step.")
    clock = ("Each span starts and ends with a synchronize of the rank's GPU, so it shows when the GPU ran "
             "the stage, not when the host queued it (NCCL's send and recv return before anything moved)."
             if on_gpu else "On a CPU a stage's arithmetic runs inside the call, so each span is when it ran.")
    return {"mp_inproc_where": f"{where}, {_split_why(m)}", "mp_busy_floor": floor.strip(),
            "mp_span_clock": clock, **_runs(m, "03_2_model_parallel")}


def mixed_precision(m: Machine) -> dict[str, str]:
    """3.3 runs in one process on ``devices.of_process()``: the first GPU, else the CPU."""
    gpu = m.gpus[0] if m.gpus else None
    return {"gpu_case": f"It ran on this machine's GPU, a {gpu}" if gpu
            else f"It did not run on a GPU here: this machine has {m.describe()}",
            "fp16_units": "has them, so here float16 need not be slow" if m.native_fp16 else "has none"}


def cuda_peak(m: Machine, peak: dict | None) -> str:
    """3.3: the allocator's peak during one step, in MiB, where the run was on a GPU (glued after it)."""
    if not peak:
        return f"It did not run here: this machine has {m.describe()}"
    return (f"Here, on the {m.gpus[0]}, one step's peak above the model was {peak['fp32'] / 2**20:.1f} MiB "
            f"in fp32 and {peak['autocast'] / 2**20:.1f} MiB under autocast")


def amp_training(m: Machine) -> dict[str, str]:
    """5.2's DDP runs have 2 ranks: on GPUs only where there are two."""
    if _ran_on_gpus(m, 2):
        gpu_case = f"here it ran on {m.n_gpus} GPUs" if m.n_gpus == 2 else "here it ran on 2 of the GPUs"
    elif m.n_gpus == 1:
        gpu_case = ("one GPU cannot give two ranks a device each, so here they ran on the CPU "
                    "(chapter 3.3 ran float16 on this machine's GPU)")
    else:
        gpu_case = f"it did not run on GPUs here: this machine has {m.describe()}"
    return {"gpu_case": gpu_case, "amp_resume_where": "on the GPUs" if _ran_on_gpus(m, 2) else "on the CPU too",
            **_runs(m, "05_2_amp_training")}


def model_parallel_training(m: Machine) -> dict[str, str]:
    """5.3: the article's split in one process, then 2 stages in 2 ranks, then 2 x 2 in 4 ranks."""
    first, second = plans.split_devices(m)
    where = f"on {first} and {second}" if second != "cpu" else "with both halves on the CPU"
    if _ran_on_gpus(m, 4):
        note = "This machine has enough GPUs for the NCCL path, and it ran on them."
    elif _ran_on_gpus(m, 2):
        note = (f"Here the two-stage run used NCCL, but this machine has {m.describe()}, "
                "too few for 4 ranks, so the hybrid ran on the CPU over gloo.")
    else:
        note = f"That path did not run here: this machine has {m.describe()}."
    return {"mpt_where": f"{where}, {_split_why(m)}", "mpt_gpu_note": note, **_runs(m, "05_3_model_parallel_training")}


def checkpointing(m: Machine) -> dict[str, str]:
    if _ran_on_gpus(m, 2):
        here = "Here each rank loaded onto its own GPU, which is what the fix is for"
    else:
        here = "Here the ranks ran on the CPU, so this fix changed nothing in this run"
    return {"map_location_here": here, **_runs(m, "05_4_checkpointing")}


def ddp_training(m: Machine) -> dict[str, str]:
    """5.1: the live and throughput runs give each rank one thread; the throughput pairs follow
    ``plans.throughput_backends``; the two torchrun nodes share this host."""
    pairs = plans.throughput_backends(m)
    runs = (f"On this machine ({m.describe()}), the live run below ran as 2 ranks {_where(m.backend(2))}, "
            f"and the throughput runs as 1 rank, then 2, {', and again '.join(_where(b) for b in pairs)}; "
            "each of their ranks had one thread.")
    if len(pairs) > 1:
        tp_where = ("Both ran over NCCL, one GPU per rank. The same pair then ran over gloo on the CPU, "
                    "one thread per rank: chapter 4.3's fits, used for the prediction below, were measured "
                    "that way")
        against = "the pair that ran over gloo on the CPU, as 4.3's fits were measured (not the GPU pair)"
    else:
        why = (": one GPU cannot hold two ranks, and a one-rank GPU step set against a two-rank CPU step "
               "would compare devices, not rank counts" if m.n_gpus == 1 else "")
        tp_where = f"Both ran over gloo on the CPU, one thread per rank{why}"
        against = "the same pair, which ran over gloo on the CPU as 4.3's fits were measured"
    return {"runs_where": runs, "tp_where": tp_where, "pred_against": against,
            "nodes_where": _loopback_nodes(m, "the two nodes below")}

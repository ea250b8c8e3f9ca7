"""Whole runs reduced and compared: assembled stages (5.3), tensors (3.2, 5.4), DDP throughput and
where it ran (5.1, 5.2)."""
from __future__ import annotations

import json

import numpy as np

from ..training import median

# --- Chapter 5.3: a model put together from its stages -----------------------------------

def assemble(ranks: list[dict], dp_rank: int = 0) -> dict:
    """One replica's full state dict, put together from its stages' ranks."""
    state = {}
    for r in ranks:
        if r["dp_rank"] == dp_rank:
            state.update(r["state"])
    return state


def replica_mean_losses(ranks: list[dict]) -> list[float]:
    """The global batch's loss per step: the mean of the replicas' last-stage losses (equal batches)."""
    last = [r["losses"] for r in ranks if r["losses"]]
    return np.mean(np.asarray(last), axis=0).tolist()


# --- Chapters 3.2 and 5.4: two runs' tensors compared ---------------------------------------

def max_abs_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two dicts of tensors (state dicts, gradients),
    over the names of ``a``: 0.0 when one run repeated the other exactly."""
    return max((a[k] - b[k]).abs().max().item() for k in a)


# --- Chapters 5.1 and 5.2: DDP runs of ddp_mnist, reduced -----------------------------------

def ddp_throughput(result: dict, batch_size: int = 64) -> float:
    """Global samples per second of one rank's ``ddp_mnist.train`` result: a step's samples over
    that rank's *median* step time, so that a step slowed by another program does not count."""
    return batch_size * result["world_size"] / median(result["step_seconds"])


def slowest_rank_seconds(ranks: list[dict]) -> float:
    """A DDP job's training time: the slowest rank's ``seconds``, since it sets everyone's pace."""
    return max(r["seconds"] for r in ranks)


def same_state(a: dict, b: dict) -> bool:
    """Whether two state dicts hold the same names and bit-identical tensors."""
    import torch
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def ran_on(result: dict) -> str:
    """Where a ``ddp_mnist.train`` run ran, in words, from rank 0's own record of it."""
    if result["device"].startswith("cuda"):
        n = result["world_size"]
        return f"over NCCL on {'a GPU' if n == 1 else f'{n} GPUs'}"
    return f"over {result['backend']} on the CPU"


def peak_memory_mib(result: dict) -> float:
    """A rank's peak memory where its model lived, in MiB: the GPU allocator's peak on a GPU (the
    model, its gradients and activations), else the process's peak RSS (Python and torch included)."""
    peak = result["peak_memory"]
    return peak.get("gpu_peak_bytes", peak["host_peak_rss_bytes"]) / 2**20


def peak_memory_kind(result: dict) -> str:
    """What ``peak_memory_mib`` measured for this run, in words for the prose."""
    if "gpu_peak_bytes" in result["peak_memory"]:
        return "The GPU allocator's peak (`torch.cuda.max_memory_allocated`) per rank"
    return "Peak resident memory (RSS) per rank"


def second_rank_verdict(predicted_ratio: float) -> str:
    """What a predicted 2-rank / 1-rank throughput ratio says about the second rank, in words."""
    if predicted_ratio < 1.2:
        return ("so a second rank barely pays here: at 64 images a step, there is too little compute "
                "to pay for an all_reduce")
    if predicted_ratio < 1.8:  # "nearly doubles" only where it nearly does
        return "so a second rank pays here, in part: the all_reduce takes much of what it saves"
    return "so a second rank nearly doubles the throughput here: the step's compute dwarfs its all_reduce"


def printed_result(runs: list) -> dict:
    """Rank 0's result from a torchrun job's nodes (``cluster.NodeRun``): the last JSON object
    ``helpers.run`` printed, on whichever node the rendezvous gave RANK 0 (no other rank prints one)."""
    for run in runs:
        if "\n{" in run.stdout:
            return json.loads(run.stdout[run.stdout.rindex("\n{") + 1:run.stdout.rindex("}") + 1])
    raise ValueError("no node printed a result:\n" + "\n".join(r.stdout[-2000:] for r in runs))

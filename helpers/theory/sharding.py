"""Sharding (chapter 6.2): ZeRO's memory per rank, the bytes its collectives move, and what they cost.

Chapter 2's ``model_state_bytes`` is one replica's states; ZeRO divides them by the
p ranks one kind at a time: stage 1 the optimizer states, stage 2 the gradients too,
stage 3 the parameters too (Rajbhandari et al. 2020). FSDP2 with
``reshard_after_forward=True`` is stage 3; with ``False`` (FSDP1's ``SHARD_GRAD_OP``) it sends
stage 2's collectives.
The bytes a collective sends come from chapter 4.2's ``BUS_FACTOR`` (ring algorithms),
and their time from its ring model.
"""
from __future__ import annotations

import numpy as np

from .checks import at_least, one_of, whole, widths as check_widths, within
from .communication import BUS_FACTOR, ddp_step_time, ring_allreduce_time
from .memory import model_state_bytes

STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
SHARDED = {"DDP": (), "ZeRO-1": ("optimizer states",),
           "ZeRO-2": ("optimizer states", "gradients"),
           "ZeRO-3": ("optimizer states", "gradients", "parameters")}

# Collectives of one training step, each over all of the parameters' bytes: DDP all-reduces the
# gradients; ZeRO-1/2 reduce-scatter them and all-gather the updated shards; ZeRO-3 all-gathers the
# parameters for the forward, again for the backward (they were freed in between), and
# reduce-scatters the gradients. Without resharding after forward (FSDP2's
# reshard_after_forward=False) the second all-gather is not needed: ZeRO-2's traffic.
COLLECTIVES = {"DDP": {"all_reduce": 1}, "ZeRO-1": {"reduce_scatter": 1, "all_gather": 1},
               "ZeRO-2": {"reduce_scatter": 1, "all_gather": 1},
               "ZeRO-3": {"all_gather": 2, "reduce_scatter": 1}}

# What gloo runs for each collective: its reduce_scatter is an all_reduce of the whole input,
# of which each rank then keeps its own chunk (ProcessGroupGloo.cpp, reduce_scatter_single_coalesced).
GLOO_RUNS = {"reduce_scatter": "all_reduce"}


def sharded_state_bytes(n_params: int, p: int, stage: str, optimizer: str = "adam",
                        precision: str = "fp32", n_tensors: int = 0) -> dict[str, float]:
    """Bytes of model states on one of p ranks under ``stage`` (one of ``STAGES``).

    ZeRO's accounting: with Ψ parameters and K bytes of optimizer state each, DDP holds
    (4 + 4 + K) Ψ bytes a rank; ZeRO-1 4Ψ + 4Ψ + KΨ/p; ZeRO-2 4Ψ + (4 + K)Ψ/p;
    ZeRO-3 (4 + 4 + K)Ψ/p. Adam's step counts (4 bytes per tensor) are not divided:
    every rank keeps one for each shard it updates.
    """
    one_of("stage", stage, STAGES), whole("p", p)
    states = model_state_bytes(n_params, optimizer, precision, n_tensors)
    steps = 4 * n_tensors if optimizer == "adam" else 0
    out = {}
    for kind, b in states.items():
        if kind not in SHARDED[stage]:
            out[kind] = float(b)
        elif kind == "optimizer states":
            out[kind] = (b - steps) / p + steps
        else:
            out[kind] = b / p
    return out


def _runs(op: str, backend: str) -> str:
    """The collective ``backend`` runs for ``op``."""
    one_of("op", op, BUS_FACTOR), one_of("backend", backend, ("nccl", "gloo"))
    return GLOO_RUNS.get(op, op) if backend == "gloo" else op


def _ops(stage: str, reshard_after_forward: bool) -> dict[str, int]:
    ops = dict(COLLECTIVES[one_of("stage", stage, STAGES)])
    if stage == "ZeRO-3" and not reshard_after_forward:
        ops["all_gather"] = 1
    return ops


def bytes_sent(op: str, message_bytes, p: int, backend: str = "nccl"):
    """Bytes one rank sends for one collective over a message of ``message_bytes`` (the full tensor).

    Ring algorithms: all_reduce 2 (p - 1) / p M; all_gather and reduce_scatter (p - 1) / p M.
    On gloo a reduce_scatter is an all_reduce (``GLOO_RUNS``), so it sends twice the textbook bytes.
    """
    runs = _runs(op, backend)
    whole("p", p), at_least("message_bytes", message_bytes)
    return BUS_FACTOR[runs](p) * np.asarray(message_bytes, dtype=float)


def step_traffic(param_bytes: float, p: int, stage: str, backend: str = "nccl",
                 reshard_after_forward: bool = True) -> dict[str, float]:
    """Bytes one rank sends in one step under ``stage``, by collective (see ``COLLECTIVES``)."""
    ops = _ops(stage, reshard_after_forward)
    return {op: n * float(bytes_sent(op, param_bytes, p, backend)) for op, n in ops.items()}


def collective_time(op: str, message_bytes, p: int, step_latency: float, seconds_per_byte: float,
                    backend: str = "nccl", messages: int = 1):
    """Seconds of one collective in the ring model, the message cut into ``messages`` calls.

    all_reduce is ``ring_allreduce_time``: 2 (p - 1) steps. all_gather and reduce_scatter
    are each half of that ring: (p - 1) steps of M / p bytes. Each extra call pays the
    steps' latency again; on gloo reduce_scatter costs an all_reduce.
    """
    runs = _runs(op, backend)
    whole("p", p), whole("messages", messages), at_least("message_bytes", message_bytes)
    at_least("step_latency", step_latency), at_least("seconds_per_byte", seconds_per_byte)
    m = np.asarray(message_bytes, dtype=float)
    if runs == "all_reduce":
        return messages * 2.0 * (p - 1) * step_latency + ring_allreduce_time(m, p, 0.0, seconds_per_byte)
    return messages * (p - 1) * step_latency + BUS_FACTOR[runs](p) * m * seconds_per_byte


def sharded_step_time(t_compute, param_bytes: float, p: int, stage: str, step_latency: float,
                      seconds_per_byte: float, overlappable=0.0, backend: str = "nccl",
                      messages: int = 1, reshard_after_forward: bool = True):
    """Chapter 4.2's ``ddp_step_time`` with the stage's collectives as the communication.

    ``overlappable``: the compute during which the collectives can run (prefetching the
    next layer's all-gather, reducing the last layer's gradients while backward goes
    on). Sharding is free when it sends what DDP sends (ZeRO-1, ZeRO-2), or when its
    extra bytes fit in the overlappable compute; it costs time when they do not.
    """
    ops = _ops(stage, reshard_after_forward)
    at_least("t_compute", t_compute), at_least("overlappable", overlappable)
    t_comm = sum(n * collective_time(op, param_bytes, p, step_latency, seconds_per_byte, backend, messages)
                 for op, n in ops.items())
    return ddp_step_time(t_compute, t_comm, overlappable)


def zero3_hidden_from(param_bytes: float, p: int, step_latency: float, seconds_per_byte: float,
                      backend: str = "nccl", messages: int = 1) -> float:
    """The overlappable compute (seconds) from which ZeRO-3's communication is all hidden."""
    return float(sum(n * collective_time(op, param_bytes, p, step_latency, seconds_per_byte, backend, messages)
                     for op, n in COLLECTIVES["ZeRO-3"].items()))


def segment_bounds(n_blocks: int, segments: int) -> list[tuple[int, int]]:
    """[start, end) of each of ``segments`` runs of consecutive blocks; the first ones one longer
    where they do not divide evenly (numpy's ``array_split``)."""
    whole("n_blocks", n_blocks), whole("segments", segments)
    if not 1 <= segments <= n_blocks:
        raise ValueError(f"cannot cut {n_blocks} blocks into {segments} segments")
    sizes = [n_blocks // segments + (s < n_blocks % segments) for s in range(segments)]
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    return [(int(a), int(a + n)) for a, n in zip(starts, sizes)]


def checkpointed_mlp_bytes(batch: int, widths: list[int], segments: int,
                           bytes_per_value: int = 4) -> dict[str, int]:
    """What an MLP of Linear+ReLU blocks and a Linear head (``widths`` = [in, hidden..., out])
    keeps for backward when its blocks are checkpointed in ``segments`` runs (``segment_bounds``).

    Without checkpointing every Linear keeps its input: in + sum(hidden) values a sample
    (chapter 2's ``mlp_activation_bytes``). Checkpointed, only each run's input and the
    head's input stay; during the backward one run at a time is recomputed, and holds its
    blocks' inputs again meanwhile (``recompute_peak``, on top of what is kept).
    """
    whole("batch", batch), whole("bytes_per_value", bytes_per_value)
    hidden = check_widths("widths", widths, 3)[1:-1]  # a block needs a hidden layer
    inputs = [widths[0]] + hidden[:-1]  # the input of each block
    runs = segment_bounds(len(hidden), segments)
    kept = sum(inputs[a] for a, _ in runs) + hidden[-1]
    peak = max(sum(inputs[a:b]) for a, b in runs)
    return {"without": batch * (widths[0] + sum(hidden)) * bytes_per_value,
            "kept": batch * kept * bytes_per_value, "recompute_peak": batch * peak * bytes_per_value}


def checkpoint_step_time(t_forward, t_backward, recomputed: float = 1.0):
    """A step with activation checkpointing: the backward first redoes the checkpointed
    ``recomputed`` fraction of the forward. For matmuls the forward is a third of a step
    (2 of 6 FLOPs per weight and sample, 1 of 3 multiply-adds), so full recompute costs about 4/3."""
    at_least("t_forward", t_forward), at_least("t_backward", t_backward), within("recomputed", recomputed, 0, 1)
    return np.asarray(t_forward, dtype=float) * (1.0 + recomputed) + np.asarray(t_backward, dtype=float)

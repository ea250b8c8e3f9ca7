"""Tensor parallelism (chapter 6.3) in closed form, and what four strategies cost one rank per step.

Megatron-LM (Shoeybi et al., 2019) splits a block's first Linear(s) by columns and its
last by rows, so a block needs one all_reduce in the forward (g, after the row-split
Linear) and one in the backward (f, the gradient of the block's input). Both carry the
block's activations: batch x seq x hidden values.

Symbols: ``n_split`` the parameters TP splits, ``n_kept`` those it keeps whole on every
rank (the row-split Linears' biases), ``dp`` the data-parallel replicas, ``tp`` the ranks
one layer is split over, ``layers`` transformer layers of two blocks each (attention, MLP).
A collective's message M is the whole tensor it reduces or gathers; what one rank sends
is ``BUS_FACTOR[kind](group) * M`` (``theory.communication``).
"""
from __future__ import annotations

import math

from .checks import at_least, one_of, whole
from .communication import BUS_FACTOR
from .memory import model_state_bytes

# What each strategy does to the model: shard its states over dp (ZeRO-3 / FSDP), split its
# layers over tp (Megatron). DDP does neither: every replica holds everything.
STRATEGIES = {"DDP": (False, False), "FSDP": (True, False), "TP": (False, True), "FSDP x TP": (True, True)}
BLOCKS_PER_LAYER = 2  # attention and MLP: one column-then-row pair each


def megatron_allreduces(blocks: int, first_input_needs_grad: bool = True) -> tuple[int, int]:
    """(forward, backward) all_reduces of ``blocks`` TP blocks in a row: one per block each way
    (a transformer layer is two blocks). The first block's backward one is the gradient of its
    input; when that input is data (no gradient wanted), autograd never asks for it. After an
    embedding layer it is there."""
    whole("blocks", blocks)
    return blocks, blocks - (0 if first_input_needs_grad else 1)


def tp_message_bytes(batch: int, seq: int, hidden: int, value_bytes: int = 4) -> int:
    """One TP all_reduce's message: the block's output (forward) or input gradient (backward)."""
    whole("batch", batch), whole("seq", seq), whole("hidden", hidden), whole("value_bytes", value_bytes)
    return batch * seq * hidden * value_bytes


def _layout(strategy: str, dp, tp) -> tuple[bool, bool]:
    """(shards over dp, splits over tp) of a strategy, its group sizes checked."""
    whole("dp", dp), whole("tp", tp)
    return STRATEGIES[one_of("strategy", strategy, STRATEGIES)]


def local_params(strategy: str, n_split: int, n_kept: int, dp: int, tp: int) -> float:
    """Parameters one rank holds: split ones 1/tp each under TP, all of them 1/dp under FSDP."""
    shard, split = _layout(strategy, dp, tp)
    at_least("n_split", n_split), at_least("n_kept", n_kept)
    n = n_split / tp + n_kept if split else n_split + n_kept
    return n / dp if shard else n


def state_bytes(strategy: str, n_split: int, n_kept: int, dp: int, tp: int, optimizer: str = "adam"
                ) -> dict[str, float]:
    """Bytes of parameters, gradients and optimizer states on one rank (fp32; Adam's scalar step
    counters left out)."""
    n = local_params(strategy, n_split, n_kept, dp, tp)
    return {k: v * n for k, v in model_state_bytes(1, optimizer).items()}


def step_collectives(strategy: str, n_split: int, n_kept: int, dp: int, tp: int, layers: int,
                     batch: int, seq: int, hidden: int, value_bytes: int = 4,
                     first_input_needs_grad: bool = False) -> dict[tuple[str, str], tuple[int, float]]:
    """{(kind, phase): (calls, summed message bytes)} of one training step on one rank.

    DDP: one all_reduce of every gradient (one bucket: these models are under DDP's first
    bucket, 1 MiB). FSDP, one unit per layer: the layer's shards all_gathered for its forward
    and again for its backward, its gradients reduce_scattered. TP: Megatron's all_reduces on
    each replica's batch / dp samples. ``batch`` is the global batch.
    """
    shard, split = _layout(strategy, dp, tp)
    at_least("n_split", n_split), at_least("n_kept", n_kept), whole("layers", layers), whole("batch", batch)
    grads = value_bytes * (n_split / tp + n_kept if split else n_split + n_kept)  # a replica's whole
    out = {}
    if strategy == "DDP":
        out[("all_reduce", "backward")] = (1, grads)
    if shard:
        for key in (("all_gather", "forward"), ("all_gather", "backward"), ("reduce_scatter", "backward")):
            out[key] = (layers, grads)
    if split:
        whole("batch (at least one sample a replica)", batch, dp)
        m = tp_message_bytes(batch // dp, seq, hidden, value_bytes)
        fwd, bwd = megatron_allreduces(BLOCKS_PER_LAYER * layers, first_input_needs_grad)
        out[("all_reduce", "forward")] = (fwd, fwd * m)
        out[("all_reduce", "backward")] = (bwd, bwd * m)
    return out


def sent_bytes(collectives: dict[tuple[str, str], tuple[int, float]], strategy: str, dp: int, tp: int
               ) -> float:
    """What one rank sends in those collectives over a ring: all_reduce over the tp group (over dp
    under DDP), all_gather and reduce_scatter over the dp group."""
    _layout(strategy, dp, tp)
    total = 0.0
    for (kind, _), (_, message) in collectives.items():
        one_of("a collective's kind", kind, BUS_FACTOR), at_least("a collective's bytes", message)
        group = dp if kind != "all_reduce" or strategy == "DDP" else tp
        total += BUS_FACTOR[kind](group) * message
    return total


def tp_ddp_break_even_tokens(n_params: float, layers: int, hidden: int, p: int) -> float:
    """Tokens per step (batch x seq) at which TP over p ranks sends as much as DDP over p ranks.

    DDP sends 2(p-1)/p x 4 n_params, whatever the batch; TP sends 2(p-1)/p x 4 hidden per token
    in each of its (4 layers - 1) all_reduces. Fewer tokens than this, and TP sends less.
    """
    at_least("n_params", n_params), whole("layers", layers), whole("hidden", hidden), whole("p", p)
    return n_params / (hidden * (2 * BLOCKS_PER_LAYER * layers - 1)) if p > 1 else math.inf

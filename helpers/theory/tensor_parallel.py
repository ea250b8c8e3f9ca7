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


# --- Sequence parallelism (chapter 8.2): TP's all-reduces cut in two, the rest split by sequence ---

def sp_collectives(blocks: int, batch: int, seq: int, hidden: int, value_bytes: int = 4,
                   keep: str = "whole") -> dict[tuple[str, str], tuple[int, int]]:
    """{(kind, phase): (calls, summed message bytes)} of ``blocks`` SP blocks, forward and backward.

    Each block all-gathers the sequence where it starts and reduce-scatters where it ends, and
    the backward does the reverse: TP's all-reduce of M = b s h values, cut into its two halves,
    so the same bytes. Keeping only the shard of the first Linears' input (``keep="shard"``,
    Megatron-LM) costs one more all-gather in the backward, to get the whole input back."""
    one_of("keep", keep, ("whole", "shard"))
    m = tp_message_bytes(batch, seq, hidden, value_bytes)
    gathers = blocks * (2 if keep == "shard" else 1)
    return {("all_gather", "forward"): (blocks, blocks * m), ("reduce_scatter", "forward"): (blocks, blocks * m),
            ("all_gather", "backward"): (gathers, gathers * m), ("reduce_scatter", "backward"): (blocks, blocks * m)}


def sp_replicated_params(vocab: int, seq: int, hidden: int, layers: int, tied: bool = True) -> int:
    """Parameters SP keeps whole on every rank, whose gradients are partial sums (each rank saw
    s/t positions) and so all-reduced once a step: the embeddings (and an untied head), the
    2 layers + 1 LayerNorms, and the two row-split Linears' biases of each layer."""
    for name, v in (("vocab", vocab), ("seq", seq), ("hidden", hidden), ("layers", layers)):
        whole(name, v)
    return vocab * hidden * (1 if tied else 2) + seq * hidden + 2 * hidden * (2 * layers + 1) + 2 * layers * hidden


def sp_plan_collectives(layers: int, batch: int, seq: int, hidden: int, value_bytes: int = 4
                        ) -> dict[tuple[str, str], tuple[int, int]]:
    """The collectives of torchtitan's SP plan on the GPT (``recipes.sequence_parallel.sp_plan``):
    the blocks' (``sp_collectives``), and at the ends: the token embedding's output reduce-scattered
    (an all-gather back), the positions' s x h likewise, the head's input all-gathered (a
    reduce-scatter back), and ``loss_parallel``'s three all-reduces of b x s values (the logits'
    max, the sum of their exponentials, the target's logit)."""
    out = dict(sp_collectives(BLOCKS_PER_LAYER * layers, batch, seq, hidden, value_bytes))
    m, pos, rows = batch * seq * hidden * value_bytes, seq * hidden * value_bytes, batch * seq * value_bytes
    for key, calls, extra in ((("reduce_scatter", "forward"), 2, m + pos), (("all_gather", "forward"), 1, m),
                              (("all_gather", "backward"), 2, m + pos), (("reduce_scatter", "backward"), 1, m)):
        out[key] = (out[key][0] + calls, out[key][1] + extra)
    out[("all_reduce", "forward")] = (3, 3 * rows)
    return out


def sp_activation_bytes(shape, micro_batch: int, tp: int, keep: str = "shard", **options) -> float:
    """One layer's saved bytes on one of ``tp`` SP ranks: ``theory.transformer.activation_bytes``
    with ``sp=True`` (Korthikanti's Eq. 4) when the first Linears keep only their shard of the
    input (Megatron-LM, ``keep="shard"``); with ``keep="whole"`` (the plain all-gather, and
    DTensor's plan) those Linears keep the gathered input, so the QKV and MLP inputs are whole, as
    under TP alone. ``options`` go to ``activation_terms`` (bytes a value, dropout, attention...)."""
    from .transformer import activation_terms
    one_of("keep", keep, ("whole", "shard"))
    terms = activation_terms(shape, micro_batch, tp=tp, sp=True, **options)
    if keep == "whole":
        tp_only = activation_terms(shape, micro_batch, tp=tp, sp=False, **options)
        terms |= {k: tp_only[k] for k in ("QKV input", "MLP input")}
    return sum(terms.values())

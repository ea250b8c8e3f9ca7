"""4D parallelism (chapter 8.4): what one rank of a dp x tp x pp job of part 8's GPT holds and sends per
step, as the sum of the formulas each parallelism already has.

The layout is torchtitan's: each pipeline stage (pp) is a run of whole blocks, the first with the
embeddings, the last with the final LayerNorm and the head; each stage's Linears and embeddings are
split over tp with sequence parallelism (Korthikanti et al. 2022: each Megatron all-reduce becomes an
all-gather before the block and a reduce-scatter after it, the same bytes); and every tp shard is
sharded over dp by FSDP2 without resharding after the forward (``theory.sharding``'s ZeRO-2
collectives: its micro-batches would gather each layer again otherwise).

Symbols: ``b`` sequences in one micro-batch, ``m`` micro-batches a step, ``s`` the sequence, ``h`` the
hidden width, ``V`` the vocabulary, ``L`` a stage's blocks. A message is the whole tensor a
collective reduces or gathers (what ``recipes.traffic.MeshTraffic`` counts); ``sent_bytes`` turns it
into what one rank sends (``theory.sharding.bytes_sent``, on the run's backend).
"""
from __future__ import annotations

from .checks import below, whole
from .pipeline import peak_in_flight
from .sharding import COLLECTIVES, bytes_sent
from .tensor_parallel import megatron_allreduces, state_bytes, tp_message_bytes
from .transformer import Shape, activation_terms, outside_layers_terms

DIMS = ("dp", "tp", "pp")
FSDP_NO_RESHARD = COLLECTIVES["ZeRO-2"]  # one all_gather, one reduce_scatter of the shard's whole
VALUE_BYTES = 4  # fp32


def stage_blocks(layers: int, pp: int) -> list[tuple[int, int]]:
    """[lo, hi) of each stage's blocks: ``layers / pp`` each, refused where they do not divide."""
    whole("layers", layers), whole("pp", pp)
    if layers % pp:
        raise ValueError(f"{layers} layers do not divide into pp = {pp} equal stages")
    n = layers // pp
    return [(s * n, (s + 1) * n) for s in range(pp)]


def stage_params(layers: int, hidden: int, vocab: int, seq: int, pp: int, stage: int) -> tuple[int, int]:
    """(parameters tp splits, parameters it keeps whole) of one stage of the untied GPT.

    A block's 12h² + 13h: q, k, v, fc and their biases (12h² + 7h of it) are split by columns and
    proj's weights by rows; the two LayerNorms (4h) and the row-split proj's biases (2h) stay whole.
    The first stage adds the token and position embeddings (V·h + s·h, split by rows), the last the
    head (V·h, by columns) and the final LayerNorm (2h, whole)."""
    whole("hidden", hidden), whole("vocab", vocab), whole("seq", seq)
    lo, hi = stage_blocks(layers, pp)[below("stage", stage, pp)]
    n, h = hi - lo, hidden
    split, kept = n * (12 * h * h + 7 * h), n * 6 * h
    if stage == 0:
        split += (vocab + seq) * h
    if stage == pp - 1:
        split, kept = split + vocab * h, kept + 2 * h
    return split, kept


def rank_state_bytes(layers: int, hidden: int, vocab: int, seq: int, dp: int, tp: int, pp: int, stage: int,
                     optimizer: str = "sgd-momentum") -> dict[str, float]:
    """Model states on one rank of ``stage``: 6.3's FSDP x TP states of the stage's parameters."""
    split, kept = stage_params(layers, hidden, vocab, seq, pp, stage)
    return state_bytes("FSDP x TP", split, kept, dp, tp, optimizer)


def step_messages(layers: int, hidden: int, vocab: int, seq: int, dp: int, tp: int, pp: int, stage: int,
                  micro_batch: int, micro_batches: int, zero: int = 2,
                  recompute: str = "none") -> dict[str, dict[str, float]]:
    """{dim: {kind: summed message bytes}} of one training step on one rank of ``stage``.

    dp: FSDP gathers the stage's tp shard once and reduce-scatters its gradients once. With ZeRO-3
    (resharding after each forward) it gathers m + 1 times: the pipeline keeps the gathered weights
    from a backward until the next forward has run (``set_reshard_after_backward(False)`` until the
    last), so every pass that follows a forward gathers again, and the step's first.
    tp: per micro-batch, sequence parallelism's all-gather and reduce-scatter in place of each of
    Megatron's all-reduces (both ways: 2 per block each way), plus the embeddings' reduce-scatters
    (forward) and all-gathers (backward), and the head's input gathered (its gradient reduce-scattered)
    and its logits gathered; once a step, an all-reduce of each LayerNorm's weight and bias gradients,
    which each rank computed on its slice of the sequence.
    pp: per micro-batch, the stage's output slice sent on (b·s/tp·h), its gradient received back.
    Full recomputation runs each block's forward again in its backward, up to the last activation the
    backward needs (torch's early stop): its 2 all-gathers and its first reduce-scatter, not the last.
    """
    if zero not in (2, 3) or recompute not in ("none", "full"):
        raise ValueError(f"zero must be 2 or 3 and recompute 'none' or 'full', got {zero!r} and {recompute!r}")
    for name, value in (("dp", dp), ("tp", tp), ("micro_batch", micro_batch), ("micro_batches", micro_batches)):
        whole(name, value)
    if seq % tp:
        raise ValueError(f"tp = {tp} must divide the sequence ({seq}) to split it")
    split, kept = stage_params(layers, hidden, vocab, seq, pp, stage)
    lo, hi = stage_blocks(layers, pp)[stage]
    first, last, m = stage == 0, stage == pp - 1, micro_batches
    shard = VALUE_BYTES * (split / tp + kept)
    gathers = {"all_gather": m + 1} if zero == 3 else {}
    out = {"dp": {k: n * shard for k, n in (FSDP_NO_RESHARD | gathers).items()} if dp > 1 else {},
           "tp": {}, "pp": {}}
    if tp > 1:
        a = tp_message_bytes(micro_batch, seq, hidden, VALUE_BYTES)  # one micro-batch's activations
        fwd, bwd = megatron_allreduces(2 * (hi - lo), first_input_needs_grad=True)
        gathers = (fwd + bwd) * a + (a + a / micro_batch if first else 0) + (a if last else 0)
        gathers += micro_batch * seq * vocab * VALUE_BYTES if last else 0
        scatters = (fwd + bwd) * a + (a + a / micro_batch if first else 0) + (a if last else 0)
        if recompute == "full":
            gathers, scatters = gathers + 2 * (hi - lo) * a, scatters + (hi - lo) * a
        layernorms = 2 * (hi - lo) + (1 if last else 0)
        out["tp"] = {"all_gather": m * gathers, "reduce_scatter": m * scatters,
                     "all_reduce": 2 * layernorms * hidden * VALUE_BYTES}
    if pp > 1:
        one = micro_batch * seq // tp * hidden * VALUE_BYTES * m
        out["pp"] = {"send": one * (2 - first - last), "recv": one * (2 - first - last)}
    return out


def sent_bytes(messages: dict[str, dict[str, float]], dp: int, tp: int, backend: str = "nccl") -> dict[str, float]:
    """What one rank sends per step on each dimension: each collective's share of its message over
    the dimension's group (``theory.sharding.bytes_sent``: rings, and gloo's reduce-scatter an
    all-reduce), and a pipeline send's own bytes."""
    groups = {"dp": dp, "tp": tp}
    return {dim: float(sum(v if kind == "send" else 0.0 if kind == "recv" else bytes_sent(kind, v, groups[dim], backend)
                           for kind, v in kinds.items()))
            for dim, kinds in messages.items()}


def in_flight(pp: int, micro_batches: int, stage: int) -> int:
    """Micro-batches whose activations a stage holds at once under 1F1B (``theory.peak_in_flight``)."""
    return peak_in_flight("1F1B", pp, micro_batches, stage)


# What torch's sequence parallelism saves whole, where Korthikanti's Megatron saves a slice and gathers
# it again in the backward: ``ColwiseParallel``'s all-gathered input, of q, k, v and of fc.
GATHERED_WHOLE = ("QKV input", "MLP input")


def layer_activation_bytes(shape: Shape, micro_batch: int, tp: int, recompute: str = "none") -> float:
    """Bytes one block keeps for backward on one rank, per micro-batch, as torch runs it here:
    ``theory.transformer.activation_terms`` with sequence parallelism, float32, no dropout, the fused
    attention kernel (no s² scores) and the LayerNorms' statistics, except that the two inputs of
    ``GATHERED_WHOLE`` are kept whole (t times their term). Under full recomputation a block keeps its
    input alone, this rank's slice of the sequence (what it rebuilds in the backward is held only then)."""
    terms = activation_terms(shape, micro_batch, tp=tp, sp=True, recompute=recompute, bytes_per_value=VALUE_BYTES,
                             dropout=False, attention="flash", norm_stats=True)
    return sum(terms.values()) + (tp - 1) * sum(terms.get(k, 0.0) for k in GATHERED_WHOLE)


def activation_bytes(layers: int, hidden: int, vocab: int, seq: int, heads: int, dp: int, tp: int, pp: int,
                     stage: int, micro_batch: int, micro_batches: int, recompute: str = "none") -> float:
    """The most bytes of activations one rank of ``stage`` keeps at once under 1F1B: its blocks' for each
    micro-batch in flight (``in_flight``). The first stage adds its token and position ids (int64).
    The last adds ``theory.transformer.outside_layers_terms``, with the head's gathered input and the
    log-softmax of the whole logits (this head gathers them: every tp rank computes the whole loss)
    t times their sliced terms, and the final LayerNorm's statistics, the targets (int64) and the
    loss's one float32 total weight."""
    whole("dp", dp)
    shape = Shape(layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab, tied=False)
    lo, hi = stage_blocks(layers, pp)[stage]
    b, s = micro_batch, seq
    one = (hi - lo) * layer_activation_bytes(shape, b, tp, recompute)
    if stage == 0:
        one += 8 * (b * s + s)
    if stage == pp - 1:
        outside = outside_layers_terms(shape, b, tp, sp=True, bytes_per_value=VALUE_BYTES, dropout=False)
        gathered = outside["head input"] + outside["cross-entropy log-probabilities"]
        one += sum(outside.values()) + (tp - 1) * gathered + VALUE_BYTES * 2 * b * s / tp + 8 * b * s + VALUE_BYTES
    return in_flight(pp, micro_batches, stage) * one

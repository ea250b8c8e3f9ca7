"""One layout priced: memory per GPU, a step's time and where it goes, and whether it fits.

The step of the busiest pipeline stage (the first holds the most layers and micro-batches, the
last the output layer; both are priced and the worse taken):

    step = m x slot + bubble + exposed pipeline sends + exposed data-parallel collectives
    slot = compute + tensor-parallel + context-parallel + expert-parallel time of one micro-batch
    bubble = (pp - 1) / virtual x slot          (1F1B; interleaved with ``virtual`` chunks)

Compute is executed FLOPs (recomputation included) at ``cluster.efficiency`` x peak, the attention
core at ``Cluster.attention``: its scores whole where they are materialized (then masked), half in a
fused kernel, which skips the blocks a causal mask hides (Dao 2023, FlashAttention-2 section 3.1.1).
Collectives are the ring models of
chapters 4.2 and 6.2 (``theory.sharding.collective_time``): tensor parallelism's 4 all-reduces a
layer and micro-batch (6 with full recomputation; sequence parallelism's reduce-scatter +
all-gather cost the same) are never hidden (Narayanan et al. 2021,
section 3.2); data parallelism's reductions hide behind the last micro-batch's backward when
``layout.overlap``; ZeRO-2 reduce-scatters and ZeRO-3 gathers every micro-batch (6.2's
collectives). Memory is ZeRO's states (6.2's ``sharded_state_bytes`` for the model's optimizer and
precision: 16 bytes a parameter in mixed precision with Adam, 8.1's ``model_states``), the layer
activations of ``Model.layer_activation_bytes`` for the micro-batches in flight (1F1B: pp - stage;
interleaved as Megatron schedules it, Korthikanti et al. 2022 section 4.2.3), the output layer's
fp32 logits, the token ids and targets, and ZeRO-3's gathered layers.
Left out, and small at these sizes: the optimizer step's time, the embedding's collectives.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..sharding import STAGES, segment_bounds, sharded_state_bytes
from ..sharding import collective_time as _collective_time
from ..checks import whole
from .cluster import Cluster
from .model import Layout, Model, _memo


def collective_time(op, nbytes, group, lat, spb, messages=1) -> float:
    """6.2's ring model of one collective (``theory.sharding.collective_time``), remembered."""
    key = ("collective", op, float(nbytes), group, lat, spb, messages)
    return _memo(key, lambda: float(_collective_time(op, nbytes, group, lat, spb, messages=messages)))

TIME_PARTS = ("compute", "bubble", "tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class Priced:
    """One layout's price. ``memory_bytes`` (per GPU, the fullest stage) and its ``memory`` by
    kind; ``step_s`` and its ``time`` by part (seconds, see ``TIME_PARTS``); ``fits``, and if not
    ``why_not``. ``hardware_flops``: executed FLOP/s per GPU (recomputation counted, as Narayanan
    et al.'s table counts it); ``mfu``: the model's FLOPs (no recomputation) per GPU over peak."""

    layout: Layout
    fits: bool
    why_not: str
    memory_bytes: float
    memory: dict
    step_s: float
    time: dict
    micro_batches: int
    tokens_per_s: float
    hardware_flops: float
    mfu: float


def batch_refused(model: Model, global_batch_tokens: int) -> str:
    """Why no layout at all can take ``global_batch_tokens`` a step ("" when some can)."""
    if global_batch_tokens % model.seq:  # (at least one token, checked: so at least one sequence)
        return f"the batch ({global_batch_tokens} tokens) is not whole sequences of {model.seq}"
    return ""


def check(model: Model, cluster: Cluster, layout: Layout, global_batch_tokens: int) -> str:
    """Why ``layout`` cannot run ``model`` on ``cluster`` at all ("" when it can)."""
    whole("global_batch_tokens", global_batch_tokens)
    ly, m = layout, model
    sequences, refused = global_batch_tokens // m.seq, batch_refused(m, global_batch_tokens)
    problems = [
        (refused, refused),
        (ly.gpus != cluster.gpus, f"dp x tp x pp x cp = {ly.gpus}, not the cluster's {cluster.gpus} GPUs"),
        (m.heads % ly.tp or m.kv_heads % ly.tp, f"tp = {ly.tp} does not divide {m.heads} heads and {m.kv_heads} KV heads"),
        (m.mlp_hidden % ly.tp, f"tp = {ly.tp} does not divide the MLP's {m.mlp_hidden}"),
        (sequences % (ly.dp * ly.micro_batch), f"{sequences} sequences do not split into {ly.dp} replicas "
                                               f"x micro-batches of {ly.micro_batch}"),
        (ly.pp * ly.virtual - 2 * ly.end_chunks > m.layers, f"{m.layers} layers cannot fill {ly.pp} stages x "
                                                             f"{ly.virtual} chunks" + " less the two ends" * ly.end_chunks),
        (ly.virtual > 1 and ly.pp == 1, "interleaving (virtual > 1) needs a pipeline (pp > 1)"),
        (ly.end_chunks and ly.pp * ly.virtual < 3, "end chunks need a chunk for the layers beside the two ends "
                                                    "(pp x virtual >= 3)"),
        (m.seq % ly.cp, f"cp = {ly.cp} does not divide the sequence ({m.seq})"),
        (m.experts % ly.ep, f"ep = {ly.ep} does not divide {m.experts} experts"),
        ((ly.dp * ly.cp) % ly.ep, f"ep = {ly.ep} does not divide the {ly.dp * ly.cp} data-parallel GPUs"),
    ]
    for bad, why in problems:
        if bad:
            return why
    mbs = sequences // (ly.dp * ly.micro_batch)
    if ly.virtual > 1 and mbs % ly.pp:
        return f"the interleaved schedule needs micro-batches ({mbs}) to be a multiple of pp ({ly.pp})"
    return ""


def _link(cluster: Cluster, stride: int, size: int) -> tuple[float, float]:
    """(seconds per ring step, seconds per byte) of a group of ``size`` GPUs ``stride`` apart
    (tp innermost, then cp, dp, pp outermost, as Megatron orders its mesh)."""
    g = cluster.gpus_per_node
    if stride * size <= g:
        return cluster.intra_latency_s, 1.0 / cluster.intra_bandwidth
    per_node = max(1, g // stride)
    return cluster.inter_latency_s, 1.0 / min(cluster.intra_bandwidth, per_node * cluster.inter_bandwidth)


def chunk_layers(model: Model, layout: Layout, rank: int) -> list[int]:
    """The layers of each chunk pipeline GPU ``rank`` holds: the layers cut into pp x virtual
    chunks (less the two ``end_chunks``, which hold none), the first ones a layer longer when they
    do not divide (``segment_bounds``); GPU r holds chunks r, r + pp, ..."""
    ends = 2 if layout.end_chunks else 0
    n = layout.pp * layout.virtual - ends
    sizes = [b - a for a, b in _memo(("bounds", model.layers, n), lambda: segment_bounds(model.layers, n))]
    return ([0] + sizes + [0] if ends else sizes)[rank::layout.pp]


def warm_up_layers(chunks: list[int], pp: int, forwards: int) -> int:
    """Layers whose activations the first ``forwards`` chunk forwards of Megatron's interleaved
    schedule leave on one GPU, ``chunks`` its chunks' layers: micro-batches pass its chunks in
    groups of pp (forward j runs chunk (j // pp) mod virtual). With equal chunks of L / (pp v)
    layers and the whole warm-up, pp v + pp - 1 forwards, that is Korthikanti et al.'s
    L (1 + (pp - 1) / (pp v)) (section 4.2.3)."""
    cycles, left = divmod(forwards, pp * len(chunks))
    full, part = divmod(left, pp)
    return cycles * pp * sum(chunks) + pp * sum(chunks[:full]) + part * chunks[full]


def _core_flops(model: Model, ly: Layout) -> float:
    """The attention core's executed forward FLOPs for one sequence: half under a fused kernel (causal)."""
    return model.core_forward_flops() / (2 if ly.flash else 1)


def _device(model, cluster, ly, rank, mbs):
    """Memory (by kind) and per-micro-batch compute seconds (forward, backward) of pipeline GPU ``rank``."""
    chunks = chunk_layers(model, ly, rank)
    layers = sum(chunks)
    first, last = rank == 0, rank == ly.pp - 1
    b, t = ly.micro_batch, ly.tp
    dense = layers * model.dense_layer_params() + (model.embedding_params() if first else 0)
    if last:
        dense += model.head_params() + (model.vocab * model.hidden if ly.pp > 1 and model.tied_embeddings else 0)
    dense /= t
    experts = layers * model.experts * model.expert_params() / (t * ly.ep)
    stage = STAGES[ly.zero]
    memory = {}
    for n, group in ((dense, ly.dp * ly.cp), (experts, ly.dp * ly.cp // ly.ep)):
        for kind, nbytes in sharded_state_bytes(n, group, stage, model.optimizer, model.state_precision).items():
            memory[kind] = memory.get(kind, 0.0) + nbytes
    if ly.zero == 3:  # the layer at work and the next one gathered, and the working layer's gradient
        layer = (model.dense_layer_params() + model.experts * model.expert_params() / ly.ep) / t
        memory["gathered layers"] = 3 * layer * model.value_bytes
    act = model.layer_activation_bytes(b, t, ly.cp, ly.sp, ly.flash, ly.recompute, ly.whole_inputs)
    if ly.pp == 1:
        in_flight = layers
    elif ly.virtual == 1:
        in_flight = min(mbs, ly.pp - rank) * layers
    else:  # Megatron's warm-up: 2 (pp - rank - 1) + (virtual - 1) pp chunk forwards, and one more
        forwards = min(mbs * ly.virtual, 2 * (ly.pp - rank - 1) + (ly.virtual - 1) * ly.pp + 1)
        in_flight = warm_up_layers(chunks, ly.pp, forwards)
    memory["activations"] = act * in_flight
    if ly.recompute == "full":  # one layer at a time holds all of its activations again
        memory["recomputed layer"] = model.layer_activation_bytes(b, t, ly.cp, ly.sp, ly.flash, "none",
                                                                  ly.whole_inputs)
    outside = model.outside_bytes(b, t, ly.cp, ly.sp, ly.whole_inputs)
    if first and ly.pp > 1:
        memory["embedding inputs"] = outside[0] * min(mbs, ly.pp)  # ids (and dropout mask) in flight
    if last:  # the output layer's backward runs right after its forward: one micro-batch
        memory["head and loss"] = outside[1] + (outside[0] if first else 0.0)
    memory["reserved"] = cluster.reserved_bytes
    rate = cluster.efficiency * cluster.peak_flops * t * ly.cp / b  # per sequence on this GPU's share
    core = _core_flops(model, ly) / (rate / cluster.efficiency * cluster.attention(ly.flash))  # its seconds
    layer = (model.layer_forward_flops() - model.core_forward_flops()) / rate + core
    again = {"none": 0.0, "selective": 0.0 if ly.flash else core, "full": layer}[ly.recompute]
    fwd = layers * layer + (model.logits_forward_flops() / rate if last else 0.0)
    bwd = 2 * fwd + layers * again
    return memory, fwd, bwd, layers, dense * model.value_bytes, experts * model.value_bytes


def price(model: Model, cluster: Cluster, layout: Layout, global_batch_tokens: int) -> Priced:
    """Price one layout, whether or not it fits; a layout that does not divide is a ValueError."""
    why = check(model, cluster, layout, global_batch_tokens)
    if why:
        raise ValueError(f"layout {layout.mesh()} (dp, tp, pp, cp, ep): {why}")
    ly, s, h, v = layout, model.seq, model.hidden, model.value_bytes
    sequences = global_batch_tokens // s
    mbs = sequences // (ly.dp * ly.micro_batch)
    # The fullest GPUs: the first (the longer chunks, the embedding, the most micro-batches in flight)
    # and the last (the head); with end chunks the second, which holds a layer more than the first.
    devices = [_device(model, cluster, ly, r, mbs) for r in sorted({0, ly.pp - 1, 1 if ly.end_chunks else 0})]
    memory = max((d[0] for d in devices), key=lambda mem: sum(mem.values()))
    layers = max(d[3] for d in devices)
    fwd, bwd = max(devices, key=lambda d: d[1] + d[2])[1:3]
    tokens = ly.micro_batch * s / ly.cp  # one micro-batch's tokens on one GPU
    full = ly.recompute == "full"
    t = dict.fromkeys(TIME_PARTS, 0.0)
    hidden = 0.0  # compute a micro-batch already spends hiding context-parallel sends
    if ly.tp > 1:
        lat, spb = _link(cluster, 1, ly.tp)
        t["tp"] = layers * (6 if full else 4) * collective_time("all_reduce", tokens * h * v, ly.tp, lat, spb)
    if ly.cp > 1:  # K and V gathered (again for the backward), their gradients scattered
        lat, spb = _link(cluster, ly.tp, ly.cp)
        kv = 2.0 * ly.micro_batch * s * model.kv_hidden * v / ly.tp
        comm = ((3 if full else 2) * collective_time("all_gather", kv, ly.cp, lat, spb)
                + collective_time("reduce_scatter", kv, ly.cp, lat, spb))
        core = 3 * _core_flops(model, ly) * ly.micro_batch / (
            ly.tp * ly.cp * cluster.attention(ly.flash) * cluster.peak_flops) if ly.cp_ring else 0.0
        t["cp"] = layers * max(0.0, comm - core)  # a ring hides its sends behind the core; all-gather none
        hidden = layers * min(comm, core)
    if model.experts > 1 and ly.ep > 1:  # dispatch and combine, forward and backward
        lat, spb = _link(cluster, ly.tp * ly.cp, ly.ep)
        sent = tokens * model.top_k * h * v / (ly.tp if ly.sp else 1) * (ly.ep - 1) / ly.ep
        t["ep"] = layers * (6 if full else 4) * ((ly.ep - 1) * lat + sent * spb)
    slot = fwd + bwd + t["tp"] + t["cp"] + t["ep"]
    for part in ("tp", "cp", "ep"):
        t[part] *= mbs
    t["compute"] = mbs * (fwd + bwd)
    if ly.pp > 1:
        t["bubble"] = (ly.pp - 1) / ly.virtual * slot
        lat, spb = _link(cluster, ly.gpus // ly.pp, ly.pp)
        hop = lat + tokens * h * v / ly.tp * spb  # scatter/gather: each of tp GPUs sends its slice
        t["pp"] = 2 * ((ly.virtual * ly.pp - 1) if ly.overlap else (mbs * ly.virtual + ly.pp - 1)) * hop
    # ZeRO hides behind what is left of the slowest stage's forward and backward (a GPU with less
    # work waits as long, its sends going on meanwhile), less what already hides context parallelism
    t["dp"] = max(_dp_time(cluster, ly, mbs, fwd - hidden / 3, bwd - 2 * hidden / 3, *d[3:]) for d in devices)
    step = sum(t.values())
    total = sum(memory.values())
    fits = total <= cluster.memory_bytes
    why_not = "" if fits else (
        f"needs {total / 1e9:.1f} GB a GPU of its {cluster.memory_bytes / 1e9:.1f} GB: "
        + ", ".join(f"{k} {b / 1e9:.1f}" for k, b in memory.items() if b))
    executed = sequences * model.training_flops(ly.recompute)
    return Priced(ly, fits, why_not, total, memory, step, t, mbs, sequences * s / step,
                  executed / (step * ly.gpus), sequences * model.training_flops("none")
                  / (step * ly.gpus * cluster.peak_flops))


def stage_memory(model: Model, cluster: Cluster, layout: Layout, global_batch_tokens: int) -> list[dict]:
    """Memory (bytes by kind) of one GPU of each pipeline stage, first to last: ``price`` keeps the
    fullest; a run that measures every stage is checked against each."""
    why = check(model, cluster, layout, global_batch_tokens)
    if why:
        raise ValueError(f"layout {layout.mesh()} (dp, tp, pp, cp, ep): {why}")
    mbs = global_batch_tokens // model.seq // (layout.dp * layout.micro_batch)
    return [_device(model, cluster, layout, r, mbs)[0] for r in range(layout.pp)]


def _dp_time(cluster, ly, mbs, fwd, bwd, layers, dense_bytes, expert_bytes) -> float:
    """Exposed seconds of ZeRO's (or DDP's) collectives over the dp x cp GPUs holding the same
    weights (experts' over dp x cp / ep). ``fwd``, ``bwd``: one micro-batch's compute seconds,
    behind which ``overlap`` hides the reductions (the last backward) and the gathers (the forward)."""
    ar = rs = ag = 0.0  # summed over the two groups, then hidden once behind the same compute
    for nbytes, group in ((dense_bytes, ly.dp * ly.cp), (expert_bytes, ly.dp * ly.cp // ly.ep)):
        if group == 1 or nbytes == 0:
            continue
        lat, spb = _link(cluster, ly.tp, group)
        msgs = max(1, layers) if ly.zero == 3 else 1
        ar, rs, ag = (old + collective_time(op, nbytes, group, lat, spb, messages=msgs)
                      for old, op in ((ar, "all_reduce"), (rs, "reduce_scatter"), (ag, "all_gather")))
    hide_f, hide_b = (fwd, bwd) if ly.overlap else (0.0, 0.0)
    if ly.zero == 0:
        return max(0.0, ar - hide_b)
    if ly.zero == 1:
        return max(0.0, rs - hide_b) + max(0.0, ag - hide_f)
    if ly.zero == 2:
        return mbs * max(0.0, rs - hide_b) + max(0.0, ag - hide_f)
    return mbs * (max(0.0, ag - hide_f) + max(0.0, ag + rs - hide_b))

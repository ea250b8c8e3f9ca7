"""Context parallelism (chapter 8.2) in closed form: which positions a rank holds, the causal
attention work each rank does, and the bytes a ring of ranks passes around.

Ring attention (Liu et al., 2023): each of ``n`` ranks holds a block of the sequence's queries,
keys and values. The keys and values travel around the ring, one hop a step, so after ``n``
steps every rank has seen every block. Under a causal mask, a query attends to no later key:
with the sequence split in ``n`` blocks in order (``naive``), the last rank computes ``n``
blocks of scores and the first one. Cutting it in ``2n`` chunks and giving rank ``r`` chunks
``r`` and ``2n-1-r`` (``zigzag``; Llama 3's context parallelism, Striped Attention's cousin)
gives every rank the same work.

Symbols: ``n`` ranks in the ring, ``s`` the sequence, ``b`` the batch, ``a`` heads of width
``d`` (``h = a d``). Work is counted in score elements (one query against one key, per batch
row and head): a block that is wholly masked is skipped, a diagonal block computed whole.
"""
from __future__ import annotations

from .checks import at_least, one_of, whole

LAYOUTS = ("naive", "zigzag")


def n_chunks(layout: str, n: int) -> int:
    """The pieces the sequence is cut into: one per rank, or two (zig-zag)."""
    one_of("layout", layout, LAYOUTS), whole("n", n)
    return n if layout == "naive" else 2 * n


def chunks(layout: str, rank: int, n: int) -> list[int]:
    """The chunks rank ``rank`` holds, in order: ``[rank]``, or ``[rank, 2n-1-rank]``."""
    n_chunks(layout, n)
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside a ring of {n}")
    return [rank] if layout == "naive" else [rank, 2 * n - 1 - rank]


def chunk_len(layout: str, seq: int, n: int) -> int:
    """Positions in one chunk; the sequence must cut evenly."""
    whole("seq", seq)
    k = n_chunks(layout, n)
    if seq % k:
        raise ValueError(f"a sequence of {seq} does not cut into {k} equal chunks ({layout}, n = {n})")
    return seq // k


def positions(layout: str, rank: int, n: int, seq: int) -> list[int]:
    """The sequence positions rank ``rank`` holds, in the order it holds them."""
    c = chunk_len(layout, seq, n)
    return [i for ch in chunks(layout, rank, n) for i in range(ch * c, (ch + 1) * c)]


def causal_work(layout: str, rank: int, n: int, seq: int) -> dict[str, int]:
    """Score elements rank ``rank`` computes in causal ring attention, per batch row and head:
    ``computed`` (every block it does not skip, diagonal blocks whole) and ``needed`` (the
    unmasked pairs alone: query position >= key position)."""
    c = chunk_len(layout, seq, n)
    mine = chunks(layout, rank, n)
    computed = sum((x + 1) * c * c for x in mine)        # chunks 0..x of keys, c x c each
    needed = sum(x * c * c + c * (c + 1) // 2 for x in mine)
    return {"computed": computed, "needed": needed}


def imbalance(layout: str, n: int, seq: int) -> float:
    """The busiest rank's computed work over the mean rank's: the time a step waits on it.
    Naive: 2n/(n+1); zig-zag: 1."""
    work = [causal_work(layout, r, n, seq)["computed"] for r in range(n)]
    return max(work) * n / sum(work)


def ring_bytes(batch: int, seq: int, heads: int, head_dim: int, n: int, value_bytes: int = 4
               ) -> dict[str, int]:
    """Bytes one rank sends in one attention layer's ring, by phase.

    Forward: its K and V blocks go round ``n - 1`` hops. Backward: K and V go round again, and
    with them the blocks' gradients dK and dV, which take one hop more to come home: 2(n-1)
    blocks of K, V and 2n of dK, dV. A block is b x (s/n) x h values."""
    for name, v in (("batch", batch), ("heads", heads), ("head_dim", head_dim), ("value_bytes", value_bytes)):
        whole(name, v)
    whole("n", n)
    if seq % n:
        raise ValueError(f"a sequence of {seq} does not split over {n} ranks")
    block = batch * (seq // n) * heads * head_dim * value_bytes
    return {"forward": 2 * (n - 1) * block, "backward": (2 * (n - 1) + 2 * n) * block if n > 1 else 0}


def ring_layer_cost(batch: int, seq: int, heads: int, head_dim: int, n: int, value_bytes: int = 4) -> dict:
    """One layer on one of ``n`` CP ranks: the key/value bytes its ring sends (forward and backward,
    ``ring_bytes``) and the attention FLOPs they can hide under. Causal attention computes half of
    the 4bs²h of QKᵀ and the scores times V, the backward twice that, a balanced (zig-zag) share on
    each rank: 6bs²h/n. The bytes grow as s, the FLOPs as s², so FLOPs a byte grow as s: at long
    sequences each block's sends take less time than the attention computed while they travel."""
    ring = ring_bytes(batch, seq, heads, head_dim, n, value_bytes)
    sent = ring["forward"] + ring["backward"]
    flops = 6 * batch * seq ** 2 * heads * head_dim / n
    return {"bytes": sent, "attention_flops": flops, "flops_per_byte": flops / sent if sent else float("inf")}


def what_each_divides(layers: int, batch: int, seq: int, hidden: int, heads: int, n: int, n_params: int,
                      value_bytes: int = 4) -> list[dict]:
    """TP, SP and CP over ``n`` ranks, side by side, for a GPT of ``layers`` layers: what each
    splits (the weights of the blocks' Linears, the activations, the sequence) and the bytes one
    rank sends per step (ring collectives: ``(n-1)/n`` of an all-gather's or a reduce-scatter's
    message, twice that for an all-reduce). CP, like data parallelism, keeps every weight whole,
    so it all-reduces their gradients; SP all-reduces those of the weights TP keeps whole, which
    this table leaves out (they are small: norms, biases, embeddings)."""
    at_least("n_params", n_params)
    whole("layers", layers), whole("hidden", hidden)
    m = batch * seq * hidden * value_bytes          # one block's activations: TP's message
    f = (n - 1) / n
    collectives = 2 * 2 * layers                     # blocks x (forward, backward)
    ring = ring_bytes(batch, seq, heads, hidden // heads, n, value_bytes)
    return [
        {"name": "TP", "splits": "the blocks' weights, the activations inside each block",
         "sends": "activations: an all-reduce per block each way",
         "bytes": collectives * 2 * f * m},
        {"name": "SP", "splits": "the blocks' weights, every activation (the rest along the sequence)",
         "sends": "activations: an all-gather and a reduce-scatter per block each way",
         "bytes": collectives * 2 * f * m},
        {"name": "CP", "splits": "every activation, along the sequence; no weight",
         "sends": "keys and values round a ring in each layer, and the weights' gradients",
         "bytes": layers * (ring["forward"] + ring["backward"]) + 2 * f * n_params * value_bytes},
    ]

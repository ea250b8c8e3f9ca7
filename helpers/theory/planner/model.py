"""What the planner is told: the model, the cluster, one layout; and a transformer layer's arithmetic.

Units are in the names: ``*_bytes`` bytes, ``*_s`` seconds, ``*_flops`` FLOP/s (a rate) where the
field says so, bandwidths in bytes/s per GPU per direction. Counts (layers, heads, GPUs) are plain.

A layer's arithmetic is chapter 8.1's GPT (``theory.transformer``) widened to what current runs use:
grouped-query attention (``kv_heads`` < ``heads``: K and V have ``kv_heads`` heads), gated MLPs
(SwiGLU: three ``hidden x mlp_hidden`` matrices instead of two) and mixture-of-experts MLPs
(``experts`` copies, each token through ``top_k`` of them). With kv_heads = heads, a plain 4h MLP and
biases, the counts are Narayanan et al. (2021)'s equations (2) and (3) and Korthikanti et al. (2022)'s
34·s·b·h + 5·a·s²·b bytes per layer, which the tests check.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import at_least, one_of, whole, within

RECOMPUTE = ("none", "selective", "full")  # Korthikanti et al. 2022: selective drops the s² core
VALUE_BYTES = 2  # bf16/fp16 activations, weights for compute, and gradients on the wire


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. ``mlp_hidden`` defaults to 4 x hidden, ``kv_heads`` to heads.

    ``experts`` > 1 makes every layer's MLP a mixture of that many experts, ``top_k`` per token.
    ``biases``: Linear biases and LayerNorm (GPT-2, Megatron's GPT); without, RMSNorm (Llama).
    ``dropout``: the 1-byte masks Korthikanti et al. count; current runs train without.
    """

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    kv_heads: int | None = None
    mlp_hidden: int | None = None
    gated: bool = False
    experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = True
    learned_positions: bool = True
    biases: bool = True
    dropout: bool = False

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq", "vocab", "experts", "top_k"):
            whole(f"Model.{name}", getattr(self, name))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.mlp_hidden is None:
            object.__setattr__(self, "mlp_hidden", 4 * self.hidden)
        whole("Model.kv_heads", self.kv_heads), whole("Model.mlp_hidden", self.mlp_hidden)
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"hidden ({self.hidden}) must split into heads ({self.heads}), and heads "
                             f"into kv_heads ({self.kv_heads}) groups, evenly")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads x head_dim."""
        return self.kv_heads * (self.hidden // self.heads)

    # --- parameters (counts) ---------------------------------------------------------------
    def attention_params(self) -> int:
        h, kv = self.hidden, self.kv_hidden
        return 2 * h * h + 2 * h * kv + (2 * h + 2 * kv if self.biases else 0)

    def expert_params(self) -> int:
        """One expert's MLP (the whole MLP when dense)."""
        h, f, mats = self.hidden, self.mlp_hidden, 3 if self.gated else 2
        return mats * h * f + ((mats - 1) * f + h if self.biases else 0)

    def dense_layer_params(self) -> int:
        """A layer's parameters outside the experts: attention, norms, the router."""
        norms = 4 * self.hidden if self.biases else 2 * self.hidden
        router = self.hidden * self.experts if self.experts > 1 else 0
        return self.attention_params() + norms + router

    def embedding_params(self) -> int:
        """Token (and learned position) embeddings; an untied output head as much again."""
        return self.vocab * self.hidden + (self.seq * self.hidden if self.learned_positions else 0)

    def head_params(self) -> int:
        """The final norm and, when untied, the output head."""
        norm = 2 * self.hidden if self.biases else self.hidden
        return norm + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        """All parameters: equation (2) of Narayanan et al. 2021 (+ the final norm) for their GPT."""
        per_layer = self.dense_layer_params() + self.experts * self.expert_params()
        return self.layers * per_layer + self.embedding_params() + self.head_params()

    # --- FLOPs (counts, per sequence, forward) ----------------------------------------------
    def layer_forward_flops(self) -> float:
        """One layer's forward FLOPs for one sequence: 2 per multiply-add of each matmul a token
        meets (its top_k experts only), and 4·s²·h for QKᵀ and the scores times V, counted whole
        as Narayanan et al. count them (a causal kernel skips about half)."""
        s, h, kv = self.seq, self.hidden, self.kv_hidden
        attn = 2 * s * (2 * h * h + 2 * h * kv)
        mlp = 2 * s * self.top_k * (3 if self.gated else 2) * h * self.mlp_hidden
        router = 2 * s * h * self.experts if self.experts > 1 else 0
        return float(attn + mlp + router + self.core_forward_flops())

    def core_forward_flops(self) -> float:
        """The attention core's forward FLOPs for one sequence (QKᵀ and scores x V): what
        selective recomputation runs again."""
        return 4.0 * self.seq ** 2 * self.hidden

    def logits_forward_flops(self) -> float:
        """The output layer's forward FLOPs for one sequence."""
        return 2.0 * self.seq * self.hidden * self.vocab

    def training_flops(self, recompute: str = "none") -> float:
        """FLOPs of one sequence's forward and backward (backward twice the forward), with the
        forward of whatever ``recompute`` runs again: with "full", equation (3) of Narayanan et al."""
        one_of("recompute", recompute, RECOMPUTE)
        again = {"none": 0.0, "selective": self.core_forward_flops(),
                 "full": self.layer_forward_flops()}[recompute]
        return self.layers * (3 * self.layer_forward_flops() + again) + 3 * self.logits_forward_flops()

    # --- activations (bytes, per layer, one micro-batch on one GPU) -------------------------
    def layer_activation_bytes(self, micro_batch: int, tp: int = 1, cp: int = 1, sp: bool = False,
                               flash: bool = True, recompute: str = "none") -> float:
        """Bytes one layer keeps for its backward, for ``micro_batch`` sequences, on one of tp x cp GPUs.

        Korthikanti et al. 2022 (section 4), widened: per s·b·h, 4v for the two norms' inputs and
        the inputs of QKV and of the MLP (1 byte more for each dropout mask); Q and the attention
        output v each, K and V v·kv_hidden/h each; the MLP 2v·f/h (3v gated) for each of top_k
        experts, plus the routed copy of the input (v·top_k) under MoE. The attention core keeps
        a·s² scores (v, and 1 + v for dropout's mask and output) unless the attention is flash
        (one fp32 log-sum-exp per head and token) or recomputed (``selective``). Tensor
        parallelism splits all but the first group, unless sequence parallelism (``sp``) splits
        that too; context parallelism splits the sequence. ``full`` keeps only the layer's input.
        """
        one_of("recompute", recompute, RECOMPUTE)
        for name, value in (("micro_batch", micro_batch), ("tp", tp), ("cp", cp)):
            whole(name, value)
        v, h, kv, f, k = VALUE_BYTES, self.hidden, self.kv_hidden, self.mlp_hidden, self.top_k
        tokens = micro_batch * self.seq / cp
        if recompute == "full":
            return tokens * h * v / (tp if sp else 1)
        drop = 1 if self.dropout else 0
        replicated = tokens * h * (4 * v + 2 * drop)
        mlp = tokens * k * f * v * (3 if self.gated else 2) + (tokens * h * v * k if self.experts > 1 else 0)
        split = tokens * (2 * h * v + 2 * kv * v) + mlp
        if recompute == "selective":
            core = 0.0
        elif flash:
            core = tokens * self.heads * 4.0
        else:  # each GPU's queries against every key of the sequence
            core = self.heads * tokens * self.seq * (v + drop * (1 + v))
        return (replicated / (tp if sp else 1)) + (split + core) / tp


@dataclass(frozen=True)
class Cluster:
    """GPUs and their links. Bandwidths: bytes/s per GPU per direction; latencies: seconds per
    step of a ring; ``peak_flops``: FLOP/s of one GPU at the precision trained in.

    ``efficiency`` is the fraction of ``peak_flops`` the GPUs' kernels run at while computing,
    one number for every layout (the planner's MFU on executed FLOPs). ``reserved_bytes`` per GPU
    are out of reach of the model: the CUDA context, communication buffers, fragmentation.
    A group of GPUs inside one node talks at ``intra_*``; a ring over nodes with k of its
    members in each node crosses each node's boundary on k NICs at once (one ring per NIC, as
    NCCL does), so its bandwidth is min(intra, k x inter) at ``inter_latency_s``.
    """

    gpus: int
    gpus_per_node: int
    memory_bytes: float
    peak_flops: float
    intra_bandwidth: float
    inter_bandwidth: float
    intra_latency_s: float
    inter_latency_s: float
    efficiency: float = 0.5
    reserved_bytes: float = 0.0

    def __post_init__(self):
        whole("Cluster.gpus", self.gpus), whole("Cluster.gpus_per_node", self.gpus_per_node)
        for name in ("memory_bytes", "peak_flops", "intra_bandwidth", "inter_bandwidth"):
            at_least(f"Cluster.{name}", getattr(self, name), 1e-300)
        for name in ("intra_latency_s", "inter_latency_s", "reserved_bytes"):
            at_least(f"Cluster.{name}", getattr(self, name))
        within("Cluster.efficiency", self.efficiency, 1e-6, 1.0)
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"{self.gpus} GPUs do not fill nodes of {self.gpus_per_node}")


def machine_cluster(devices: int, memory_bytes: float, peak_flops: float, step_latency_s: float,
                    seconds_per_byte: float, efficiency: float = 1.0) -> Cluster:
    """One machine as a cluster: ``devices`` ranks (a CPU's cores split between gloo ranks) on one
    node, every link the ring that chapter 4.2 fitted (``theory.ring_from_fit``: seconds per ring
    step, seconds per byte). ``peak_flops``: one rank's measured FLOP/s, hence efficiency 1."""
    at_least("seconds_per_byte", seconds_per_byte, 1e-300)
    bandwidth = 1.0 / seconds_per_byte
    return Cluster(devices, devices, memory_bytes, peak_flops, bandwidth, bandwidth,
                   step_latency_s, step_latency_s, efficiency)


@dataclass(frozen=True)
class Layout:
    """One way to spread the run: dp x tp x pp x cp GPUs (ep divides dp x cp: experts over ep of them).

    ``zero``: 0 (DDP), 1, 2 or 3, ZeRO's stage over the data-parallel group. ``recompute``: one of
    ``RECOMPUTE``. ``micro_batch``: sequences per micro-batch (a replica runs global / (dp x
    micro_batch) of them a step). ``virtual``: model chunks per pipeline GPU (interleaved 1F1B when
    > 1). ``sp``: sequence parallelism beside tp. ``flash``: attention that keeps no s² scores.
    ``overlap``: data-parallel reductions and pipeline sends run during compute (current Megatron,
    torchtitan); False sends them after (Megatron-LM in 2021). Tensor-parallel collectives are
    always in the critical path.
    """

    dp: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    recompute: str = "none"
    micro_batch: int = 1
    virtual: int = 1
    sp: bool = False
    flash: bool = True
    overlap: bool = True

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "micro_batch", "virtual"):
            whole(f"Layout.{name}", getattr(self, name))
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"Layout.zero must be 0, 1, 2 or 3 (ZeRO's stage), got {self.zero!r}")
        one_of("Layout.recompute", self.recompute, RECOMPUTE)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def mesh(self) -> tuple[int, int, int, int, int]:
        """(dp, tp, pp, cp, ep): what the planner ranks; the rest are settings of a mesh."""
        return (self.dp, self.tp, self.pp, self.cp, self.ep)

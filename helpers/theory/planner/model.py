"""What the planner is told: the model and one layout (the cluster: ``cluster``); and a transformer layer's arithmetic.

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

from .. import transformer as tf
from ..checks import one_of, whole

RECOMPUTE = tf.RECOMPUTE  # Korthikanti et al. 2022: selective drops the s² core
VALUE_BYTES = 2  # Model.value_bytes' default: bf16/fp16 activations, weights for compute, gradients on the wire
_MEMO: dict = {}  # (model, what, arguments) -> its value: a plan prices thousands of layouts of one model


def _memo(key, compute):
    """``compute()``, once per key: the formulas check their inputs, which costs more than the arithmetic."""
    if key not in _MEMO:
        if len(_MEMO) > 100_000:
            _MEMO.clear()
        _MEMO[key] = compute()
    return _MEMO[key]


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. ``mlp_hidden`` defaults to 4 x hidden, ``kv_heads`` to heads.

    ``experts`` > 1 makes every layer's MLP a mixture of that many experts, ``top_k`` per token.
    ``biases``: Linear biases and LayerNorm (GPT-2, Megatron's GPT); without, RMSNorm (Llama).
    ``dropout``: the 1-byte masks Korthikanti et al. count; current runs train without.
    How it is trained: ``value_bytes`` a value of activations, of weights as computed with and on the
    wire (2: bf16 mixed precision; 4: float32); ``optimizer`` ("adam", "sgd-momentum", "sgd") and
    ``mixed`` (16-bit weights and gradients beside a float32 master copy, else float32 throughout)
    give the states' bytes (6.2's ``sharded_state_bytes``); ``norm_stats``: the norms' saved means
    and 1/stds, which torch keeps on a CPU (chapter 8.1).
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
    value_bytes: int = VALUE_BYTES
    optimizer: str = "adam"
    mixed: bool = True
    norm_stats: bool = False

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
        if self.value_bytes not in (2, 4) or isinstance(self.value_bytes, bool):
            raise ValueError(f"Model.value_bytes must be 2 (16-bit) or 4 (float32), got {self.value_bytes!r}")
        one_of("Model.optimizer", self.optimizer, ("adam", "sgd-momentum", "sgd"))
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")

    @property
    def state_precision(self) -> str:
        """``theory.memory``'s precision of the states: a float32 master copy beside 16-bit weights and
        gradients when ``mixed``, else float32 throughout."""
        return "master-weights" if self.mixed else "fp32"

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads x head_dim."""
        return self.kv_heads * (self.hidden // self.heads)

    def shape(self, per_token: bool = False, seq: int | None = None) -> tf.Shape:
        """Chapter 8.1's ``Shape`` of this model. ``per_token``: an MoE layer's top_k experts as one
        MLP top_k times as wide, which is what a token meets (its FLOPs and activations)."""
        f = self.mlp_hidden * (self.top_k if per_token else 1)
        return tf.Shape(self.layers, self.hidden, self.heads, seq or self.seq, self.vocab,
                        self.tied_embeddings, self.kv_heads, f, self.gated)

    # --- parameters (counts): 8.1's ``parameters``, widened ---------------------------------
    def _parts(self) -> dict:
        return _memo((self, "parameters"), self._count)

    def _count(self) -> dict:
        p = dict(tf.parameters(self.shape()))
        h, l, f, mats = self.hidden, self.layers, self.mlp_hidden, 3 if self.gated else 2
        if not self.biases:  # no Linear biases; RMSNorm (one vector) for LayerNorm (two)
            p["attention"] -= l * (2 * h + 2 * self.kv_hidden)
            p["MLP"] -= l * ((mats - 1) * f + h)
            p["LayerNorms"], p["final LayerNorm"] = l * 2 * h, h
        if not self.learned_positions:
            p["embeddings"] -= self.seq * h
        if self.experts > 1:
            p["MLP"] *= self.experts
            p["router"] = l * h * self.experts
        return p

    def expert_params(self) -> int:
        """One expert's MLP (the whole MLP when dense)."""
        return self._parts()["MLP"] // (self.layers * self.experts)

    def dense_layer_params(self) -> int:
        """A layer's parameters outside the experts: attention, norms, the router."""
        p = self._parts()
        return (p["attention"] + p["LayerNorms"] + p.get("router", 0)) // self.layers

    def embedding_params(self) -> int:
        """Token (and learned position) embeddings."""
        return self._parts()["embeddings"]

    def head_params(self) -> int:
        """The final norm and, when untied, the output head."""
        p = self._parts()
        return p["final LayerNorm"] + p.get("head", 0)

    def params(self) -> int:
        """All parameters: equation (2) of Narayanan et al. 2021 (+ the final norm) for their GPT."""
        return sum(self._parts().values())

    # --- FLOPs (per sequence): 8.1's ``flops_terms``, plus the router --------------------------
    def logits_forward_flops(self) -> float:
        """The output layer's forward FLOPs for one sequence."""
        return 2.0 * self.seq * self.hidden * self.vocab

    def core_forward_flops(self) -> float:
        """The attention core's forward (QKᵀ and scores x V) for one sequence: what selective
        recomputation runs again."""
        return _memo((self, "core"), lambda: tf.flops_terms(self.shape(), 1, "selective")["recompute"] / self.layers)

    def layer_forward_flops(self) -> float:
        """One layer's forward FLOPs for one sequence (its top_k experts, and the router)."""
        def count():
            forward = tf.flops_terms(self.shape(per_token=True), 1)["forward"] - self.logits_forward_flops()
            return forward / self.layers + (2.0 * self.seq * self.hidden * self.experts if self.experts > 1 else 0.0)
        return _memo((self, "layer"), count)

    def training_flops(self, recompute: str = "none", causal: bool = False) -> float:
        """FLOPs of one sequence's forward and backward (backward twice the forward), with the
        forward of whatever ``recompute`` runs again: with "full", equation (3) of Narayanan et al.
        The attention core is counted whole (every query against every key), as equation (3) and
        PaLM's MFU count it; ``causal``: at half, the scores a causal kernel computes."""
        one_of("recompute", recompute, RECOMPUTE)
        again = {"none": 0.0, "selective": self.core_forward_flops(), "full": self.layer_forward_flops()}[recompute]
        total = self.layers * (3 * self.layer_forward_flops() + again) + 3 * self.logits_forward_flops()
        if causal:
            total -= self.layers * (3 + (recompute != "none")) * self.core_forward_flops() / 2
        return total

    # --- activations (bytes, one layer, one micro-batch, one GPU): 8.1's Korthikanti, widened ---
    def layer_activation_bytes(self, micro_batch: int, tp: int = 1, cp: int = 1, sp: bool = False,
                               flash: bool = True, recompute: str = "none", whole_inputs: bool = False) -> float:
        """Bytes one layer keeps for its backward, ``micro_batch`` sequences, on one of tp x cp GPUs.

        8.1's ``activation_terms`` (Korthikanti et al. 2022, section 4) for the standard layer of
        this width, on the s / cp tokens one context-parallel GPU holds, then widened to what it
        does not count: K and V at kv_hidden wide (grouped-query attention); the MLP's kept inputs
        f wide (three of them gated, top_k experts' worth under MoE, beside the routed copy of the
        layer's input); under context parallelism the scores of a GPU's queries against every key;
        ``whole_inputs`` (``Layout``): the gathered QKV and MLP inputs kept whole, t times the slice.
        """
        key = (self, "activations", micro_batch, tp, cp, sp, flash, recompute, whole_inputs)
        return _memo(key, lambda: self._activations(micro_batch, tp, cp, sp, flash, recompute, whole_inputs))

    def _activations(self, micro_batch, tp, cp, sp, flash, recompute, whole_inputs) -> float:
        for name, value in (("micro_batch", micro_batch), ("cp", cp)):
            whole(name, value)
        one_of("recompute", recompute, RECOMPUTE)
        v, h, t = self.value_bytes, self.hidden, tp
        std = tf.Shape(self.layers, h, self.heads, self.seq // cp, self.vocab)
        terms = tf.activation_terms(std, micro_batch, tp, sp, recompute, v, self.dropout,
                                    "flash" if flash else "materialized", self.norm_stats)
        if recompute == "full":
            return sum(terms.values())
        sb = self.seq // cp * micro_batch
        for k in ("softmax output", "softmax dropout mask", "attention dropout output"):
            if k in terms:
                terms[k] *= cp
        terms["Q and K"] = v * sb * (h + self.kv_hidden) / t
        terms["V"] = v * sb * self.kv_hidden / t
        wide = v * sb * self.top_k * self.mlp_hidden / t
        terms["GeLU input"], terms["GeLU output"] = wide, wide
        if self.gated:
            terms["gate output"] = wide
        if self.experts > 1:
            terms["routed input"] = v * sb * h * self.top_k / (t if sp else 1)
        if whole_inputs and sp:
            terms["QKV input"], terms["MLP input"] = t * terms["QKV input"], t * terms["MLP input"]
        return sum(terms.values())

    def outside_bytes(self, micro_batch: int, tp: int = 1, cp: int = 1, sp: bool = False,
                      whole_inputs: bool = False) -> tuple[float, float]:
        """(first stage's, last stage's) activations outside the layers: 8.1's ``outside_layers_terms``,
        the embedding's dropout mask on the first, the head's inputs and the loss's fp32 on the last
        (both whole, t times, with ``whole_inputs``), the final norm's statistics, and the int64 token
        ids (and learned positions' ids) on the first, targets on the last."""
        def count():
            std = tf.Shape(self.layers, self.hidden, self.heads, self.seq // cp, self.vocab)
            terms = tf.outside_layers_terms(std, micro_batch, tp, sp, self.value_bytes, self.dropout)
            tokens = micro_batch * self.seq / cp
            ids = tokens + (self.seq / cp if self.learned_positions else 0)
            first = terms.pop("embedding dropout mask", 0.0) + 8 * ids
            terms["targets"] = 8 * tokens
            if whole_inputs and sp:
                for k in ("head input", "cross-entropy log-probabilities"):
                    terms[k] *= tp
            if self.norm_stats:
                terms["final norm statistics"] = 2 * self.value_bytes * tokens / (tp if sp else 1)
            return first, sum(terms.values())
        return _memo((self, "outside", micro_batch, tp, cp, sp, whole_inputs), count)


@dataclass(frozen=True)
class Layout:
    """One way to spread the run: dp x tp x pp x cp GPUs (ep divides dp x cp: experts over ep of them).

    ``zero``: 0 (DDP), 1, 2 or 3, ZeRO's stage over the data-parallel group. ``recompute``: one of
    ``RECOMPUTE``. ``micro_batch``: sequences per micro-batch (a replica runs global / (dp x
    micro_batch) of them a step). ``virtual``: model chunks per pipeline GPU (interleaved 1F1B when
    > 1). ``sp``: sequence parallelism beside tp. ``flash``: attention that keeps no s² scores.
    ``overlap``: data-parallel reductions and pipeline sends run during compute (current Megatron,
    torchtitan); False sends them after (Megatron-LM in 2021). Tensor-parallel collectives block their
    layer, unhidden: Megatron-Core's tp-comm-overlap and torch's async TP (torchtitan) hide much of
    them, so there the planner overprices tp by up to their time. ``whole_inputs``: SP as torch's
    DTensor plans of 8.4 run it, each all-gathered block input and the head's logits kept whole;
    False: Megatron's slices (and a loss computed on sharded logits). ``end_chunks``: the embedding
    and the output layer each a pipeline chunk with no transformer layer, the first GPU's first and
    the last GPU's last, as Llama 3 ran it to even the stages' memory (Dubey et al. 2024, 3.3.2).
    ``cp_ring``: context parallelism as ring attention, K and V passed around the ring while the
    attention core computes (Liu et al. 2023), so their sends hide behind it; False: all-gathered
    before the core and their gradients reduce-scattered after, on the critical path, as Llama 3 ran
    it (Dubey et al. 2024, 3.3.2).
    """

    # Deliberately the shape of Model's field list (a record of plain values with defaults), not a copy
    # of it: the two describe different things and change apart.
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
    whole_inputs: bool = False
    end_chunks: bool = False
    cp_ring: bool = True

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "micro_batch", "virtual"):
            value = getattr(self, name)  # checked by hand: a plan builds thousands of layouts
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Layout.{name} must be a whole number >= 1, got {value!r}")
        if type(self.zero) is not int or self.zero not in (0, 1, 2, 3):  # True == 1.0 == 1: neither is a stage
            raise ValueError(f"Layout.zero must be 0, 1, 2 or 3 (ZeRO's stage), got {self.zero!r}")
        one_of("Layout.recompute", self.recompute, RECOMPUTE)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def mesh(self) -> tuple[int, int, int, int, int]:
        """(dp, tp, pp, cp, ep): what the planner ranks; the rest are settings of a mesh."""
        return (self.dp, self.tp, self.pp, self.cp, self.ep)

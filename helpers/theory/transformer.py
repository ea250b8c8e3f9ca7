"""The transformer's bill (chapter 8.1): parameters, FLOPs, activation memory, model states, MFU, days.

A GPT as helpers/gpt.py builds it (``Shape``): pre-LayerNorm blocks, learned positions, a 4h GELU
MLP, biases everywhere but the head, the head tied to the token embedding unless ``tied=False``.
Symbols as in the papers: l layers, h hidden, a heads, s seq, V vocab, b (B) sequences in a
micro-batch, t tensor-parallel ranks, v bytes a value. Sources: Narayanan et al. 2021 (Eqs. 2-4), Kaplan
et al. 2020 (6N), PaLM's Appendix B, Korthikanti et al. 2022 (activations, Section 4, Table 2), the
Ultra-Scale Playbook (16 or 20 bytes of states a parameter, as 6.2's ``sharded_state_bytes``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .checks import at_least, one_of, positive, whole
from .sharding import SHARDED, STAGES, sharded_state_bytes
from .utilization import PALM_540B, mfu, training_days  # noqa: F401  (8.1 reads them here, beside the counts)

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("materialized", "flash")


@dataclass(frozen=True)
class Shape:
    """One GPT's sizes. ``kv_heads`` (grouped-query attention, default ``heads``), ``mlp_hidden``
    (default 4 hidden) and ``gated`` (a SwiGLU-style MLP: three matrices) are priced by the
    parameter and FLOP counts; ``activation_terms`` refuses them (Korthikanti counts neither)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    tied: bool = True
    kv_heads: int | None = None
    mlp_hidden: int | None = None
    gated: bool = False

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq", "vocab"):
            whole(f"Shape.{name}", getattr(self, name))
        if self.hidden % self.heads:
            raise ValueError(f"Shape.hidden ({self.hidden}) must divide into heads ({self.heads}) evenly")
        if self.kv_heads is not None:
            whole("Shape.kv_heads", self.kv_heads)
            if self.heads % self.kv_heads:
                raise ValueError(f"Shape.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.mlp_hidden is not None:
            whole("Shape.mlp_hidden", self.mlp_hidden)
        if not isinstance(self.tied, bool) or not isinstance(self.gated, bool):
            raise ValueError(f"Shape.tied and gated must be True or False, got {self.tied!r}, {self.gated!r}")

    @classmethod
    def of(cls, config) -> "Shape":
        """The shape of anything with helpers.gpt.GPTConfig's fields (layers, hidden, heads, seq, vocab, tied)."""
        return cls(config.layers, config.hidden, config.heads, config.seq, config.vocab, config.tied)

    @property
    def kv(self) -> int:  # key/value heads: ``heads`` unless grouped-query attention
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def ffn(self) -> int:  # the MLP's inner width: 4 hidden unless set
        return 4 * self.hidden if self.mlp_hidden is None else self.mlp_hidden

    @property
    def standard(self) -> bool:
        """The shape Narayanan's and Korthikanti's closed forms assume: a = kv heads, 4h MLP, no gate."""
        return self.kv == self.heads and self.ffn == 4 * self.hidden and not self.gated


def _layer_weights(shape: Shape) -> tuple[int, int, int, int]:
    """(attention weights, attention biases, MLP weights, MLP biases) of one layer."""
    h, kvd, f = shape.hidden, shape.kv * (shape.hidden // shape.heads), shape.ffn
    mats = 3 if shape.gated else 2
    return 2 * h * h + 2 * h * kvd, 2 * h + 2 * kvd, mats * h * f, (mats - 1) * f + h


# --- Parameters -------------------------------------------------------------------------------

def parameters(shape: Shape) -> dict[str, int]:
    """Parameters by kind: per layer attention 4h² + 4h (wq, wk, wv, proj with biases), MLP
    8h² + 5h (h→4h→h with biases), two LayerNorms 4h; then the token and position embeddings
    V·h + s·h, the final LayerNorm 2h and, untied, the head's own V·h (it has no bias)."""
    aw, ab, mw, mb = _layer_weights(shape)
    l, h = shape.layers, shape.hidden
    out = {"attention": l * (aw + ab), "MLP": l * (mw + mb), "LayerNorms": l * 4 * h,
           "embeddings": (shape.vocab + shape.seq) * h, "final LayerNorm": 2 * h}
    if not shape.tied:
        out["head"] = shape.vocab * h
    return out


def parameter_count(shape: Shape) -> int:
    """All of them (chapter 2's ``memory.transformer_params`` for a tied standard shape)."""
    return sum(parameters(shape).values())


def narayanan_parameters(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021, Eq. 2: P = 12 l h² (1 + 13 / (12 h) + (V + s) / (12 l h)).
    A tied GPT's ``parameter_count`` is this plus 2h: the paper leaves out the final LayerNorm."""
    for name, value in (("layers", layers), ("hidden", hidden), ("vocab", vocab), ("seq", seq)):
        whole(name, value)
    l, h = layers, hidden  # multiplied out, so that whole numbers stay exact
    return float(12 * l * h**2 + 13 * l * h + (vocab + seq) * h)


def parameters_per_rank(shape: Shape, tp: int = 1) -> float:
    """Parameters one of ``tp`` tensor-parallel ranks holds, Megatron's way: the column-split
    Linears (wq, wk, wv, fc) with their biases and the row-split ones (proj) without, 1/t each; the
    token embedding (and an untied head) split over the vocabulary; positions, LayerNorms and the
    row-split Linears' biases whole on every rank."""
    _tp(shape, tp)
    aw, ab, mw, mb = _layer_weights(shape)
    h = shape.hidden
    split = shape.layers * (aw + ab - h + mw + mb - h) + shape.vocab * h * (1 if shape.tied else 2)
    kept = shape.layers * (2 * h + 4 * h) + shape.seq * h + 2 * h
    return split / tp + kept


# --- FLOPs --------------------------------------------------------------------------------------

def _recompute(recompute) -> str:
    if isinstance(recompute, bool):
        return "full" if recompute else "none"
    return one_of("recompute", recompute, RECOMPUTE)


def flops_terms(shape: Shape, batch: int, recompute="none", attention_flops: bool = True) -> dict[str, float]:
    """Matmul FLOPs of one training step on ``batch`` sequences of ``seq`` tokens, by pass.

    2 FLOPs per multiply-add. Forward per layer: the Linears 2·b·s·(weights) = 24 b s h², and
    attention's QKᵀ and AV 4 b s² h; the head 2 b s h V. The backward is twice the forward (a
    gradient for the input and one for the weight). Full recomputation adds one more forward of
    the layers (not the head); selective adds attention's 4 b s² h per layer (Korthikanti Sec. 5).

    Not counted: LayerNorms, GELU, softmax, the loss, the optimizer (O(s·h), not O(s·h²)). The s²
    terms are the full square: a causal mask would halve them, but neither these formulas nor
    torch's FlopCounterMode credit it (its sdpa formulas ignore ``is_causal``). FlopCounterMode has
    no formula for ``_scaled_dot_product_flash_attention_for_cpu`` (torch 2.14), the kernel SDPA runs
    on a CPU without dropout: there it counts attention as 0, and ``attention_flops=False`` is its count.
    """
    whole("batch", batch)
    if not isinstance(attention_flops, bool):
        raise ValueError(f"attention_flops must be True or False, got {attention_flops!r}")
    r = _recompute(recompute)
    aw, _, mw, _ = _layer_weights(shape)
    b, s, h, l = batch, shape.seq, shape.hidden, shape.layers
    linears, attention = 2 * b * s * (aw + mw) * l, 4 * b * s * s * h * l * attention_flops
    head = 2 * b * s * h * shape.vocab
    forward = linears + attention + head
    extra = {"none": 0, "selective": attention, "full": linears + attention}[r]
    return {"forward": float(forward), "backward": float(2 * forward), "recompute": float(extra)}


def flops_per_step(shape: Shape, batch: int, recompute="none", attention_flops: bool = True) -> float:
    return sum(flops_terms(shape, batch, recompute, attention_flops).values())


def flops_per_token(shape: Shape, recompute="none", attention_flops: bool = True) -> float:
    """One step's FLOPs over its tokens: 6·(Linear weights) + 12 s h per layer + 6 h V."""
    return flops_per_step(shape, 1, recompute, attention_flops) / shape.seq


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, Eq. 3: F = 96 B s l h² (1 + s / (6h) + V / (16 l h)) FLOPs per
    iteration of B sequences, with full activation recomputation (4 forwards of the layers, 3 of
    the head). ``flops_per_step(shape, B, recompute="full")`` for a standard shape."""
    for name, value in (("batch", batch), ("seq", seq), ("layers", layers), ("hidden", hidden), ("vocab", vocab)):
        whole(name, value)
    h, l = hidden, layers
    return 96 * batch * seq * l * h**2 * (1 + seq / (6 * h) + vocab / (16 * l * h))


def six_n_flops_per_token(n_params: float) -> float:
    """Kaplan et al. 2020: training costs about 6N FLOPs a token (2N forward, 4N backward)."""
    return 6.0 * at_least("n_params", n_params)


def kaplan_flops_per_token(n_params: float, layers: int, seq: int, hidden: int) -> float:
    """Kaplan et al. 2020, Table 1, x 3 (forward and backward): 6N + 6 l s h, attention's a causal half."""
    whole("layers", layers), whole("seq", seq), whole("hidden", hidden)
    return six_n_flops_per_token(n_params) + 6.0 * layers * seq * hidden


def palm_flops_per_token(n_params: float, layers: int, heads: int, head_dim: int, seq: int) -> float:
    """PaLM's model FLOPs a token (Chowdhery et al. 2022, Appendix B): 6N + 12 L H Q T, attention over
    the whole T x T square, without Kaplan's causal half; H x Q, the attention's width, is not PaLM's d."""
    whole("layers", layers), whole("heads", heads), whole("head_dim", head_dim), whole("seq", seq)
    return six_n_flops_per_token(n_params) + 12.0 * layers * heads * head_dim * seq


# --- Utilization ------------------------------------------------------------------------------

def hfu(model_flops_per_s, peak_flops_per_s, shape: Shape, recompute="full"):
    """Hardware FLOPs utilization: what the hardware ran, recomputation included, over its peak.
    ``model_flops_per_s`` counts the model's FLOPs only (as ``mfu``); the ratio of the step's FLOPs
    with and without recomputation converts it (the batch cancels)."""
    ratio = flops_per_step(shape, 1, recompute) / flops_per_step(shape, 1)
    return mfu(model_flops_per_s, peak_flops_per_s) * ratio


# --- Model states --------------------------------------------------------------------------------

def model_states(n_params: float, stage: str = "DDP", dp: int = 1, mixed: bool = True,
                 fp32_grad_accum: bool = False, n_tensors: int = 0) -> dict[str, float]:
    """Bytes of model states on one of ``dp`` data-parallel ranks with Adam, chapter 6.2's
    ``sharded_state_bytes``. Mixed precision (``master-weights``): 16-bit parameters 2, 16-bit
    gradients 2, optimizer 12 (fp32 master weights 4, momentum 4, variance 4): the Ultra-Scale
    Playbook's 16 bytes a parameter. ``fp32_grad_accum`` adds a float32 gradient buffer, 4 more
    (the Playbook's 20), sharded with the gradients from ZeRO-2 on. ``mixed=False`` is float32
    training: 4 + 4 + 8, also 16."""
    out = sharded_state_bytes(n_params, dp, stage, "adam", "master-weights" if mixed else "fp32", n_tensors)
    if fp32_grad_accum:
        out["fp32 gradients"] = 4.0 * n_params / (dp if "gradients" in SHARDED[stage] else 1)
    return out


# --- Activations (Korthikanti et al. 2022) ----------------------------------------------------------

def _tp(shape: Shape, tp: int) -> None:
    whole("tp", tp)
    if shape.heads % tp or shape.hidden % tp:
        raise ValueError(f"tp ({tp}) must divide the heads ({shape.heads}) and hidden ({shape.hidden})")


def activation_terms(shape: Shape, micro_batch: int, tp: int = 1, sp: bool = False, recompute="none",
                     bytes_per_value: int = 2, dropout: bool = True, attention: str = "materialized",
                     norm_stats: bool = False, mask_bytes: int = 1) -> dict[str, float]:
    """Bytes one layer keeps for its backward on one of ``tp`` ranks, by what is kept.

    Korthikanti et al. 2022, Section 4.1, v bytes a value, dropout masks 1 byte a value:
    LayerNorm inputs 2v·sbh, QKV input v·sbh, Q and K 2v·sbh, V v·sbh, softmax output v·as²b, its
    dropout mask as²b, the dropout's output v·as²b, out-proj input v·sbh and its dropout mask sbh,
    MLP input v·sbh, GeLU input 4v·sbh, GeLU output 4v·sbh, MLP dropout mask sbh. At v = 2:
    sbh(34 + 5as/h) (Eq. 1). Tensor parallelism divides what lies between the split Linears by t
    (Eq. 2: sbh(10 + 24/t + 5as/(ht))); sequence parallelism the rest too (Eq. 4). Selective
    recomputation drops the s² terms (Eq. 6: sbh·34/t with SP); full keeps the layer input, v·sbh
    (Table 2: 2sbh), split by t under SP.

    ``attention="flash"``: no s² tensor. torch's CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``)
    saves q, k, v, its output (laid out (b, s, a, d): the out-proj input is a view of it) and a float32
    logsumexp, a·s·b values; a flash dropout keeps an RNG state, not a mask (on a CPU, dropout > 0
    takes the math path, which materializes the scores). ``dropout=False`` drops the masks and the
    dropout's output; ``norm_stats`` adds the LayerNorms' means and 1/stds (4·sb values, v bytes on a
    CPU). ``mask_bytes``: a mask's bytes a value; 1 as on CUDA (bool), v on a CPU, whose dropout keeps
    its scaled noise in the input's dtype. (On a CPU in bfloat16 the math path upcasts q, k, v and
    the scores to float32: not modelled.)
    """
    if not shape.standard:
        raise ValueError("activation_terms counts a standard GPT layer (kv_heads = heads, a 4h MLP, no gate); "
                         f"got kv_heads={shape.kv_heads}, mlp_hidden={shape.mlp_hidden}, gated={shape.gated}")
    whole("micro_batch", micro_batch), _tp(shape, tp), whole("bytes_per_value", bytes_per_value)
    whole("mask_bytes", mask_bytes)
    r, _ = _recompute(recompute), one_of("attention", attention, ATTENTION)
    if not all(isinstance(x, bool) for x in (sp, dropout, norm_stats)):
        raise ValueError(f"sp, dropout and norm_stats must be True or False, got {sp!r}, {dropout!r}, {norm_stats!r}")
    v, t = bytes_per_value, tp
    sbh, ass = shape.seq * micro_batch * shape.hidden, shape.heads * shape.seq**2 * micro_batch
    outside = t if sp else 1  # what tensor parallelism alone leaves whole on every rank
    if r == "full":
        return {"layer input": v * sbh / outside}
    terms = {"LayerNorm inputs": 2 * v * sbh / outside, "QKV input": v * sbh / outside,
             "Q and K": 2 * v * sbh / t, "V": v * sbh / t}
    if attention == "materialized" and r == "none":
        terms["softmax output"] = v * ass / t
        if dropout:
            terms["softmax dropout mask"] = mask_bytes * ass / t
            terms["attention dropout output"] = v * ass / t
    if attention == "flash":
        terms["logsumexp"] = 4 * shape.heads * shape.seq * micro_batch / t
    terms["out-proj input"] = v * sbh / t
    if dropout:
        terms["attention dropout mask"] = mask_bytes * sbh / outside
    terms.update({"MLP input": v * sbh / outside, "GeLU input": 4 * v * sbh / t, "GeLU output": 4 * v * sbh / t})
    if dropout:
        terms["MLP dropout mask"] = mask_bytes * sbh / outside
    if norm_stats:
        terms["LayerNorm statistics"] = 4 * v * shape.seq * micro_batch / outside
    return {k: float(x) for k, x in terms.items()}


def activation_bytes(shape: Shape, micro_batch: int, **options) -> float:
    """``activation_terms``' sum: one layer's saved bytes on one rank."""
    return sum(activation_terms(shape, micro_batch, **options).values())


def outside_layers_terms(shape: Shape, micro_batch: int, tp: int = 1, sp: bool = False,
                         bytes_per_value: int = 2, dropout: bool = True, mask_bytes: int = 1) -> dict[str, float]:
    """What the model keeps outside its layers (Korthikanti et al. 2022, Section 4.3, with SP):
    the embedding dropout's mask sbh, the final LayerNorm's input and the head's input v·sbh each,
    and the cross-entropy's float32 log-softmax 4·sbV (in 16-bit training without autocast, torch's
    is v bytes): 4sbh/t·(1 + V/h) at v = 2 without dropout."""
    whole("micro_batch", micro_batch), _tp(shape, tp), whole("bytes_per_value", bytes_per_value)
    v, t, outside = bytes_per_value, tp, tp if sp else 1
    sbh = shape.seq * micro_batch * shape.hidden
    terms = {"embedding dropout mask": whole("mask_bytes", mask_bytes) * sbh / outside} if dropout else {}
    terms.update({"final LayerNorm input": v * sbh / outside, "head input": v * sbh / outside,
                  "cross-entropy log-probabilities": 4 * shape.seq * micro_batch * shape.vocab / t})
    return {k: float(x) for k, x in terms.items()}


def model_activation_bytes(shape: Shape, micro_batch: int, tp: int = 1, sp: bool = False, **options) -> float:
    """All the activations one rank keeps at the end of a forward: ``layers`` times one layer's,
    plus ``outside_layers_terms`` (no pipeline: one stage holds every layer)."""
    keep = {k: options[k] for k in ("bytes_per_value", "dropout", "mask_bytes") if k in options}
    return (shape.layers * activation_bytes(shape, micro_batch, tp=tp, sp=sp, **options)
            + sum(outside_layers_terms(shape, micro_batch, tp, sp, **keep).values()))

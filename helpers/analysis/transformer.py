"""Chapter 8.1's bill, counted on the GPT itself: what it saves for backward, term by term, its FLOPs
and its parameters, to hold against ``theory.transformer``'s formulas.

``saved_terms`` runs one forward with ``torch.autograd.graph.saved_tensors_hooks`` and names each
saved storage (counted once; parameters left out) by the module that saved it and how that tensor
relates to it: its input, a child's output, or a tensor it made itself. ``count_flops`` runs
``FlopCounterMode`` over a forward and a backward, with the CPU's attention kernel registered
(torch's counter knows only the GPU kernels).
"""
from __future__ import annotations

import re
from collections import defaultdict

import torch
import torch.nn as nn

from ..theory import transformer as theory

# (saving module, relation) -> term, for one block; ``gpt.Block``'s own names. "new" is a tensor the
# module made in its own forward (not a child's output); "out:X" is child X's output.
TERMS = {
    ("ln1", "input"): "LayerNorm inputs", ("ln2", "input"): "LayerNorm inputs",
    ("ln1", "new"): "LayerNorm statistics", ("ln2", "new"): "LayerNorm statistics",
    ("attn.wq", "input"): "QKV input", ("attn.wk", "input"): "QKV input", ("attn.wv", "input"): "QKV input",
    ("attn", "out:wq"): "Q and K", ("attn", "out:wk"): "Q and K", ("attn", "out:wv"): "V",
    ("attn.proj", "input"): "out-proj input",  # a copy where the kernel's output is not laid out (b, s, a, d)
    ("mlp.fc", "input"): "MLP input",
    ("mlp", "out:fc"): "GeLU input",
    ("mlp.proj", "input"): "GeLU output",
}
LAYER = re.compile(r"^blocks\.(\d+)\.?(.*)$")


def _attention_new(t: torch.Tensor, seq: int) -> str:
    """A tensor the attention made itself. A fused kernel keeps its output, which the out-projection
    reads (a view of it, where the kernel lays it out as (b, s, a, d)), and its softmax statistics,
    (b, a, s); the math path keeps s x s scores (and, with dropout, more of them)."""
    if t.dim() >= 2 and t.shape[-1] == t.shape[-2] == seq:
        return "softmax output" if t.dtype != torch.bool else "softmax dropout mask"
    if t.dim() == 4:
        return "out-proj input"
    if t.dim() == 3 and t.shape[-1] == seq:
        return "logsumexp"
    return "attention, other"


def _term(local: str, relation: str, t: torch.Tensor, seq: int) -> str:
    if (local, relation) in TERMS:
        return TERMS[(local, relation)]
    if local == "attn" and relation == "new":
        return _attention_new(t, seq)
    if "drop" in local or t.dtype == torch.bool:
        return "dropout masks"
    return f"other ({local or 'block'}, {relation})"


def saved_terms(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None) -> dict:
    """One forward of ``model`` (part 8's GPT): {layer: {term: bytes}}, and ``"outside"`` for what the
    embeddings, the final LayerNorm, the head and the loss save. Each storage is counted once, at
    its first save, in its bytes; parameters are model states, not activations, and are left out."""
    seq = idx.shape[1]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    names = {m: n for n, m in model.named_modules()}
    stack: list[nn.Module] = []
    inputs: dict[nn.Module, set[int]] = defaultdict(set)
    outputs: dict[int, nn.Module] = {}
    alive: list = []  # every input and output held until the end: no storage's address is reused meanwhile

    def pre(m, args):
        stack.append(m)
        inputs[m] |= {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        alive.append(args)

    def post(m, args, out):
        stack.pop()
        if isinstance(out, torch.Tensor):
            outputs[out.untyped_storage().data_ptr()] = m
            alive.append(out)

    seen: dict[int, tuple[str, str, int]] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in params or ptr in seen or not stack:
            return t
        m = stack[-1]
        if ptr in inputs[m]:
            relation = "input"
        elif ptr in outputs and names[outputs[ptr]].rpartition(".")[0] == names[m]:
            relation = "out:" + names[outputs[ptr]].rpartition(".")[2]
        else:
            relation = "new"
        found = LAYER.match(names[m])
        if found:
            layer, local = int(found.group(1)), found.group(2)
            seen[ptr] = (str(layer), _term(local, relation, t, seq), storage.nbytes())
        else:
            seen[ptr] = ("outside", names[m] or "model", storage.nbytes())
        return t

    handles = [h for m in model.modules()
               for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(idx, targets)
    finally:
        for h in handles:
            h.remove()
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for layer, term, nbytes in seen.values():
        out[layer][term] += nbytes
    return {k: dict(v) for k, v in out.items()}


def layer_terms(saved: dict) -> dict[str, int]:
    """The per-layer terms of ``saved_terms``, after checking that every layer saved the same."""
    layers = [v for k, v in saved.items() if k != "outside"]
    if any(v != layers[0] for v in layers):
        raise ValueError(f"the layers saved different terms: {layers}")
    return layers[0]


# --- FLOPs --------------------------------------------------------------------------------------

def _cpu_attention_formulas() -> dict:
    """torch's own formulas for its GPU attention kernels, given the CPU's kernel too: the same
    matmuls (q k^T and the scores times v; the backward recomputes the scores, as flash attention does)."""
    from torch.utils import flop_counter as fc
    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu:
            lambda q, k, v, *_, out_shape=None, **__: fc.sdpa_flop_count(q, k, v),
            aten._scaled_dot_product_flash_attention_for_cpu_backward:
            lambda g, q, k, v, *_, out_shape=None, **__: fc.sdpa_backward_flop_count(g, q, k, v)}


def count_flops(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, int]:
    """FLOPs of one forward and its backward, as ``FlopCounterMode`` counts them (matmuls and
    attention; a multiply-add is 2 FLOPs), and which ops they came from."""
    from torch.utils.flop_counter import FlopCounterMode
    counts = {}
    with FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as fwd:
        _, loss = model(idx, targets)
    counts["forward"] = fwd.get_total_flops()
    with FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as bwd:
        loss.backward()
    counts["backward"] = bwd.get_total_flops()
    counts["ops"] = sorted({str(op).split(".")[-1] for m in (fwd, bwd) for op in m.get_flop_counts()["Global"]})
    return counts


def attention_kernel(model: nn.Module, idx: torch.Tensor) -> str:
    """The aten op ``F.scaled_dot_product_attention`` dispatched to here, read from autograd's graph."""
    with torch.enable_grad():
        logits = model(idx)
    fn, todo, seen = logits.grad_fn, [logits.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if "Attention" in fn.name() or "Sdpa" in fn.name():
            return fn.name().removesuffix("Backward0")
        todo += [f for f, _ in fn.next_functions]
    return "none found"


def parameters(model: nn.Module) -> int:
    """Every parameter once (a tied head shares the embedding's)."""
    return sum(p.numel() for p in model.parameters())


def shape_of(cfg) -> "theory.Shape":
    """``theory``'s Shape of a ``gpt.GPTConfig``."""
    return theory.Shape(layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, seq=cfg.seq, vocab=cfg.vocab,
                        tied=cfg.tied)


def hardware_flops(shape, batch: int) -> dict[str, float]:
    """``theory.flops_terms`` configured to a fused (flash-like) attention kernel: its backward
    recomputes the scores q kᵀ from q and k, one of attention's two forward matmuls, so the hardware
    runs half of the attention's forward FLOPs again. That half is what ``FlopCounterMode`` counts
    with torch's own formula for the kernel's backward, and what HFU adds to MFU here."""
    terms = theory.flops_terms(shape, batch)
    attention = theory.flops_terms(shape, batch, "selective")["recompute"]  # q kᵀ and the scores times v
    return {**terms, "backward": terms["backward"] + attention / 2}


def term_rows(measured: dict[str, int], formula: dict[str, float]) -> list[dict]:
    """One row per term, measured beside the formula, and their relative gap (None where one side lacks it)."""
    rows = []
    for term in dict.fromkeys([*formula, *measured]):
        m, f = measured.get(term), formula.get(term)
        rows.append({"term": term, "measured": m, "formula": f,
                     "gap": None if m is None or f is None else abs(m - f) / f})
    return rows

"""Will my transformer fit? (chapter 8.1): a GPT's parameters, FLOPs a token, and the bytes on each GPU.

Layers, hidden size, heads, sequence, micro-batch, vocabulary, bytes a value, ZeRO stage over the
data-parallel GPUs, tensor parallelism, sequence parallelism, recomputation, attention kernel and
dropout in; ``theory.transformer``'s answer out: parameters (and a TP rank's share), FLOPs a token
beside 6N, model states and activations per GPU against an 80 GB and a 141 GB GPU. The browser
(``transformer.js``) prices every setting with ``theory.js``'s port of theory.transformer;
``bill`` and ``readout_html`` are the same in Python (tests/test_explorers.py holds them equal).
"""
from __future__ import annotations

import html

from . import shell

# The setting it opens at: a 6.7B GPT (Brown et al. 2020's GPT-3 6.7B shape) on 8 GPUs, 4 x 2.
TRANSFORMER_DEFAULTS = {"layers": 32, "hidden": 4096, "heads": 32, "seq": 2048, "micro_batch": 4,
                        "vocab": 50304, "bytes_per_value": 2, "stage": "ZeRO-1", "dp": 4, "tp": 2,
                        "sp": False, "recompute": "none", "attention": "materialized", "dropout": True,
                        "fp32_grad_accum": False}
# What the controls offer (a value passed in that is not listed is added: shell.choice).
OPTIONS = {"layers": [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128],
           "hidden": [64, 128, 256, 512, 768, 1024, 2048, 2560, 4096, 5120, 6144, 8192, 12288, 16384, 20480, 25600],
           "heads": [1, 2, 4, 8, 16, 32, 64, 128],
           "seq": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
           "micro_batch": [1, 2, 4, 8, 16, 32, 64],
           "vocab": [256, 32000, 50304, 51200, 128256],
           "bytes_per_value": [2, 4], "dp": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], "tp": [1, 2, 4, 8, 16]}
GPU_GB = (80, 141)   # an H100's and an H200's memory, in GB (1e9 bytes), as their makers count it
GB = 1e9
PARAMS_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
FLOP_UNITS = ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))
BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def si(x: float, units) -> str:
    """x in the largest unit it reaches, 2 decimals. Mirrored in transformer.js."""
    for u, name in units:
        if x >= u:
            return f"{x / u:.2f} {name}"
    return f"{x:.0f}" + (" FLOP" if units is FLOP_UNITS else " bytes" if units is BYTE_UNITS else "")


def bill(layers, hidden, heads, seq, micro_batch, vocab, bytes_per_value, stage, dp, tp, sp, recompute,
         attention, dropout, fp32_grad_accum) -> dict:
    """One setting's numbers, by ``theory.transformer``: parameters (all, a TP rank's), FLOPs a token
    (and 6N), the states on one GPU, and its activations under each recomputation."""
    from helpers.theory import transformer as tf
    shape = tf.Shape(layers, hidden, heads, seq, vocab)
    n, rank = tf.parameter_count(shape), tf.parameters_per_rank(shape, tp)
    act = {r: tf.model_activation_bytes(shape, micro_batch, tp=tp, sp=sp, recompute=r, attention=attention,
                                        bytes_per_value=bytes_per_value, dropout=dropout)
           for r in tf.RECOMPUTE}
    return {"parameters": n, "per_rank": rank, "flops_per_token": tf.flops_per_token(shape, recompute),
            "six_n": tf.six_n_flops_per_token(n),
            "states": tf.model_states(rank, stage, dp, bytes_per_value == 2, fp32_grad_accum),
            "activations": act}


def title(v: dict) -> str:
    return (f"{v['layers']} layers, hidden {v['hidden']}, {v['heads']} heads, {v['seq']} tokens x "
            f"micro-batch {v['micro_batch']}, vocabulary {v['vocab']:,}, {v['bytes_per_value']}-byte values; "
            f"{v['stage']} over {v['dp']} GPU{'s' if v['dp'] > 1 else ''} x TP {v['tp']}{' with SP' if v['sp'] else ''}, "
            f"recomputation {v['recompute']}, {v['attention']} attention{', dropout' if v['dropout'] else ''}")


def readout_html(v: dict) -> str:
    """The answer for one setting. Mirrored in transformer.js (``readout``)."""
    b = bill(**v)
    states, act = sum(b["states"].values()), b["activations"][v["recompute"]]
    total = states + act
    fits = [g for g in GPU_GB if total <= g * GB]
    verdict = (f"fits in {fits[0]} GB" if len(fits) == len(GPU_GB) else
               f"fits in {fits[0]} GB, not in {GPU_GB[0]} GB" if fits else f"does not fit in {GPU_GB[-1]} GB")
    return (f"<b>{html.escape(title(v))}</b><br>{si(b['parameters'], PARAMS_UNITS)} parameters, "
            f"{si(b['per_rank'], PARAMS_UNITS)} on each TP rank; {si(b['flops_per_token'], FLOP_UNITS)} a token "
            f"(6N: {si(b['six_n'], FLOP_UNITS)})<br>Per GPU: model states {si(states, BYTE_UNITS)} + activations "
            f"{si(act, BYTE_UNITS)} = <b>{si(total, BYTE_UNITS)}</b>: {verdict}")


class TransformerExplorer(shell.Explorer):
    """"Will my transformer fit?": the setting in, its bill out, and bars of the bytes on one GPU
    under each recomputation beside the 80 GB and 141 GB lines."""

    name = "transformer"

    def __init__(self, **values):
        self.values = self.settings("transformer_explorer", TRANSFORMER_DEFAULTS, values)
        bill(**self.values)  # a setting theory refuses is refused here, with theory's ValueError

    def layouts(self) -> dict[str, dict[str, float]]:
        b = bill(**self.values)
        return {f"recompute {r}": {**b["states"], "activations": a} for r, a in b["activations"].items()}

    def figure(self):
        from helpers.plots.memory import memory_bars
        return memory_bars(self.layouts(), GPU_GB[0] * GB, f"bytes per GPU; the line: {GPU_GB[0]} GB")

    def page(self) -> shell.Page:
        from matplotlib.colors import to_hex

        from helpers.plots import style
        from helpers.theory import sharding, transformer as tf
        v = self.values
        c = {k: shell.choice(k, label, OPTIONS[k], v[k], unit=unit) for k, label, unit in (
            ("layers", "layers", ""), ("hidden", "hidden", ""), ("heads", "heads", ""), ("seq", "sequence", ""),
            ("micro_batch", "micro-batch", ""), ("vocab", "vocabulary", ""), ("bytes_per_value", "dtype", "bytes"),
            ("dp", "data-parallel GPUs", ""), ("tp", "TP", ""))}
        kinds = ("parameters", "gradients", "optimizer states", "fp32 gradients", "activations")
        return shell.Page(
            controls=[c["layers"] + c["hidden"] + c["heads"] + c["seq"],
                      c["micro_batch"] + c["vocab"] + c["bytes_per_value"],
                      shell.select("stage", "ZeRO stage", list(sharding.STAGES), v["stage"]) + c["dp"] + c["tp"]
                      + shell.checkbox("sp", "sequence parallel", v["sp"]),
                      shell.select("recompute", "recomputation", list(tf.RECOMPUTE), v["recompute"])
                      + shell.select("attention", "attention", list(tf.ATTENTION), v["attention"])
                      + shell.checkbox("dropout", "dropout", v["dropout"])
                      + shell.checkbox("fp32_grad_accum", "fp32 gradient accumulation", v["fp32_grad_accum"])],
            readout=readout_html(v),
            view='<svg width="700" height="170" viewBox="0 0 700 170"></svg>',
            data={"GB": GB, "gpus": list(GPU_GB), "recompute": list(tf.RECOMPUTE),
                  "colors": {k: to_hex(style.color(k) if k != "fp32 gradients" else "tab:brown") for k in kinds}},
            alt=f"Bytes per GPU by kind, under each recomputation, against {GPU_GB[0]} GB: {title(v)}. "
                + readout_html(v).split("<br>", 1)[1].replace("<br>", ". ").replace("<b>", "").replace("</b>", ""),
        )


def transformer_explorer(**overrides) -> TransformerExplorer:
    """"Will my transformer fit?" (see ``TransformerExplorer``); keyword arguments override
    ``TRANSFORMER_DEFAULTS``, the setting it opens at (e.g. 8.1's GPT: layers=4, hidden=128, heads=4,
    seq=128, vocab=256)."""
    return TransformerExplorer(**overrides)

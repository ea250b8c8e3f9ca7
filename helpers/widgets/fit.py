"""Does it fit? (chapter 2): GPT-3's models against a device's memory, with ``theory.advise``.

Python computes each model's state bytes and activation bytes per sample (helpers.theory's
transformer counts) for every optimizer and precision; the browser (``fit.js``) runs
advise's search and the verdict (``theory.js``) and draws the bars, for every control.
"""
from __future__ import annotations

import html

from . import shell

# GPT-3's model family (Brown et al. 2020, table 2.1): layers, hidden size, heads; context 2048.
GPT3_MODELS = {"GPT-3 Small (125M)": (12, 768, 12), "GPT-3 XL (1.3B)": (24, 2048, 24),
               "GPT-3 6.7B": (32, 4096, 32), "GPT-3 13B": (40, 5140, 40), "GPT-3 175B": (96, 12288, 96)}
GIB = 2**30
FIT_DEFAULTS = {"model": "GPT-3 6.7B", "batch": 8, "device_gib": 80, "devices": 8, "optimizer": "adam",
                "precision": "autocast"}
# What the controls offer.
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
DEVICE_GIB = [16, 24, 40, 48, 80, 96, 141, 192]
DEVICES = [2**i for i in range(11)]


def _counts(model: str, precision: str, seq: int) -> tuple[int, float]:
    """(parameters, activation bytes per sample) of one of GPT3_MODELS, by helpers.theory's counts."""
    from helpers import theory
    layers, hidden, heads = GPT3_MODELS[model]
    return (theory.transformer_params(layers, hidden, seq=seq),
            theory.transformer_activation_bytes(1, seq, hidden, layers, heads, precision))


def model_bytes(model: str, optimizer: str, precision: str, seq: int = 2048) -> tuple[dict, float]:
    """(``theory.model_state_bytes``, activation bytes per sample) of one of GPT3_MODELS."""
    from helpers import theory
    n_params, per_sample = _counts(model, precision, seq)
    return theory.model_state_bytes(n_params, optimizer, precision), per_sample


def fit_advice(model: str = "GPT-3 6.7B", batch: int = 8, device_gib: float = 80, devices: int = 8,
               optimizer: str = "adam", precision: str = "autocast", seq: int = 2048):
    """``theory.advise``'s answer for one setting of the explorer."""
    from helpers import theory
    n_params, per_sample = _counts(model, precision, seq)
    return theory.advise(n_params, per_sample, batch, device_gib * GIB, devices, optimizer, precision)


def fit_title(model: str, batch: int, optimizer: str, precision: str, seq: int = 2048) -> str:
    return f"{model}: {batch} x {seq} tokens per step, {optimizer}, {precision}"


def fit_case(model: str = "GPT-3 6.7B", batch: int = 8, device_gib: float = 80, devices: int = 8,
             optimizer: str = "adam", precision: str = "autocast", seq: int = 2048):
    """One setting of the explorer: (``theory.advise``'s answer, its figure, a sentence saying it)."""
    from helpers import plots
    advice = fit_advice(model, batch, device_gib, devices, optimizer, precision, seq)
    title = fit_title(model, batch, optimizer, precision, seq)
    return advice, plots.memory_bars(advice.per_device, device_gib * GIB, title), verdict(advice, device_gib)


def verdict(advice, device_gib: float) -> str:
    """``theory.advise``'s answer in words, with the bytes per device of the layout it picked.

    Mirrored in ``theory.js`` (``theory.verdict``); tests/test_explorers.py holds the two equal."""
    def gib(layout):
        return f"{sum(layout.values()) / GIB:,.1f} GiB"
    one = advice.per_device["one device"]
    p = advice.pp * advice.dp
    if advice.fits_one_device:
        tail = f"; with {p} devices, DDP runs {p} replicas, each on 1/{p} of the batch." if p > 1 else "."
        return f"Fits on one device: {gib(one)} of {device_gib:g} GiB{tail}"
    head = f"Does not fit on one device ({gib(one)} > {device_gib:g} GiB). "
    states = {k: v for k, v in one.items() if k != "activations"}
    if advice.strategy is None:
        where = "With one device" if p == 1 else f"Not even split over all {p} devices"
        return head + (f"{where}: add devices, cut the batch per step (accumulate gradients), "
                       "or recompute activations.")
    if advice.strategy == "DDP":
        return head + f"DDP over {p} devices fits: each keeps all model states ({gib(states)}) but only 1/{p} of the activations."
    if advice.strategy == "pipeline":
        return head + f"Split the layers over all {p} devices (model/pipeline parallel): the states alone are {gib(states)}."
    name = f"hybrid, {advice.pp} stages x {advice.dp} replicas"
    return head + (f"Hybrid: {advice.pp} pipeline stages, times {advice.dp} data-parallel replicas: "
                   f"{gib(advice.per_device[name])} per device.")


def fit_data(seq: int = 2048) -> dict:
    """What ``fit.js`` needs: every model's bytes for every optimizer and precision, and the colours."""
    from matplotlib.colors import to_hex

    from helpers import theory
    from helpers.plots import style
    models = {}
    for model in GPT3_MODELS:
        models[model] = {}
        for opt in theory.OPTIMIZER_STATES:
            models[model][opt] = {}
            for prec in theory.PRECISIONS:
                states, act = model_bytes(model, opt, prec, seq)
                models[model][opt][prec] = {"states": states, "act": act}
    kinds = ("parameters", "gradients", "optimizer states", "autocast copies", "activations")
    return {"models": models, "seq": seq, "GIB": GIB, "colors": {k: to_hex(style.color(k)) for k in kinds}}


class FitExplorer(shell.Explorer):
    """"Does this model fit, and with which strategy?": the model, batch, device memory and count,
    optimizer and precision; bars of the bytes per device for each layout, and the verdict."""

    name = "fit"

    def __init__(self, **values):
        self.values = self.settings("fit_explorer", FIT_DEFAULTS, values)

    def figure(self):
        return fit_case(**self.values)[1]

    def page(self) -> shell.Page:
        from helpers import theory
        v = self.values
        advice = fit_advice(**v)
        text = verdict(advice, v["device_gib"])
        title = fit_title(v["model"], v["batch"], v["optimizer"], v["precision"])
        return shell.Page(
            controls=[shell.select("model", "model", list(GPT3_MODELS), v["model"])
                      + shell.choice("batch", "batch (sequences)", BATCHES, v["batch"])
                      + shell.choice("device_gib", "memory per device", DEVICE_GIB, v["device_gib"], unit="GiB"),
                      shell.choice("devices", "devices", DEVICES, v["devices"])
                      + shell.select("optimizer", "optimizer", list(theory.OPTIMIZER_STATES), v["optimizer"])
                      + shell.select("precision", "precision", list(theory.PRECISIONS), v["precision"])],
            readout=f"<b>{html.escape(title)}</b><br>{html.escape(text)}",
            view='<svg width="700" height="200" viewBox="0 0 700 200"></svg>',
            data=fit_data(),
            alt=f"Bytes per device for each layout, {title}. {text}",
        )


def fit_explorer(**overrides) -> FitExplorer:
    """"Does this model fit, and with which strategy?" (see ``FitExplorer``); keyword arguments
    override ``FIT_DEFAULTS``, the setting it opens at."""
    return FitExplorer(**overrides)

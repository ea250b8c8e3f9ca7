"""Memory (chapter 2): what one device holds while it trains, and what each strategy leaves on it.

The model's states (parameters, gradients, optimizer states) and the activations
saved for the backward pass; then the article's table of strategies in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .checks import at_least, one_of, whole, widths as check_widths

OPTIMIZER_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2}  # fp32 values kept per parameter
PRECISIONS = ("fp32", "autocast", "master-weights")
ACTIVATION_BYTES = {"fp32": 4, "autocast": 2, "master-weights": 2}  # bytes per activation value


def model_state_bytes(n_params: int, optimizer: str = "adam", precision: str = "fp32",
                      n_tensors: int = 0) -> dict[str, int]:
    """Bytes a training replica keeps for its model, by kind.

    k = optimizer states per parameter (SGD 0, SGD with momentum 1, Adam 2), each fp32.

    * ``fp32``: parameters 4, gradients 4, optimizer 4k bytes per parameter.
    * ``autocast`` (``torch.autocast``, what this book uses): the same, since parameters
      and gradients stay fp32, plus at most 2 bytes per parameter for the 16-bit copies
      of the weights that autocast caches during the forward pass.
    * ``master-weights`` (fp16 training with an fp32 master copy, as in Micikevicius et
      al. and ZeRO's accounting): parameters 2, gradients 2, optimizer 4 + 4k.

    Adam also keeps a step count for each parameter *tensor*: a float32 scalar in
    PyTorch, so 4 bytes times ``n_tensors``.
    """
    one_of("optimizer", optimizer, OPTIMIZER_STATES), one_of("precision", precision, PRECISIONS)
    at_least("n_params", n_params), whole("n_tensors", n_tensors, 0)
    k = OPTIMIZER_STATES[optimizer]
    steps = 4 * n_tensors if optimizer == "adam" else 0
    if precision == "master-weights":
        return {"parameters": 2 * n_params, "gradients": 2 * n_params,
                "optimizer states": (4 + 4 * k) * n_params + steps}
    states = {"parameters": 4 * n_params, "gradients": 4 * n_params,
              "optimizer states": 4 * k * n_params + steps}
    if precision == "autocast":
        states["autocast copies"] = 2 * n_params
    return states


def mlp_activation_bytes(batch: int, widths: list[int], precision: str = "fp32") -> int:
    """Bytes an MLP of Linear+ReLU layers (``widths`` = [in, hidden..., out]) saves for backward.

    Each Linear saves its input, and each ReLU's output *is* the next Linear's
    input, so per sample the saved values are in + sum(hidden). Under autocast
    they are 16-bit. (The weights a Linear also saves are parameters, counted
    in ``model_state_bytes``.)
    """
    whole("batch", batch, 0), check_widths("widths", widths), one_of("precision", precision, ACTIVATION_BYTES)
    return batch * (widths[0] + sum(widths[1:-1])) * ACTIVATION_BYTES[precision]


def transformer_params(layers: int, hidden: int, vocab: int = 50257, seq: int = 2048) -> int:
    """Parameters of a GPT-style decoder, output layer tied to the token embedding.

    Per layer 12h^2 + 13h: attention 4h^2 + 4h, MLP (4h wide) 8h^2 + 5h, two
    LayerNorms 4h. Plus token and position embeddings and the final LayerNorm.
    """
    whole("layers", layers), whole("hidden", hidden), whole("vocab", vocab), whole("seq", seq)
    return layers * (12 * hidden**2 + 13 * hidden) + (vocab + seq) * hidden + 2 * hidden


def _check_transformer(batch, seq, hidden, layers, heads, precision) -> None:
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("layers", layers), ("heads", heads)):
        whole(name, value)
    one_of("precision", precision, ACTIVATION_BYTES)


def transformer_activation_bytes(batch: int, seq: int, hidden: int, layers: int, heads: int,
                                 precision: str = "autocast") -> float:
    """Activations a GPT-style decoder saves for backward, without recomputation.

    Korthikanti et al. (2022), section 4.1, count s*b*h*(34 + 5*a*s/h) bytes per layer for
    16-bit values with 1-byte dropout masks. Their itemization, for v bytes per value:
    per layer 16 tensors of s*b*h values (attention 5: the QKV input, Q, K, V, the output
    projection's input; MLP 9: its input, the GeLU's input (4h wide), the second Linear's input
    (4h wide); the two LayerNorms' inputs 2), 2 dropout masks of s*b*h bytes, and per head
    the softmax output and the dropout's output (v bytes each) and its mask (1 byte), s*s*b
    each: s*b*h*(16*v + 2) + a*s^2*b*(2*v + 1), which gives back 34 and 5 at v = 2.
    The masks are 1 byte whatever v is: torch keeps them as bool.
    """
    _check_transformer(batch, seq, hidden, layers, heads, precision)
    v = ACTIVATION_BYTES[precision]
    per_layer = seq * batch * hidden * (16 * v + 2) + heads * seq**2 * batch * (2 * v + 1)
    return layers * per_layer


def strategy_memory(states: dict[str, float], act_per_sample: float, batch: int,
                    pp: int = 1, dp: int = 1) -> dict[str, float]:
    """Bytes on one device when pp pipeline stages each hold 1/pp of the layers and dp replicas
    each train on batch/dp samples.

    pp = dp = 1 is one device; dp = p is DDP (every replica holds all the states,
    with ``gradient_as_bucket_view=True``); pp = p is model/pipeline parallelism with
    the whole batch's activations of a stage kept until its backward (GPipe's
    schedule); pp * dp = p is the hybrid. Layers are assumed equal in size.
    """
    whole("pp", pp), whole("dp", dp), whole("batch", batch), at_least("act_per_sample", act_per_sample)
    for kind, b in states.items():
        at_least(f"states[{kind!r}]", b)
    out = {kind: b / pp for kind, b in states.items()}
    out["activations"] = act_per_sample * batch / dp / pp
    return out


@dataclass(frozen=True)
class FitAdvice:
    """What ``advise`` found: the simplest layout that fits, and each layout's bytes per device."""

    fits_one_device: bool
    strategy: str | None  # "one device", "DDP", "pipeline", "hybrid", or None: nothing fits
    pp: int
    dp: int
    per_device: dict[str, dict[str, float]]  # layout name -> bytes by kind


def advise(n_params: int, act_per_sample: float, batch: int, device_bytes: float, devices: int,
           optimizer: str = "adam", precision: str = "fp32", n_tensors: int = 0) -> FitAdvice:
    """Does the model fit on one device, and if not, which strategy of the article's table fits it?

    Tried from the simplest: one device; DDP (the batch splits, the states do
    not); then the fewest pipeline stages pp (pp divides ``devices``) that fit,
    the rest of the devices as data-parallel replicas: a hybrid when 1 < pp <
    devices, a pure pipeline when pp = devices.
    """
    whole("devices", devices), whole("batch", batch), at_least("device_bytes", device_bytes)
    states = model_state_bytes(n_params, optimizer, precision, n_tensors)

    def total(pp, dp):
        return sum(strategy_memory(states, act_per_sample, batch, pp, dp).values())

    layouts = {"one device": (1, 1)}
    if devices > 1:
        layouts[f"DDP x{devices}"] = (1, devices)
        layouts[f"pipeline, {devices} stages"] = (devices, 1)
    per_device = {name: strategy_memory(states, act_per_sample, batch, *ly) for name, ly in layouts.items()}
    fits_one = total(1, 1) <= device_bytes
    if fits_one:
        return FitAdvice(True, "DDP" if devices > 1 else "one device", 1, devices, per_device)
    for pp in (d for d in range(1, devices + 1) if devices % d == 0):
        dp = devices // pp
        if batch >= dp and total(pp, dp) <= device_bytes:
            strategy = "DDP" if pp == 1 else "pipeline" if dp == 1 else "hybrid"
            if strategy == "hybrid":
                per_device[f"hybrid, {pp} stages x {dp} replicas"] = strategy_memory(
                    states, act_per_sample, batch, pp, dp)
            return FitAdvice(False, strategy, pp, dp, per_device)
    return FitAdvice(False, None, devices, 1, per_device)

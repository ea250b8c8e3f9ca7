"""Closed-form models of distributed training, and their fits to measurements.

Each formula is defined once here and shown in the chapter that teaches it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# --- Memory (chapter 2) ----------------------------------------------------------------
# What one device holds while it trains: the model's states (parameters, gradients,
# optimizer states) and the activations saved for the backward pass; then what each
# strategy of the article's table leaves on each device.

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
    if optimizer not in OPTIMIZER_STATES or precision not in PRECISIONS:
        raise ValueError(f"optimizer in {list(OPTIMIZER_STATES)}, precision in {PRECISIONS}")
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
    return batch * (widths[0] + sum(widths[1:-1])) * ACTIVATION_BYTES[precision]


def transformer_params(layers: int, hidden: int, vocab: int = 50257, seq: int = 2048) -> int:
    """Parameters of a GPT-style decoder, output layer tied to the token embedding.

    Per layer 12h^2 + 13h: attention 4h^2 + 4h, MLP (4h wide) 8h^2 + 5h, two
    LayerNorms 4h. Plus token and position embeddings and the final LayerNorm.
    """
    return layers * (12 * hidden**2 + 13 * hidden) + (vocab + seq) * hidden + 2 * hidden


def transformer_activation_bytes(batch: int, seq: int, hidden: int, layers: int, heads: int,
                                 precision: str = "autocast") -> float:
    """Activations a GPT-style decoder saves for backward, without recomputation.

    Korthikanti et al. (2022) count s*b*h*(34 + 5*a*s/h) bytes per layer for
    16-bit values with 1-byte dropout masks. Their terms, for v bytes per value:
    s*b*h*(15.5*v + 3) + a*s^2*b*(2*v + 1), which gives back 34 and 5 at v = 2.
    """
    v = ACTIVATION_BYTES[precision]
    per_layer = seq * batch * hidden * (15.5 * v + 3) + heads * seq**2 * batch * (2 * v + 1)
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


def measured_state_bytes(model, optimizer) -> dict[str, int]:
    """The real bytes of a model's parameters, gradients and optimizer states, counted tensor by tensor."""
    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)
    params = list(model.parameters())
    states = [t for s in optimizer.state.values() for t in s.values() if hasattr(t, "element_size")]
    return {"parameters": nbytes(params), "gradients": nbytes(p.grad for p in params),
            "optimizer states": nbytes(states)}


def saved_activation_bytes(model, run) -> dict[str, int]:
    """Bytes autograd saves for backward while ``run()`` does the forward; each storage counted once.

    A saved view counts its own bytes, so a batch sliced from a bigger tensor
    counts as the slice. Split into activations and autocast's 16-bit weight
    copies (a saved tensor whose autograd parent is a cast of a parameter). The
    fp32 parameters that layers save are model states, counted by
    ``measured_state_bytes``.
    """
    import torch
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, tuple[int, bool]] = {}

    def is_weight_copy(t) -> bool:
        # Walk up through views (a Linear saves the copy transposed) to a cast of a leaf parameter.
        fn, cast = t.grad_fn, False
        while fn is not None and fn.name().startswith(("TBackward", "ToCopyBackward", "ViewBackward")):
            cast |= fn.name().startswith("ToCopyBackward")
            fn = fn.next_functions[0][0] if fn.next_functions else None
        return cast and hasattr(fn, "variable")

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            nbytes = max(t.numel() * t.element_size(), seen.get(ptr, (0, False))[0])
            seen[ptr] = (nbytes, is_weight_copy(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return {"activations": sum(b for b, copy in seen.values() if not copy),
            "autocast copies": sum(b for b, copy in seen.values() if copy)}


# --- Speedup (chapter 4.1) -------------------------------------------------------------

def amdahl(p, alpha):
    """Strong scaling: S(p) = 1 / (alpha + (1 - alpha) / p) for a fixed total workload.

    alpha is the serial fraction of the one-device run; the ceiling as p grows is 1 / alpha.
    """
    p = np.asarray(p, dtype=float)
    return 1.0 / (alpha + (1.0 - alpha) / p)


def gustafson(p, alpha_p):
    """Weak scaling (Gustafson 1988): S(p) = p - alpha_p (p - 1), the work growing with p.

    alpha_p is the serial fraction of the *p-device* run's time. S compares that run
    with one device doing the same, p times larger, work.
    """
    p = np.asarray(p, dtype=float)
    return p - alpha_p * (p - 1.0)


def gustafson_alpha(p, alpha):
    """The serial fraction of the p-device run, from Amdahl's alpha of the one-device run.

    With it, gustafson(p, gustafson_alpha(p, a)) == amdahl(p, a): one law, two ways to
    count alpha. Amdahl holds the one-device alpha fixed as p grows, Gustafson the p-device one.
    """
    return alpha * amdahl(p, alpha)


def alpha_from_speedup(p, speedup):
    """Invert Amdahl's law: the serial fraction that gives this speedup on p devices."""
    p, speedup = np.asarray(p, dtype=float), np.asarray(speedup, dtype=float)
    return (p / speedup - 1.0) / (p - 1.0)


@dataclass(frozen=True)
class AmdahlFit:
    """Amdahl's alpha fitted to measured speedups, with its standard error."""

    alpha: float
    stderr: float
    n: int

    def speedup(self, p, sigmas: float = 0.0):
        """The fitted curve; ``sigmas=+-2`` gives the edges of a two-standard-error band."""
        a = np.clip(self.alpha - sigmas * self.stderr, 0.0, 1.0)
        return amdahl(p, a)

    @property
    def ceiling(self) -> float:
        return 1.0 / self.alpha


def fit_amdahl(p, speedup) -> AmdahlFit:
    """Least-squares alpha, in the form where Amdahl's law is linear in alpha.

    Normalised time 1/S = alpha + (1 - alpha)/p, so y = 1/S - 1/p = alpha * x with
    x = 1 - 1/p: a line through the origin. Points at p = 1 carry no information
    (x = 0). The standard error comes from the residuals, so it needs two or more
    points with p > 1 (repeats count); with fewer it is nan.
    """
    p, speedup = np.asarray(p, dtype=float), np.asarray(speedup, dtype=float)
    x, y = 1.0 - 1.0 / p, 1.0 / speedup - 1.0 / p
    sxx = float(np.sum(x * x))
    if sxx == 0.0:
        raise ValueError("fit_amdahl needs at least one point with p > 1")
    alpha = float(np.sum(x * y) / sxx)
    n = int(np.sum(x > 0))
    resid = y - alpha * x
    stderr = float(np.sqrt(np.sum(resid[x > 0] ** 2) / (n - 1) / sxx)) if n > 1 else float("nan")
    return AmdahlFit(alpha, stderr, n)


@dataclass(frozen=True)
class StepModel:
    """Amdahl's law in seconds: a step on p ranks takes ``serial[p] + per_sample * b``.

    ``serial[p]``: what every step costs whatever its batch (optimizer, all_reduce,
    Python), one value per rank count because communication grows with p.
    ``per_sample``: the seconds one rank spends per sample (data, forward, backward).
    """

    serial: dict
    per_sample: float

    def seconds(self, p: int, per_rank_batch: float) -> float:
        return self.serial[p] + self.per_sample * per_rank_batch

    def speedup(self, p: int, global_batch: int) -> float:
        """Strong scaling at this global batch: one rank against p ranks of global_batch / p each."""
        return self.seconds(1, global_batch) / self.seconds(p, global_batch / p)

    def alpha(self, p: int, global_batch: int) -> float:
        """The Amdahl alpha this model implies for a p-rank run at this global batch."""
        return float(alpha_from_speedup(p, self.speedup(p, global_batch)))


def fit_step_model(p, per_rank_batch, seconds) -> StepModel:
    """Least squares for ``StepModel`` over measured step times (one row per p, b measurement)."""
    p, b, t = (np.asarray(v, dtype=float) for v in (p, per_rank_batch, seconds))
    ranks = sorted({int(v) for v in p})
    design = np.column_stack([(p == r).astype(float) for r in ranks] + [b])
    coef, *_ = np.linalg.lstsq(design, t, rcond=None)
    return StepModel({r: float(c) for r, c in zip(ranks, coef[:-1])}, float(coef[-1]))


# --- Communication (chapter 4.2) -------------------------------------------------------

def comm_time(message_bytes, bandwidth, latency):
    """The article's cost of one transfer: T_comm = M / B + L (seconds, bytes, bytes/s)."""
    return np.asarray(message_bytes, dtype=float) / bandwidth + latency


def r_squared(y, y_hat) -> float:
    """Coefficient of determination: 1 - (residual sum of squares) / (total sum of squares)."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    return float(1.0 - np.sum((y - y_hat) ** 2) / np.sum((y - y.mean()) ** 2))


@dataclass(frozen=True)
class AlphaBetaFit:
    """T(M) = L + M / B fitted to measured times: latency L (s), bandwidth B (bytes/s)."""

    latency: float
    bandwidth: float
    latency_err: float
    bandwidth_err: float

    def seconds(self, message_bytes):
        return comm_time(message_bytes, self.bandwidth, self.latency)

    @property
    def half_size(self) -> float:
        """Hockney's n_1/2 = L * B: the size where latency and bandwidth cost the same.

        Much smaller messages are latency-bound (T ~ L), much larger ones bandwidth-bound (T ~ M / B).
        """
        return self.latency * self.bandwidth

    def r2(self, message_bytes, seconds) -> float:
        """R^2 of this fit on the given points, in seconds (not log seconds)."""
        return r_squared(seconds, self.seconds(message_bytes))


def fit_alpha_beta(message_bytes, seconds) -> AlphaBetaFit:
    """Least squares for T = L + M / B, weighting each point by 1 / T.

    Unweighted, the largest message would set both numbers and L would be lost in
    its noise; relative weights let small messages set L and large ones set B.
    Standard errors come from the weighted residuals (needs three or more sizes).
    """
    m, t = np.asarray(message_bytes, dtype=float), np.asarray(seconds, dtype=float)
    design = np.column_stack([np.ones_like(m), m]) / t[:, None]
    target = np.ones_like(t)  # t / t
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    latency, inv_bw = coef
    dof = len(t) - 2
    if dof > 0:
        sigma2 = float(np.sum((target - design @ coef) ** 2)) / dof
        cov = sigma2 * np.linalg.inv(design.T @ design)
        latency_err, inv_bw_err = np.sqrt(np.diag(cov))
    else:
        latency_err = inv_bw_err = float("nan")
    return AlphaBetaFit(float(latency), float(1.0 / inv_bw), float(latency_err),
                        float(inv_bw_err / inv_bw ** 2))


# nccl-tests' bus-bandwidth factors: what each rank's links carry per byte of the message.
BUS_FACTOR = {"all_reduce": lambda p: 2.0 * (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
              "all_gather": lambda p: (p - 1) / p, "broadcast": lambda p: 1.0, "reduce": lambda p: 1.0}


def algbw(message_bytes, seconds):
    """Algorithm bandwidth, as nccl-tests defines it: message bytes / time."""
    return np.asarray(message_bytes, dtype=float) / np.asarray(seconds, dtype=float)


def busbw(message_bytes, seconds, p: int, op: str = "all_reduce"):
    """Bus bandwidth (nccl-tests): algbw times the bytes each rank must move per message byte.

    For all_reduce that is 2 (p - 1) / p: comparable across p, and with the link speed.
    """
    return algbw(message_bytes, seconds) * BUS_FACTOR[op](p)


def ring_allreduce_time(message_bytes, p: int, alpha: float, beta: float):
    """Ring all_reduce: reduce-scatter then all-gather, 2 (p - 1) steps of M / p bytes each.

    T = 2 (p - 1) alpha + 2 (p - 1) / p * M * beta, with alpha the latency of one step and
    beta the seconds per byte of one link (Thakur et al. 2005; Patarasuk and Yuan 2009).
    """
    m = np.asarray(message_bytes, dtype=float)
    return 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * m * beta


def ring_from_fit(fit: AlphaBetaFit, p: int) -> tuple[float, float]:
    """(alpha, beta) of the ring model that matches a fitted T = L + M / B measured on p ranks."""
    steps = 2.0 * (p - 1)
    return fit.latency / steps, p / (steps * fit.bandwidth)


def ddp_step_time(t_compute, t_comm, overlappable=0.0):
    """A data-parallel step: compute plus the communication that nothing hides.

    ``overlappable`` is the compute time during which gradients are already being
    all-reduced (DDP starts a bucket's all_reduce once the bucket is full, while
    backward goes on). 0 is the article's T = T_compute + T_comm, no overlap; the
    backward time is the ideal, every byte sent while backward still runs.
    """
    return t_compute + np.maximum(0.0, t_comm - overlappable)


@dataclass(frozen=True)
class Diagnosis:
    """Where a data-parallel step's time goes, and what would make it faster."""

    t_compute: float
    t_comm: float
    t_latency: float
    step: float
    speedup: float
    bound: str
    advice: list


def diagnose(n_params: int, per_rank_batch: int, t_per_sample: float, p: int, alpha: float, beta: float,
             overlappable: float = 0.0, t_fixed: float = 0.0, bytes_per_grad: int = 4) -> Diagnosis:
    """"Why is my multi-GPU run slower?": compute against ring all_reduce for one DDP step.

    t_per_sample: one rank's forward+backward seconds per sample; t_fixed: per-step
    seconds that do not scale with the batch (optimizer, Python). alpha, beta: the ring
    model's per-step latency and seconds per byte. ``speedup`` is the throughput of p
    ranks over one process at the same per-rank batch (which sends nothing).
    """
    grad_bytes = n_params * bytes_per_grad
    t_compute = per_rank_batch * t_per_sample + t_fixed
    t_comm = float(ring_allreduce_time(grad_bytes, p, alpha, beta)) if p > 1 else 0.0
    t_latency = 2.0 * (p - 1) * alpha if p > 1 else 0.0
    exposed = float(ddp_step_time(0.0, t_comm, overlappable))
    step = t_compute + exposed
    speedup = p * t_compute / step
    bound = "communication" if exposed > t_compute else "compute"
    advice = []
    if exposed > 0.2 * step:
        if t_latency > t_comm - t_latency:
            advice.append("latency-bound: send fewer, larger messages (bigger DDP buckets, "
                          "bucket_cap_mb) or all_reduce less often (gradient accumulation)")
        need_batch = max(1, int(np.ceil((exposed - t_fixed) / t_per_sample)))
        advice.append(f"bigger per-rank batch: at {need_batch} samples compute would match "
                      f"communication (memory permitting)")
        k = int(np.ceil(exposed / t_compute))
        advice.append(f"gradient accumulation: all_reduce once every {k} micro-batches "
                      f"(DDP's no_sync) to spend about as long computing as communicating")
        if overlappable < t_comm:
            advice.append("overlap: let all_reduce run during backward (DDP does this per bucket; "
                          "smaller buckets start sooner)")
        advice.append("fewer or faster links: fewer ranks per all_reduce, or a faster "
                      "interconnect (NVLink over PCIe, InfiniBand over Ethernet)")
    else:
        advice.append("compute-bound: communication is a small share of the step, so more ranks "
                      "keep paying off")
    return Diagnosis(t_compute, t_comm, t_latency, step, speedup, bound, advice)


# --- Pipeline / model parallel (chapters 3.2, 5.3) --------------------------------------

def naive_mp_utilization(stage_work):
    """Naive model parallelism runs one stage at a time, so stage s is busy w_s / sum(w).

    ``stage_work``: each stage's compute time (or FLOPs). With p equal stages: 1/p each.
    """
    w = np.asarray(stage_work, dtype=float)
    return w / w.sum()


def bubble_fraction(p, m):
    """GPipe's idle fraction of a step with p equal stages and m micro-batches: (p-1)/(m+p-1).

    Each stage is busy for m slots out of the m + p - 1 that the fill-and-drain takes
    (Huang et al., GPipe). m = 1 is naive model parallelism: (p-1)/p idle.
    """
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return (p - 1) / (m + p - 1)


def pipeline_utilization(p, m):
    """Busy fraction of each stage under GPipe: m / (m + p - 1) = 1 - bubble."""
    return 1.0 - bubble_fraction(p, m)


def pipeline_speedup(p, m):
    """GPipe's step against naive model parallelism's, equal stages, free communication.

    Naive: p stages one after another, p * t. GPipe: (m + p - 1) slots of t / m each.
    The ratio p * m / (m + p - 1) tends to p as m grows.
    """
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return p * m / (m + p - 1)


def micro_batches_for_bubble(p: int, max_bubble: float) -> int:
    """The fewest micro-batches that keep the bubble at or below ``max_bubble``: m >= (p-1)(1-b)/b."""
    if not 0 < max_bubble < 1:
        raise ValueError(f"max_bubble must be in (0, 1), got {max_bubble}")
    m = max(1, int(np.ceil((p - 1) * (1 - max_bubble) / max_bubble - 1e-9)))
    return m


# --- Mixed precision (chapters 3.3, 5.2) -----------------------------------------------

def autocast_weight_copy_bytes(widths: list[int], bytes_per_value: int = 2) -> int:
    """The 16-bit weight copies an MLP's Linears keep for backward under autocast.

    Backward needs a layer's weight to pass the gradient on to its input, so
    autograd saves the cast copy of every weight but the first layer's: the
    data needs no gradient. (Biases are added, never multiplied: nothing saved.)
    """
    return bytes_per_value * sum(a * b for a, b in zip(widths[1:-1], widths[2:]))


def autocast_saved_bytes(batch: int, widths: list[int]) -> int:
    """Bytes held for backward under autocast: 16-bit activations plus the weight copies."""
    return mlp_activation_bytes(batch, widths, "autocast") + autocast_weight_copy_bytes(widths)


def autocast_break_even_batch(widths: list[int]) -> int:
    """The smallest batch at which autocast holds fewer bytes for backward than fp32.

    fp32 holds 4*B*A bytes and autocast 2*B*A + C (A values per sample, C the
    copies' bytes), so autocast saves memory only when B > C / (2*A).
    """
    per_sample = mlp_activation_bytes(1, widths, "fp32") - mlp_activation_bytes(1, widths, "autocast")
    return autocast_weight_copy_bytes(widths) // per_sample + 1


def grad_scale_trace(init_scale: float, found_inf: list[bool], growth_interval: int = 2000,
                     growth_factor: float = 2.0, backoff_factor: float = 0.5) -> list[float]:
    """The scale GradScaler uses at each step, given the steps whose gradients overflowed.

    After an inf/nan the step is skipped and the scale multiplied by
    ``backoff_factor``; after ``growth_interval`` good steps in a row it is
    multiplied by ``growth_factor``.
    """
    scale, good, trace = init_scale, 0, []
    for inf in found_inf:
        trace.append(scale)
        if inf:
            scale, good = scale * backoff_factor, 0
        else:
            good += 1
            if good == growth_interval:
                scale, good = scale * growth_factor, 0
    return trace

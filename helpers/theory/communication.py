"""Communication (chapter 4.2): the article's T = M/B + L, the ring all-reduce, and a DDP step priced.

Symbols: ``latency`` L and ``bandwidth`` B for one measured collective; for the ring,
``step_latency`` (one of its 2(p-1) steps) and ``seconds_per_byte`` (one link).
Amdahl's serial fraction, ``alpha``, lives in ``theory.speedup``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import at_least, one_of, whole


def comm_time(message_bytes, bandwidth, latency):
    """The article's cost of one transfer: T_comm = M / B + L (seconds, bytes, bytes/s)."""
    return np.asarray(message_bytes, dtype=float) / bandwidth + latency


def r_squared(y, y_hat) -> float:
    """Coefficient of determination: 1 - (residual sum of squares) / (total sum of squares)."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    if y.size < 2 or np.all(y == y[0]):
        raise ValueError("r_squared needs two or more values that are not all equal: "
                         "a constant has no variance for a fit to explain")
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
    if m.shape != t.shape or len(np.unique(m)) < 3 or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError("fit_alpha_beta needs three or more distinct sizes, each with a positive, "
                         f"finite time (got {len(np.unique(m))} sizes)")
    design = np.column_stack([np.ones_like(m), m]) / t[:, None]
    target = np.ones_like(t)  # t / t
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    latency, inv_bw = coef
    if inv_bw <= 0:
        raise ValueError("fit_alpha_beta found time falling as messages grow (a bandwidth <= 0): "
                         "the sizes do not reach the bandwidth-bound end, or the timings are noise")
    sigma2 = float(np.sum((target - design @ coef) ** 2)) / (len(t) - 2)
    latency_err, inv_bw_err = np.sqrt(np.diag(sigma2 * np.linalg.inv(design.T @ design)))
    return AlphaBetaFit(float(latency), float(1.0 / inv_bw), float(latency_err),
                        float(inv_bw_err / inv_bw ** 2))


# nccl-tests' bus-bandwidth factors: what each rank's links carry per byte of the message.
BUS_FACTOR = {"all_reduce": lambda p: 2.0 * (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
              "all_gather": lambda p: (p - 1) / p, "broadcast": lambda p: 1.0, "reduce": lambda p: 1.0,
              "all_to_all": lambda p: (p - 1) / p}


def algbw(message_bytes, seconds):
    """Algorithm bandwidth, as nccl-tests defines it: message bytes / time."""
    return np.asarray(message_bytes, dtype=float) / np.asarray(seconds, dtype=float)


def busbw(message_bytes, seconds, p: int, op: str = "all_reduce"):
    """Bus bandwidth (nccl-tests): algbw times the bytes each rank must move per message byte.

    For all_reduce that is 2 (p - 1) / p: comparable across p, and with the link speed.
    """
    one_of("op", op, BUS_FACTOR), whole("p", p)
    return algbw(message_bytes, seconds) * BUS_FACTOR[op](p)


def ring_allreduce_time(message_bytes, p: int, step_latency: float, seconds_per_byte: float):
    """Ring all_reduce: reduce-scatter then all-gather, 2 (p - 1) steps of M / p bytes each.

    T = 2 (p - 1) ℓ + 2 (p - 1) / p * M * β, with ℓ (step_latency) the latency of one step and β the
    seconds per byte of one link (Thakur et al. 2005; Patarasuk and Yuan 2009).
    """
    whole("p", p), at_least("message_bytes", message_bytes)
    m = np.asarray(message_bytes, dtype=float)
    return 2.0 * (p - 1) * step_latency + 2.0 * (p - 1) / p * m * seconds_per_byte


def ring_from_fit(fit: AlphaBetaFit, p: int) -> tuple[float, float]:
    """(step_latency, seconds_per_byte) of the ring model that matches T = L + M / B fitted on p ranks."""
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


def diagnose(n_params: int, per_rank_batch: int, t_per_sample: float, p: int, step_latency: float,
             seconds_per_byte: float, overlappable: float = 0.0, t_fixed: float = 0.0,
             bytes_per_grad: int = 4) -> Diagnosis:
    """"Why is my multi-GPU run slower?": compute against ring all_reduce for one DDP step.

    t_per_sample: one rank's forward+backward seconds per sample; t_fixed: per-step
    seconds that do not scale with the batch (optimizer, Python). step_latency,
    seconds_per_byte: the ring model's (``ring_from_fit``). ``speedup`` is the throughput of p
    ranks over one process at the same per-rank batch (which sends nothing).
    """
    if t_per_sample <= 0 or per_rank_batch < 1 or p < 1:
        raise ValueError("diagnose needs a positive time per sample, a per-rank batch >= 1 and p >= 1; "
                         f"got t_per_sample={t_per_sample}, per_rank_batch={per_rank_batch}, p={p}")
    grad_bytes = n_params * bytes_per_grad
    t_compute = per_rank_batch * t_per_sample + t_fixed
    t_comm = float(ring_allreduce_time(grad_bytes, p, step_latency, seconds_per_byte)) if p > 1 else 0.0
    t_latency = 2.0 * (p - 1) * step_latency if p > 1 else 0.0
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

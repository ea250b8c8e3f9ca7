"""Chapter 4.3: a DDP step on p ranks, predicted before it runs, from fits made on the reader's machine.

The article prices a step as T = T_compute + M/B + L. Four things decide a real step that
this leaves out, and each is a term here, measured in the chapter:

* the compute does not all shrink with the batch: each phase is fixed + slope * work
  (``Line``), so a rank's share of a smaller batch costs more than its share of the samples;
* DDP sends the gradients in buckets, one all_reduce each, started as soon as backward has
  produced a bucket (``bucket_exposed``): only what is still running when backward ends costs;
* each all_reduce inside a training step costs ``per_call`` more than the same call run back
  to back (as in chapter 4.2's sweep), and every step waits for the last rank to arrive, a
  wait that grows with the compute (``Link.wait``): ranks that compute apart drift apart;
* ranks that compute at the same moment slow each other by ``contention``.

Pure numpy, like the rest of ``theory``: the chapter measures, this predicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import at_least, whole
from .communication import ring_allreduce_time

PHASES = ("data", "forward", "backward", "optimizer")


@dataclass(frozen=True)
class Line:
    """y = fixed + slope * x: one phase's seconds against its work."""

    fixed: float
    slope: float

    def __call__(self, x):
        return self.fixed + self.slope * np.asarray(x, dtype=float)


def fit_line(x, y, relative: bool = True) -> Line:
    """Least squares for ``Line``. ``relative``: each point weighted by 1 / y, so a small step's time
    counts as much as a large one's (as in ``fit_alpha_beta``); else plain least squares, for values
    that may be 0, with a negative intercept or slope dropped and the other term refit."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or len(np.unique(x)) < 2 or not np.all(np.isfinite(y)) or np.any(y <= 0 if relative else y < 0):
        raise ValueError(f"fit_line needs two or more distinct x, each with a finite y > 0 (>= 0 unless "
                         f"relative); got x={x}, y={y}")
    w = 1.0 / y if relative else np.ones_like(y)
    (fixed, slope), *_ = np.linalg.lstsq(np.column_stack([w, x * w]), y * w, rcond=None)
    if not relative and fixed < 0:
        fixed, slope = 0.0, max(0.0, float(x @ y / (x @ x)))
    elif not relative and slope < 0:
        fixed, slope = float(y.mean()), 0.0
    return Line(float(fixed), float(slope))


@dataclass(frozen=True)
class Workload:
    """What the prediction needs to know of a model: parameters, multiply-adds per sample, and the
    bytes of each DDP bucket in the order DDP all-reduces them (the last layers' first)."""

    name: str
    n_params: int
    macs: int
    buckets: tuple[int, ...]

    @property
    def grad_bytes(self) -> int:
        return int(sum(self.buckets))


@dataclass(frozen=True)
class ComputeModel:
    """One rank's step, phase by phase: data and the optimizer against the batch and the parameters,
    forward and backward against the multiply-adds (batch x MACs per sample)."""

    data: Line
    forward: Line
    backward: Line
    optimizer: Line

    def phases(self, w: Workload, per_rank_batch: float) -> dict[str, float]:
        work = per_rank_batch * w.macs
        return {"data": float(self.data(per_rank_batch)), "forward": float(self.forward(work)),
                "backward": float(self.backward(work)), "optimizer": float(self.optimizer(w.n_params))}

    def seconds(self, w: Workload, per_rank_batch: float) -> float:
        return sum(self.phases(w, per_rank_batch).values())


def fit_compute(workloads: list[Workload], batches: list[int], phases: list[dict]) -> ComputeModel:
    """``ComputeModel`` from one-rank runs: ``phases[i]`` measured for ``workloads[i]`` at ``batches[i]``."""
    b = np.asarray(batches, dtype=float)
    work = b * np.array([w.macs for w in workloads], dtype=float)
    n = np.array([w.n_params for w in workloads], dtype=float)
    col = {k: [ph[k] for ph in phases] for k in PHASES}
    return ComputeModel(fit_line(b, col["data"]), fit_line(work, col["forward"]),
                        fit_line(work, col["backward"]), fit_line(n, col["optimizer"]))


@dataclass(frozen=True)
class Link:
    """The all_reduce on this machine: the ring model from chapter 4.2's fit (``ring_from_fit``); what a
    call inside a step costs beyond that once every rank has arrived (``per_call``); and how long a
    step waits for the last rank to arrive, against the step's compute (``wait``)."""

    step_latency: float
    seconds_per_byte: float
    per_call: float = 0.0
    wait: Line = Line(0.0, 0.0)

    def allreduce(self, nbytes: float, p: int) -> float:
        """One bucket's all_reduce in a training step (0 on one rank: nothing to send)."""
        if p == 1:
            return 0.0
        return float(ring_allreduce_time(nbytes, p, self.step_latency, self.seconds_per_byte)) + self.per_call


def bucket_exposed(buckets: tuple[int, ...], t_backward: float, calls: list[float]) -> float:
    """The all_reduce time still running when backward ends.

    Bucket k is ready once backward has produced its gradients: for a stack of Linear layers
    a layer's backward time goes with its weight bytes, so with the share of the gradient
    bytes up to bucket k. The calls run one after another, each once its bucket is ready.
    """
    total, done, end = float(sum(buckets)), 0.0, 0.0
    for nbytes, t in zip(buckets, calls):
        done += nbytes
        end = max(end, t_backward * done / total) + t
    return max(0.0, end - t_backward)


@dataclass(frozen=True)
class StepPrediction:
    """One DDP step on ``p`` ranks: each rank's compute, its all_reduce calls, the part of them
    backward did not hide, and the wait for the slower rank (seconds)."""

    p: int
    phases: dict = field(repr=False)
    compute: float
    comm: float
    exposed: float
    wait: float

    @property
    def step(self) -> float:
        return self.compute + self.exposed + self.wait


def predict_step(phases: dict[str, float], buckets: tuple[int, ...], p: int, link: Link,
                 contention: float = 1.0, overlap: bool = True) -> StepPrediction:
    """A DDP step from one rank's phases at this per-rank batch (measured, or ``ComputeModel.phases``).

    ``phases`` may be any split of the compute; only ``backward`` can hide communication
    (none given: nothing hides). ``overlap=False`` is a blocking all_reduce after backward.
    """
    whole("p", p)  # a NaN p passed `p < 1`, and was priced
    for m in buckets:
        at_least("each of buckets", m)
    slow = contention if p > 1 else 1.0
    ph = {k: v * slow for k, v in phases.items()}
    compute = sum(ph.values())
    calls = [link.allreduce(m, p) for m in buckets] if p > 1 else []
    exposed = bucket_exposed(buckets, ph.get("backward", 0.0), calls) if overlap and calls else sum(calls)
    wait = float(link.wait(compute)) if p > 1 else 0.0
    return StepPrediction(p, ph, compute, float(sum(calls)), float(exposed), wait)


def predict(w: Workload, global_batch: float, p: int, compute: ComputeModel, link: Link,
            contention: float = 1.0, overlap: bool = True) -> StepPrediction:
    """``predict_step`` for a workload at global batch G split over p ranks (G / p each)."""
    return predict_step(compute.phases(w, global_batch / p), w.buckets, p, link, contention, overlap)


def predicted_speedup(w: Workload, global_batch: float, p: int, compute: ComputeModel, link: Link,
                      contention: float = 1.0, overlap: bool = True) -> float:
    """Strong scaling S(p) = T_1(G) / T_p(G), both predicted."""
    one = predict(w, global_batch, 1, compute, link, contention, overlap).step
    return one / predict(w, global_batch, p, compute, link, contention, overlap).step


def article_step(t_one_rank: float, grad_bytes: float, p: int, latency: float, bandwidth: float) -> float:
    """The article's T = T_compute + M/B + L, read the usual way: the one-rank step split p ways, plus
    one all_reduce of every gradient byte as chapter 4.2's fit prices it."""
    whole("p", p), at_least("t_one_rank", t_one_rank), at_least("grad_bytes", grad_bytes)
    return t_one_rank / p + (grad_bytes / bandwidth + latency if p > 1 else 0.0)


def ddp_buckets(grad_bytes: int, first: int = 2**20, cap: int = 25 * 2**20) -> tuple[int, ...]:
    """DDP's buckets for a model whose layers are fine-grained: a first bucket of ``first`` bytes (DDP's
    1 MiB), then ``cap`` (``bucket_cap_mb`` = 25) at most each. Real buckets close at layer boundaries."""
    at_least("grad_bytes", grad_bytes), whole("first", first), whole("cap", cap)  # cap = 0 never ended
    out, left = [min(first, grad_bytes)], grad_bytes - min(first, grad_bytes)
    while left > 0:
        out.append(min(cap, left))
        left -= out[-1]
    return tuple(out)


def crossover(speedups: dict[int, float], target: float) -> int | None:
    """The smallest global batch at which S reaches ``target`` (None: it never does)."""
    return next((G for G in sorted(speedups) if speedups[G] >= target), None)

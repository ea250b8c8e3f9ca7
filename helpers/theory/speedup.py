"""Speedup (chapter 4.1): Amdahl's and Gustafson's laws, and their fits to measured speedups."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .checks import at_least


def _finite(fit: str, **arrays) -> list[np.ndarray]:
    """The arrays as floats, refused unless every value is a finite number."""
    out = []
    for name, values in arrays.items():
        a = np.asarray(values, dtype=float)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{fit} needs finite numbers; {name} has {a[~np.isfinite(a)][:3].tolist()}")
        out.append(a)
    return out


def amdahl(p, alpha):
    """Strong scaling: S(p) = 1 / (alpha + (1 - alpha) / p) for a fixed total workload.

    alpha is the serial fraction of the one-device run; the ceiling as p grows is 1 / alpha.
    """
    p = np.asarray(at_least("p", p, 1), dtype=float)
    return 1.0 / (alpha + (1.0 - alpha) / p)


def gustafson(p, alpha_p):
    """Weak scaling (Gustafson 1988): S(p) = p - alpha_p (p - 1), the work growing with p.

    alpha_p is the serial fraction of the *p-device* run's time. S compares that run
    with one device doing the same, p times larger, work.
    """
    p = np.asarray(at_least("p", p, 1), dtype=float)
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
    p, speedup = _finite("fit_amdahl", p=p, speedup=speedup)
    if p.shape != speedup.shape:
        raise ValueError(f"fit_amdahl needs one speedup per p: got {p.size} p values and "
                         f"{speedup.size} speedups")
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
    """Amdahl's law in seconds: a step on p ranks takes ``serial[p] + contention[p] * per_sample * b``.

    ``serial[p]``: what every step costs whatever its batch (optimizer, all_reduce,
    Python), one value per rank count because communication grows with p.
    ``per_sample``: the seconds one rank alone spends per sample (data, forward, backward).
    ``contention[p]``: how much slower each of p ranks computes side by side than one alone,
    measured, not fitted (1 where it is not given: each rank on an idle core of its own).
    """

    serial: dict
    per_sample: float
    contention: dict = field(default_factory=dict)

    def seconds(self, p: int, per_rank_batch: float) -> float:
        return self.serial[p] + self.contention.get(p, 1.0) * self.per_sample * per_rank_batch

    def speedup(self, p: int, global_batch: int) -> float:
        """Strong scaling at this global batch: one rank against p ranks of global_batch / p each."""
        return self.seconds(1, global_batch) / self.seconds(p, global_batch / p)

    def alpha(self, p: int, global_batch: int) -> float:
        """The Amdahl alpha this model implies for a p-rank run at this global batch."""
        return float(alpha_from_speedup(p, self.speedup(p, global_batch)))


def fit_step_model(p, per_rank_batch, seconds, contention: dict | None = None) -> StepModel:
    """Least squares for ``StepModel`` over measured step times (one row per p, b measurement), with
    each p's measured ``contention`` (none given: 1) scaling its per-sample time."""
    p, b, t = _finite("fit_step_model", p=p, per_rank_batch=per_rank_batch, seconds=seconds)
    contention = dict(contention or {})
    if any(not (c > 0 and math.isfinite(c)) for c in contention.values()):
        raise ValueError(f"fit_step_model: every contention must be a positive number, got {contention}")
    ranks = sorted({int(v) for v in p})
    k = np.array([contention.get(int(v), 1.0) for v in p])
    design = np.column_stack([(p == r).astype(float) for r in ranks] + [b * k])
    if np.linalg.matrix_rank(design) < design.shape[1]:
        raise ValueError("fit_step_model needs, at some p, two or more different per-rank batches: "
                         "with one batch per p, the serial time and the time per sample cannot be told apart")
    coef, *_ = np.linalg.lstsq(design, t, rcond=None)
    return StepModel({r: float(c) for r, c in zip(ranks, coef[:-1])}, float(coef[-1]), contention)

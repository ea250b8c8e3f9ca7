"""Mixture of experts (chapter 8.3): capacity and dropped tokens, the load-balancing loss, the
imbalance random routing would give, and what expert parallelism's all_to_all sends and costs.

Symbols: E experts, k of them per token, T tokens in a group (routed and cut to capacity
together), capacity factor c, n ranks in the expert-parallel group, h the hidden width.
"""
from __future__ import annotations

import math

import numpy as np

from .checks import at_least, whole, within


def expert_capacity(tokens: int, experts: int, k: int = 1, capacity_factor: float = 1.0) -> int:
    """Slots per expert: ceil(c * T * k / E). Switch Transformer's "expert capacity" (Fedus et al.
    2021, Sec. 2.2: tokens per batch / experts * capacity factor), with k slots a token (GShard)."""
    whole("tokens", tokens), whole("experts", experts), whole("k", k)
    at_least("capacity_factor", capacity_factor, 1e-9)
    if k > experts:
        raise ValueError(f"k ({k}) cannot exceed the number of experts ({experts})")
    return math.ceil(capacity_factor * tokens * k / experts - 1e-9)  # 1.25 * 512 * 2 / 4 is 320, not 321


def dropped_tokens(loads, capacity: int) -> int:
    """Slots past capacity, summed over experts: sum_i max(0, load_i - C). ``loads`` may be an
    array of any shape whose last axis is the experts (a step's layers, many steps): all are summed."""
    loads = np.asarray(loads)
    whole("loads", loads, 0), whole("capacity", capacity, 0)
    return int(np.maximum(0, loads - capacity).sum())


def expert_imbalance(loads) -> np.ndarray:
    """The busiest expert's load over the mean load, along the last axis: 1 is perfect balance,
    E is every slot on one expert. A step's time on expert-parallel ranks follows the busiest."""
    loads = np.asarray(loads, dtype=float)
    whole("loads", loads, 0)
    if np.any(loads.sum(-1) == 0):
        raise ValueError("imbalance needs some load in every group")
    return loads.max(-1) / loads.mean(-1)


def load_balancing_loss(fractions, mean_probs, alpha: float = 1.0) -> float:
    """Switch Transformer's auxiliary loss (Fedus et al. 2021, Eq. 4): alpha * E * sum_i f_i P_i,
    f_i the fraction of tokens routed to expert i, P_i the router's mean probability for it.
    Uniform routing gives alpha; everything on one expert with probability 1 gives alpha * E."""
    f, p = np.asarray(fractions, float), np.asarray(mean_probs, float)
    if f.ndim != 1 or f.shape != p.shape:
        raise ValueError(f"fractions and mean_probs must be two vectors of one length, got {f.shape} and {p.shape}")
    within("fractions", f, 0, 1), within("mean_probs", p, 0, 1)
    for name, v in (("fractions", f), ("mean_probs", p)):
        if abs(v.sum() - 1) > 1e-6:
            raise ValueError(f"{name} must sum to 1 over the experts, got {v.sum():.6f}")
    return float(alpha * len(f) * np.dot(f, p))


def routing_aux_loss(choices, probs, alpha: float = 1.0) -> float:
    """``load_balancing_loss`` of one routing: ``choices`` (T, k) expert ids, ``probs`` (T, E)."""
    choices, probs = np.asarray(choices), np.asarray(probs, float)
    if choices.ndim != 2 or probs.ndim != 2 or len(choices) != len(probs):
        raise ValueError("choices must be (tokens, k) and probs (tokens, experts)")
    below_e = probs.shape[1]
    whole("choices", choices, 0)
    if np.any(choices >= below_e):
        raise ValueError(f"choices must be expert ids 0..{below_e - 1}")
    loads = np.bincount(choices.ravel(), minlength=below_e)
    return load_balancing_loss(loads / loads.sum(), probs.mean(0), alpha)


def binomial_overflow(trials: int, p: float, capacity: int) -> float:
    """E[max(0, X - C)] for X ~ Binomial(trials, p): one expert's expected overflow."""
    whole("trials", trials, 0), within("p", p, 0, 1), whole("capacity", capacity, 0)
    if p in (0.0, 1.0):  # X is trials * p for sure
        return float(max(0.0, trials * p - capacity))
    x = np.arange(capacity + 1, trials + 1)
    log_pmf = np.array([math.lgamma(trials + 1) - math.lgamma(i + 1) - math.lgamma(trials - i + 1)
                        for i in x], float) + x * math.log(p) + (trials - x) * math.log1p(-p)
    return float(np.sum((x - capacity) * np.exp(log_pmf)))


def expected_dropped_fraction(tokens: int, experts: int, k: int, capacity_factor: float) -> float:
    """The fraction of the T*k slots a router that picks k distinct experts uniformly at random would
    drop: each expert's load is Binomial(T, k/E), so E * E[max(0, X - C)] / (T k). The floor any
    real router is measured against: it is what chance alone overflows."""
    c = expert_capacity(tokens, experts, k, capacity_factor)
    return experts * binomial_overflow(tokens, k / experts, c) / (tokens * k)


def ep_message_bytes(rows: int, hidden: int, value_bytes: int = 4) -> int:
    """One all_to_all's message on one rank: the rows (token slots kept) it dispatches, h values each."""
    whole("rows", rows, 0), whole("hidden", hidden), whole("value_bytes", value_bytes)
    return rows * hidden * value_bytes


def alltoall_sent_fraction(n: int) -> float:
    """What leaves a rank in an all_to_all of M bytes when its rows are spread evenly: (n - 1) / n
    of them, the 1/n for itself stays; nccl-tests' bus-bandwidth factor for all-to-all."""
    whole("n", n)
    return (n - 1) / n


def alltoall_time(message_bytes, n: int, step_latency: float, seconds_per_byte: float):
    """All_to_all as n - 1 exchanges of M/n bytes: T = (n - 1) l + (n - 1)/n * M * beta, with the link's
    l and beta (``theory.ring_from_fit`` reads them from an all_reduce fit on the same links)."""
    whole("n", n), at_least("message_bytes", message_bytes)
    at_least("step_latency", step_latency), at_least("seconds_per_byte", seconds_per_byte)
    m = np.asarray(message_bytes, dtype=float)
    return (n - 1) * step_latency + (n - 1) / n * m * seconds_per_byte


def moe_alltoalls(layers: int) -> tuple[int, int]:
    """All_to_alls per training step of a model with ``layers`` MoE layers: (forward, backward). Each
    layer dispatches and combines going forward, and sends both gradients back going backward."""
    whole("layers", layers)
    return 2 * layers, 2 * layers


def moe_params(dense: int, mlp: int, layers: int, experts: int, k: int, hidden: int) -> tuple[int, int]:
    """(held, used by one token): E experts in each of ``layers`` MLP slots, and a router of h*E
    weights, turn a ``dense`` model whose MLPs have ``mlp`` parameters each into a bigger one of
    which each token still runs only k experts."""
    for name, v in (("dense", dense), ("mlp", mlp), ("layers", layers), ("experts", experts), ("k", k),
                    ("hidden", hidden)):
        whole(name, v)
    if k > experts or mlp * layers > dense:
        raise ValueError(f"need k <= experts and the MLPs within the model; got k={k}, experts={experts}, "
                         f"{layers} MLPs of {mlp} in {dense}")
    router = hidden * experts
    return dense + layers * ((experts - 1) * mlp + router), dense + layers * ((k - 1) * mlp + router)

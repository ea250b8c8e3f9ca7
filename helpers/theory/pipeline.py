"""Pipelines and model parallelism (chapters 3.2, 5.3, 6.1): idle time, and what micro-batches buy."""
from __future__ import annotations

import numpy as np

from .checks import at_least, below, one_of, whole


def naive_mp_utilization(stage_work):
    """Naive model parallelism runs one stage at a time, so stage s is busy w_s / sum(w).

    ``stage_work``: each stage's compute time (or FLOPs). With p equal stages: 1/p each.
    """
    w = np.asarray(at_least("stage_work", stage_work), dtype=float)
    if w.ndim != 1 or w.sum() <= 0:
        raise ValueError(f"stage_work must list each stage's work, some of it above 0; got {stage_work!r}")
    return w / w.sum()


def bubble_fraction(p, m):
    """GPipe's idle fraction of a step with p equal stages and m micro-batches: (p-1)/(m+p-1).

    Each stage is busy for m slots out of the m + p - 1 that the fill-and-drain takes
    (Huang et al., GPipe). m = 1 is naive model parallelism: (p-1)/p idle.
    """
    whole("p", p), whole("m", m)
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
    whole("p", p), whole("m", m)
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return p * m / (m + p - 1)


def micro_batches_for_bubble(p: int, max_bubble: float) -> int:
    """The fewest micro-batches that keep the bubble at or below ``max_bubble``: m >= (p-1)(1-b)/b."""
    whole("p", p)
    if not 0 < max_bubble < 1:
        raise ValueError(f"max_bubble must be in (0, 1), got {max_bubble}")
    m = max(1, int(np.ceil((p - 1) * (1 - max_bubble) / max_bubble - 1e-9)))
    return m


def interleaved_bubble_fraction(p, m, v):
    """Interleaved 1F1B's idle fraction: (p-1) / (v*m + p-1), with v stages (chunks) per device.

    Each device's work is cut into v chunks, so a fill-and-drain slot is a chunk, v times
    shorter, while a step still takes m * v of them (Narayanan et al., Megatron-LM).
    v = 1 is GPipe's and 1F1B's (p-1)/(m+p-1).
    """
    whole("p", p), whole("m", m), whole("v", v)
    p, m, v = (np.asarray(a, dtype=float) for a in (p, m, v))
    return (p - 1) / (v * m + p - 1)


def peak_in_flight(schedule: str, p: int, m: int, stage: int) -> int:
    """Most micro-batches whose activations stage ``stage`` (0-based) holds at once.

    GPipe runs every forward before any backward: all m. 1F1B runs p - stage forwards, then
    alternates one backward and one forward, so stage s holds at most p - s (and never more than m).
    """
    whole("p", p), whole("m", m), below("stage", stage, p)
    if schedule == "GPipe":
        return m
    if schedule == "1F1B":
        return min(m, p - stage)
    raise ValueError(f"no closed form here for {schedule!r}; GPipe and 1F1B have one")


# Slots per action and chunk: a forward is one, a full backward two (the input's and the weights'
# gradients, each about a forward), and a zero-bubble schedule's two halves one each.
SLOTS = {"F": 1, "B": 2, "I": 1, "W": 1}


def replay_idle(orders, chunks, durations=None):
    """Each rank's idle fraction when its actions run in the given order on equal devices.

    ``orders``: per rank, its actions ``(kind, (stage, micro_batch))`` in the order it ran them.
    ``chunks``: per stage, how many equal model chunks it holds; an action takes
    ``SLOTS[kind] * chunks[stage]`` slots. Messages are free; an action starts when its rank is free
    and what it needs is done: F(s, i) needs F(s-1, i), B or I(s, i) needs B or I(s+1, i).
    The fraction counts slots, not seconds, so no timing noise (or ranks sharing cores) moves it.

    ``durations``: per rank, each action's own length instead (seconds measured in a run, in
    ``orders``' order). Each action then starts as early as its rank's order and its inputs allow;
    a real run met those same constraints and more (messages, Python), so no rank of it can have
    been idle for a smaller share of its step than this replay gives.
    """
    for c in chunks:
        whole("each of chunks", c)
    for o in orders:
        for kind, (stage, _) in o:
            one_of("an action's kind", kind, SLOTS), below("an action's stage", stage, len(chunks))
    if durations is None:
        durations = [[SLOTS[k] * chunks[s] for k, (s, _) in o] for o in orders]
    if [len(d) for d in durations] != [len(o) for o in orders]:
        raise ValueError("durations must give one length for each action of each rank's order")
    last, done, free = len(chunks) - 1, {}, [0.0] * len(orders)
    pending = [list(zip(o, d)) for o, d in zip(orders, durations)]
    while any(pending):
        moved = False
        for rank, todo in enumerate(pending):
            while todo:
                (kind, (stage, mb)), length = todo[0]
                need = (["F" if kind == "F" else "G", stage - 1 if kind == "F" else stage + 1, mb]
                        if (kind == "F" and stage > 0) or (kind in "BI" and stage < last) else None)
                if need and (need[0], need[1], mb) not in done:
                    break  # waits for another rank's action: try the others first
                start = max(free[rank], done.get((need[0], need[1], mb), 0) if need else 0)
                free[rank] = start + length
                done[("F" if kind == "F" else "G" if kind in "BI" else "W", stage, mb)] = free[rank]
                todo.pop(0)
                moved = True
        if not moved:
            raise ValueError("the orders deadlock: some action waits for one that never runs")
    span = max(free)
    return [1 - sum(d) / span for d in durations]

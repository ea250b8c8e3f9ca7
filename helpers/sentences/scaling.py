"""Chapters 4.1-4.3: where the sweeps' ranks ran, and the claims each machine can hold."""
from __future__ import annotations

from .. import plans
from ..machine import Machine
from .common import _runs, _plural_gpus


def speedup(m: Machine) -> dict[str, str]:
    """4.1's claims that hold only where every rank of p = 2 has a core (or GPU) of its own."""
    ranks = plans.speedup_ranks(m)
    if ranks.shared:
        shrink, weak = ranks.shared_bounds
        if ranks.hyperthreads:
            turns = ("the two ranks run on the two hardware threads of this machine's one core, which "
                     "share its arithmetic units")
        else:
            turns = "the two ranks take turns on this machine's one core"
        return {"shrink_claim": f"(the time before that division asserted above {shrink}; not asserted below 0.8, "
                                "as it is where each rank "
                                f"has a core of its own: {turns}, and each computes at full speed only while "
                                "the other waits in its all_reduce)",
                "weak_claim": f"(the throughput before that division asserted below {weak} times one rank's: {turns})",
                "past_claim": "This run had one core, so no point past it was planned."}
    past = (f"Past the {ranks.units} {ranks.device}s the efficiency falls further (asserted), for the "
            "reason above." if ranks.over else
            f"This run planned no point past its {ranks.units} {ranks.device}s.")
    if ranks.threads:
        past += (f" Its {ranks.threads} logical CPUs are {ranks.units} cores with {ranks.threads // ranks.units} "
                 "hardware threads each; ranks on a core's second thread would share its arithmetic units, "
                 "so the sweep counts one rank per core.")
    return {"shrink_claim": "(asserted between 0.4 and 0.8; not quite 0.5, because two busy cores share "
                            "one memory system)" if ranks.backend == "gloo" else "(asserted between 0.4 and 0.8)",
            "weak_claim": "(asserted higher)", "past_claim": past}


def fit_bounds(m: Machine, others: float = 0.0) -> str:
    """4.2's bounds on its fit, in words, once its sweep has run beside ``others`` cores' worth of other
    processes' work (``machine.LoadWatch``): looser, and why, where its two ranks took turns."""
    ranks = plans.communication_ranks(m)
    r2, held = plans.allreduce_fit_bounds(m, others)
    said = f"at least {r2}, and every held-out size within {held:.0%}"
    turns = ("in the kernel's time slices of a few ms, and a call that outlasts one waits for the next, "
             "so the line bends at the large sizes")
    if ranks.shared and not ranks.hyperthreads:
        return f"{said}: the two ranks took turns on this machine's one core, {turns}"
    if (r2, held) != plans.allreduce_fit_bounds(m):
        return (f"{said}: other processes kept {others:.1f} of this machine's {m.cores} cores busy meanwhile, "
                f"so the two ranks took turns with them, {turns}")
    return said


def sweeps_pooled(sweep: dict) -> str:
    """4.2's fit, said with what it rests on: one sweep, or the sweeps ``analysis.fit_until_clear`` pooled."""
    lo, hi = min(sweep["repeats"]), max(sweep["repeats"])
    if sweep.get("sweeps", 1) == 1:
        return f"The fit rests on one sweep: {lo} to {hi} repetitions of each size."
    return (f"The first sweep's line fell short of that R², so {sweep['sweeps'] - 1} more ran and the fit "
            f"pools their repetitions, {lo} to {hi} of each size: a slow spell of the machine weighs less in the "
            "median of more repetitions, and the line of a quiet machine does not move.")


def communication(m: Machine) -> dict[str, str]:
    """4.2: its sweep's ranks are GPUs over NCCL where there are two, else CPU cores over gloo; the copy
    ceiling is measured on rank 0's device, and the ring model is gloo's algorithm, not NCCL's."""
    ranks, sizes = plans.communication_ranks(m), plans.allreduce_sizes(m)
    largest = f"{sizes[-1] / 2**30:.0f} GB" if sizes[-1] >= 2**30 else f"{sizes[-1] >> 20} MB"
    bound = f"{plans.ring_model_bound(ranks.backend):.0%}"
    if ranks.backend == "nccl":
        return {"cm_sizes": f"up to {largest} here, where the ranks are GPUs: over NVLink a message is "
                            "bandwidth-bound only from some hundreds of MB",
                "cm_copier": "This machine's first GPU copies its own memory",
                "cm_transport": ("NCCL moves the bytes between the GPUs' memories over NVLink or PCIe, "
                                 "with kernels that reduce as they go, so the bound is the links' speed"),
                "cm_ring_bound": (f"within {bound}: NCCL picks a ring, a tree or NVLink SHARP by size "
                                  "and topology, so the ring is a model of its all_reduce, not its algorithm")}
    return {"cm_sizes": f"up to {largest} here, where the ranks are CPU cores: far past where gloo's "
                        "loopback turns bandwidth-bound",
            "cm_copier": "One core copies memory",
            "cm_transport": ("gloo sends through the kernel's TCP loopback: every byte is copied into a "
                             "socket buffer and out again, the reduction reads two buffers and writes one, "
                             "and both ranks' copies share one memory system"),
            "cm_ring_bound": f"within {bound}: gloo's all_reduce is this ring"}


def prediction(m: Machine) -> dict[str, str]:
    """4.3 runs 2 ranks on CPU cores over gloo on every machine; its compute-bound job can near S(2) = 2
    only where each of them has a physical core of its own (``plans.good_regime_claim``). The chapter
    asserts no bound on that S(2) (three rounds of one timing cannot hold one; ``bench/regimes.py``
    records it at seven), only that it beats the communication-bound job's round by round, by a margin
    over the rounds' scatter (``analysis.margins``)."""
    if plans.good_regime_claim(m):
        claim = ("Each rank had a physical core of its own here, so compute split over the two can take nearly "
                 "half the time")
    elif m.cores > 1:
        claim = ("The two ranks shared this machine's one core here, through its two hardware threads, so even "
                 "this job's compute could not take half the time")
    else:
        claim = ("The two ranks took turns on this machine's one core here, so even this job's compute could not "
                 "take half the time")
    gpus = (f"This machine has {_plural_gpus(m)}, but this chapter's ranks run on CPU cores over gloo, as on "
            "every machine" if m.gpus else "This chapter's ranks run on CPU cores over gloo, as on every machine")
    why = (f"{gpus}: it studies CPU ranks (one thread each, two of them computing side by side on one "
           "memory system, and gloo's calls waking between steps), and chapter 5.1 predicts its own gloo "
           "run from the fits this chapter keeps")
    return {"good_claim": claim, "pred_where_why": why, **_runs(m, "04_3_prediction")}

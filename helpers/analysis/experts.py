"""Mixture-of-experts runs (chapter 8.3) -> the numbers the chapter states: the balance of each
training run, the expert-parallel runs' gaps to one process and their bytes, and all_to_all's fit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import theory
from ..training import median
from .communication import AllreduceFit, fit_allreduce


def expert_balance(train: dict, alpha: float, capacity_factors=(1.0, 1.25, 1.5, 2.0), ranks: int = 2) -> dict:
    """One run of ``experts.train``, judged on its second half (the router has learnt by then):
    the mean imbalance (busiest expert over the mean, per layer and step), the same for ``ranks``
    expert-parallel ranks holding E/ranks experts each, the slots dropped at the run's own capacity,
    and what the same routings would drop at other capacity factors."""
    run = train["runs"][alpha]
    loads, counts = np.asarray(run["loads"]), np.asarray(run["counts"])  # (steps, layers, experts)
    if loads.shape[-1] % ranks:
        raise ValueError(f"{loads.shape[-1]} experts do not split over {ranks} ranks evenly")
    half = loads[len(loads) // 2:]
    per_rank = half.reshape(*half.shape[:-1], ranks, -1).sum(-1)
    slots = half.sum()
    tokens, experts, k = train["tokens"], train["experts"], train["k"]
    what_if = {c: theory.dropped_tokens(half, theory.expert_capacity(tokens, experts, k, c)) / slots
               for c in capacity_factors}
    return {"alpha": alpha, "imbalance": float(theory.expert_imbalance(half).mean()),
            "rank_imbalance": float(theory.expert_imbalance(per_rank).mean()), "ranks": ranks,
            "first_imbalance": float(theory.expert_imbalance(loads[0]).mean()),
            "dropped": float((half - np.asarray(counts)[len(loads) // 2:]).sum() / slots),
            "what_if": what_if, "first_loss": run["losses"][0], "last_loss": float(np.mean(run["losses"][-5:])),
            "last_loads": loads[-1].tolist(), "imbalance_by_step": theory.expert_imbalance(loads).mean(-1).tolist()}


def uniform_dropped(train: dict, capacity_factors) -> dict[float, float]:
    """What chance alone drops at each capacity factor: a router choosing uniformly at random."""
    return {c: theory.expected_dropped_fraction(train["tokens"], train["experts"], train["k"], c)
            for c in capacity_factors}


def ep_gaps(ranks: list[dict]) -> dict[str, float]:
    """``experts.ep_equality`` -> the largest difference from one process, over ranks, of each kind."""
    return {key: max(r["gaps"][key] for r in ranks) for key in ranks[0]["gaps"]}


def ep_padding(ranks: list[dict], capacity_factor: float) -> dict:
    """``experts.ep_equality`` run dropless, against the same routing padded to a capacity, as a
    runtime of static shapes must: per layer, the tokens each rank's E/n experts took; the busiest
    rank's (the largest over layers) and the mean rank's; and the slots every rank computes when
    each of its experts takes C from each of the n ranks, E/n * n * C = E * C, however few came."""
    n, tokens, experts, k = (ranks[0][key] for key in ("n", "tokens", "experts", "k"))
    loads = np.asarray(ranks[0]["ref_loads"])           # (layers, experts): whole batch, before any cut
    took = sum(np.asarray(r["counts"]) for r in ranks)  # what the experts received from every rank
    per_rank = took.reshape(len(took), n, experts // n).sum(-1)
    capacity = theory.expert_capacity(tokens, experts, k, capacity_factor)
    return {"dropped": int((loads - took).sum()), "busiest": int(per_rank.max()), "mean": float(per_rank.mean()),
            "capacity": capacity, "padded": experts * capacity}


def dispatch_bytes(rank: dict) -> dict:
    """One rank's forward dispatches (every other forward all_to_all; the others bring the outputs
    back): the message M it handed all_to_all, what left for other ranks, and the fraction that left."""
    dispatches = [e for e in rank["log"] if e[0] == "forward"][::2]
    message = sum(theory.ep_message_bytes(sum(send), rank["hidden"]) for _, send, _ in dispatches)
    left = sum(theory.ep_message_bytes(sum(s for j, s in enumerate(send) if j != rank["rank"]), rank["hidden"])
               for _, send, _ in dispatches)
    counted = sum(sum(send) * row for _, send, row in dispatches)
    return {"calls": len(dispatches), "message": message, "left": left, "fraction": left / message,
            "counted": counted, "all_calls": {ph: sum(1 for e in rank["log"] if e[0] == ph)
                                              for ph in ("forward", "backward")}}


@dataclass(frozen=True)
class AlltoallFit:
    """All_to_all and all_reduce timed together (``experts.alltoall_sweep``), each fitted as 4.2 fits
    all_reduce, and all_to_all's time predicted from the all_reduce's ring by ``theory.alltoall_time``."""

    n: int
    alltoall: AllreduceFit
    allreduce: AllreduceFit
    predicted: np.ndarray

    @property
    def errors(self) -> np.ndarray:
        """(measured - predicted) / predicted at the all_to_all's bandwidth-bound sizes."""
        bw = self.alltoall.bandwidth_bound
        return (self.alltoall.seconds[bw] - self.predicted[bw]) / self.predicted[bw]

    @property
    def miss(self) -> float:
        """The median of ``errors``' sizes: how far the formula is from a bandwidth-bound all_to_all."""
        return median(np.abs(self.errors))

    @property
    def busbw(self) -> dict[str, float]:
        """Each fit's bandwidth as nccl-tests' bus bandwidth: B times the collective's factor."""
        return {"all_to_all": self.alltoall.fit.bandwidth * theory.BUS_FACTOR["all_to_all"](self.n),
                "all_reduce": self.allreduce.fit.bandwidth * theory.BUS_FACTOR["all_reduce"](self.n)}

    @property
    def large_ratio(self) -> float:
        """Median all_to_all time over all_reduce time at the three largest messages (ring: 1/2 at n = 2)."""
        return median(self.alltoall.seconds[-3:] / self.allreduce.seconds[-3:])


def fit_alltoall(sweeps: dict, n: int) -> AlltoallFit:
    """Rank 0's ``alltoall_sweep`` result -> ``AlltoallFit``."""
    a2a, ar = sweeps["all_to_all"], sweeps["all_reduce"]
    if a2a["sizes"] != ar["sizes"]:
        raise ValueError("the two sweeps must time the same sizes")
    fits = fit_allreduce(a2a["sizes"], a2a["seconds"]), fit_allreduce(ar["sizes"], ar["seconds"])
    step_latency, seconds_per_byte = theory.ring_from_fit(fits[1].fit, n)
    return AlltoallFit(n, *fits, theory.alltoall_time(fits[0].sizes, n, step_latency, seconds_per_byte))

"""The sweeps over p of chapters 4.1-4.3: the rank counts, sizes and bounds each machine gets."""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import Machine
from ..theory.checks import at_least


@dataclass(frozen=True)
class Ranks:
    """The rank counts of a sweep, and what its ranks run on.

    ``ok``: counts at which every rank has a device of its own (a GPU under NCCL, else a
    physical core under gloo); ``over``: one count past the logical CPUs, run where it teaches
    what oversubscription does, else None; ``shared``: on a machine with one core the sweep
    still runs 2 ranks, which then share it: taking turns (one logical CPU), or on its two
    hardware threads (``hyperthreads``), which share its arithmetic units (the chapter says which).
    """

    backend: str
    units: int
    ok: tuple[int, ...]
    over: int | None
    shared: bool = False
    hyperthreads: bool = False
    threads: int = 0  # logical CPUs, where a gloo sweep's cores have more than one hardware thread each

    @property
    def ps(self) -> tuple[int, ...]:
        return self.ok + ((self.over,) if self.over else ())

    @property
    def device(self) -> str:
        return "GPU" if self.backend == "nccl" else "CPU core"

    @property
    def shared_bounds(self) -> tuple[float, float]:
        """4.1's bounds where 2 ranks share one core: the least its per-sample time at p = 2 may be of
        p = 1's, and the most throughput two ranks may give over one. The first is the floor of every
        machine: each rank computes fast whenever the other waits in its all_reduce, so nothing caps
        it (one core here: 0.68). Taking turns gives about one rank's throughput; a core's two hardware
        threads give some of its idle units back (about 1.2x, here up to 1.5x)."""
        return (0.4, 1.5) if self.hyperthreads else (0.4, 1.25)

    def describe(self) -> str:
        """One sentence for the prose: where the ranks of this sweep run."""
        if not self.shared:
            where = f"one {self.device} each, over {self.backend}"
        elif self.hyperthreads:
            where = f"2 ranks on the two hardware threads of this machine's single core, over {self.backend}"
        else:
            where = f"2 ranks sharing this machine's single core, over {self.backend}"
        units = f"{self.units} {self.device}s" + (f" ({self.threads} hardware threads)" if self.threads else "")
        past = f", and p = {self.over} is past the {units}" if self.over else ""
        return f"p = {', '.join(map(str, self.ok))} ran with {where}{past}"


def rank_units(m: Machine) -> tuple[str, int]:
    """NCCL with one GPU per rank where there are two GPUs or more; else gloo, one physical core per rank.

    A single GPU cannot give two ranks a device each, so a sweep over p runs on the CPU there; and two
    ranks on one core's two hardware threads share its arithmetic units, so a core counts once.
    """
    return ("nccl", m.n_gpus) if m.n_gpus >= 2 else ("gloo", m.whole_cores)


def _ranks(m: Machine, ok: tuple[int, ...], shared_ok: tuple[int, ...], over_below: int) -> Ranks:
    """``ok`` up to the units; one point at twice the logical CPUs where they are at most ``over_below``
    (true oversubscription: ranks take turns; a point on hardware threads would be neither)."""
    backend, units = rank_units(m)
    threads = m.cores if backend == "gloo" and m.cores > units else 0
    if units == 1:
        return Ranks(backend, units, shared_ok, None, shared=True, hyperthreads=m.cores > 1, threads=threads)
    over = 2 * m.cores if backend == "gloo" and m.cores <= over_below else None
    return Ranks(backend, units, tuple(p for p in ok if p <= units), over, threads=threads)


def speedup_ranks(m: Machine, most: int = 16) -> Ranks:
    """Chapter 4.1: p = 1, 2, 4, ... up to the devices (16 at most), and on a CPU with 8 logical CPUs or
    fewer one point at twice them. A 1-core machine still runs p = 2, sharing its core."""
    return _ranks(m, tuple(2**k for k in range(5) if 2**k <= most), (1, 2), 8)


def communication_ranks(m: Machine) -> Ranks:
    """Chapter 4.2: all_reduce sweeps at p = 2, 4, 8 up to the devices, and on a CPU with 4 logical CPUs
    or fewer one sweep at twice them. A 1-core machine still runs p = 2, sharing its core."""
    return _ranks(m, (2, 4, 8), (2,), 4)


# Chapter 4.2's message sizes: 4 KB and doubling. Over gloo 64 MB is well past n_1/2 (tens of KB);
# over NCCL on NVLink (about 50 us and hundreds of GB/s) n_1/2 is about 10-20 MB, and a fit needs
# sizes past 8 n_1/2, so GPUs go up to 2 GB, with every size's tensor held at once by the sweep (about
# twice the largest) kept to an eighth of the smallest GPU's memory.
CPU_LARGEST, GPU_LARGEST = 64 * 2**20, 2 * 2**30


def allreduce_sizes(m: Machine) -> list[int]:
    """The sizes 4.2 sweeps on ``m``, in bytes: to 64 MB over gloo, to 2 GB (memory allowing) over NCCL."""
    largest = CPU_LARGEST
    if rank_units(m)[0] == "nccl" and m.gpu_memory:
        largest = max(CPU_LARGEST, min(GPU_LARGEST, m.gpu_memory // 16))
    return [4096 * 2**k for k in range(30) if 4096 * 2**k <= largest]


def alltoall_sizes(m: Machine) -> list[int]:
    """The sizes 8.3 times all_to_all and all_reduce at on 2 ranks: 4.2's. Over gloo L * B is about
    0.5 MB on this book's machine and a size is bandwidth-bound from 8 L * B, so a sweep cut at 16 MB
    kept two or three such sizes and its median miss rested on them; to 64 MB it keeps four or five,
    for a second more of the chapter. Over NCCL, where L * B is megabytes, to 2 GB as 4.2 goes."""
    return allreduce_sizes(m)


def crowded(m: Machine, ranks: int, others: float) -> bool:
    """Whether ``ranks`` CPU ranks, beside ``others`` cores' worth of other processes' work
    (``machine.LoadWatch``), meet that work on their cores for half a core or more: they then take
    turns with it in the kernel's time slices, as two ranks on one core take turns with each other."""
    at_least("others", others)
    return ranks + others > m.cores + 0.5


def allreduce_fit_bounds(m: Machine, others: float = 0.0) -> tuple[float, float]:
    """4.2's bounds on its p = 2 fit: the least R^2 over the bandwidth-bound sizes, and the most a held-out
    size may miss. Where the two ranks take turns on one core (one logical CPU), the kernel switches
    between them in slices of a few ms and a call that outlasts one waits for the next, so the line
    bends there: on one core of this book's machine, R^2 0.90-0.93 and held-out misses of 12-27%.
    Ranks over gloo ``crowded`` by other processes (``others``) take turns the same way: beside one
    busy process on 2 cores, R^2 0.955 once."""
    r = communication_ranks(m)
    turns = r.shared and not r.hyperthreads or r.backend == "gloo" and crowded(m, 2, others)
    return (0.85, 0.35) if turns else (0.98, 0.20)


def ring_model_bound(backend: str) -> float:
    """How close 4.2 asserts the ring model (fitted at p = 2) comes to other p's bandwidth-bound sizes:
    gloo's all_reduce is that ring; NCCL picks a ring, a tree or NVLink SHARP by size and topology,
    so there the ring is a model of it, not its algorithm."""
    return 0.20 if backend == "gloo" else 0.50


def good_regime_claim(m: Machine) -> bool:
    """Whether 4.3's compute-bound job (CPU ranks over gloo on every machine) can near S(2) = 2: only where
    each of its 2 ranks has a physical core of its own. The chapter says so; ``bench/regimes.py`` holds
    the bound S(2) > 1.5 there, over seven rounds (three, in a chapter, cannot hold a timing bound)."""
    return m.whole_cores >= 2


def contention_ceiling(m: Machine, others: float = 0.0) -> float:
    """The most 4.3 asserts two ranks computing side by side slow each other: two cores share only the
    memory system; on one core the ranks take turns or split its units, each about twice as slow.

    ``others``: cores' worth of CPU that other processes took meanwhile (``machine.LoadWatch``). Beside
    them, one rank alone gets min(1, cores / (1 + others)) of a core and each of two ranks
    min(1, cores / (2 + others)): on 2 cores beside one busy process, 1 against 2/3, so the ceiling
    grows by that ratio over the quiet machine's (1.5 times, there)."""
    at_least("others", others)
    def share(ranks: int, o: float) -> float:
        return min(1.0, m.cores / (ranks + o))
    crowding = (share(1, others) / share(2, others)) / (share(1, 0.0) / share(2, 0.0))
    return (2.0 if m.whole_cores >= 2 else 3.0) * max(1.0, crowding)

"""What a chapter launches, planned from the machine's facts alone.

A plan reads a ``Machine`` and nothing else, so a unit test can plan for every
machine a reader brings (``PROFILES``) while the real runs use this one::

    ranks = plans.speedup_ranks(machine.this())
    helpers.launch(..., nprocs=max(ranks.ps), backend=ranks.backend)
"""
from __future__ import annotations

from dataclasses import dataclass

from .machine import Machine

# Every fixed-size launch in the chapters, by notebook: a test holds this table true to their cells.
CHAPTER_JOBS = {
    "01_background": (1, 2),
    "03_1_data_parallel": (2, 3),
    "03_2_model_parallel": (2, 4),
    "04_2_communication": (2,),
    "04_3_prediction": (2,),
    "05_1_ddp_training": (1, 2),
    "05_2_amp_training": (2,),
    "05_3_model_parallel_training": (2, 4),
    "05_4_checkpointing": (1, 2, 4),
    "06_1_pipeline_schedules": (2, 4),
    "06_2_sharding": (1, 2),
    "06_3_tensor_parallel": (2, 4),
    "07_1_elastic": (1, 2),
    "07_2_hangs": (2,),
}
# The launches that pass backend="gloo" whatever the machine: monitored_barrier is gloo's (7.2),
# and 7.1's one-rank reference must match its two loopback nodes, which share the GPUs.
# 4.3 studies CPU ranks (one thread each, side by side on one memory system), and 5.1 predicts its own
# gloo run from the fits 4.3 keeps.
GLOO_JOBS = {"04_3_prediction": (2,), "07_1_elastic": (1,), "07_2_hangs": (2,)}

# The machines the book is planned for: a unit test takes every chapter's plan through each.
GIB = 2**30
# With the memory such a machine typically has (it bounds what one launch may start), and its physical
# cores: a cloud machine's vCPUs are hardware threads, two to a core (Colab's 2 are one core), while an
# Apple chip has one thread a core and this book's own 2-vCPU machine reports 2 cores.
PROFILES = {
    "CPU only, 1 core": Machine(cores=1, physical_cores=1, memory=2 * GIB),
    "CPU only, 2 cores": Machine(cores=2, physical_cores=2, memory=8 * GIB),
    "CPU only, 16 cores": Machine(cores=16, physical_cores=8, memory=32 * GIB),
    "CPU only, 64 cores": Machine(cores=64, physical_cores=32, memory=256 * GIB),
    "macOS, 8 cores": Machine(cores=8, physical_cores=8, system="Darwin", memory=16 * GIB),
    "Colab: 1 GPU + 2 cores": Machine(cores=2, physical_cores=1, gpus=("Tesla T4",), memory=12 * GIB,
                                      gpu_memory=15 * GIB),
    "1 GPU + 16 cores": Machine(cores=16, physical_cores=8, gpus=("NVIDIA H200",), memory=128 * GIB,
                                gpu_memory=141 * GIB),
    "2 GPUs + 16 cores": Machine(cores=16, physical_cores=8, gpus=("NVIDIA A100",) * 2, memory=128 * GIB,
                                 gpu_memory=80 * GIB),
    "8 GPUs + 96 cores": Machine(cores=96, physical_cores=48, gpus=("NVIDIA H100",) * 8, memory=1024 * GIB,
                                 gpu_memory=80 * GIB),
}


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Job:
    """One launch of ``nprocs`` ranks, and where they run on a machine (``launch`` picks the same)."""

    nprocs: int
    backend: str
    cores: int

    @property
    def shared(self) -> bool:
        """More ranks than cores: they still run, but take turns on the cores."""
        return self.backend == "gloo" and self.nprocs > self.cores

    def describe(self) -> str:
        ranks = _plural(self.nprocs, "rank")
        if self.backend == "nccl":
            return f"{ranks} on {_plural(self.nprocs, 'GPU')}, one each, over NCCL"
        if self.shared:
            return f"{ranks} on the CPU over gloo, sharing its {_plural(self.cores, 'core')}"
        each = self.cores // self.nprocs
        return f"{ranks} on the CPU over gloo, {_plural(each, 'core')} each"

    def warning(self) -> str | None:
        if not self.shared:
            return None
        return (f"{_plural(self.nprocs, 'rank')} share {_plural(self.cores, 'CPU core')}: the job runs, "
                f"but its ranks take turns, so its timings are not what {self.nprocs} cores would give.")


def job(m: Machine, nprocs: int, backend: str | None = None) -> Job:
    """Where ``nprocs`` ranks run here: the backend given, else the one ``launch`` would pick."""
    return Job(nprocs, backend or m.backend(nprocs), m.cores)


# The most ranks one launch may start (launch() refuses more before it starts anything). Why these:
# on 2 cores, 16 ranks took 4.3 s to start and all_reduce once and 32 took 7.9 s (0.25 s a rank, all
# of it start-up while the ranks take turns on the cores), so past 8 a core a job measures nothing.
# An idle rank forked from the preloaded forkserver owns 19 MB (USS; its 383 MB RSS is mostly torch,
# shared with the forkserver), and a chapter's workload adds its model, batches and gloo's buffers:
# past 256 MB a rank, the out-of-memory killer would end the job instead, and it may pick the kernel.
RANKS_PER_CORE = 8
MEMORY_PER_RANK = 256 * 2**20


def most_ranks(m: Machine) -> int:
    """The most ranks one launch may start on ``m``: 8 a core, within 256 MB of memory each (if known).

    GPU jobs are bounded by their GPUs on top of this (launch checks backend='nccl' against them).
    """
    by_cores = RANKS_PER_CORE * m.cores
    return max(1, min(by_cores, m.memory // MEMORY_PER_RANK)) if m.memory else by_cores


def most_ranks_why(m: Machine) -> str:
    """Where ``most_ranks(m)`` comes from, in one clause for launch's refusal."""
    why = f"at most {most_ranks(m)} here: {RANKS_PER_CORE} a core on {_plural(m.cores, 'core')}"
    if m.memory:
        why += f", {MEMORY_PER_RANK >> 20} MB each of {m.memory / 2**30:.1f} GB of memory"
    return why


def chapter_job(m: Machine, chapter: str, nprocs: int) -> Job:
    """Where a chapter's fixed launch of ``nprocs`` ranks runs here."""
    return job(m, nprocs, "gloo" if nprocs in GLOO_JOBS.get(chapter, ()) else None)


def chapter_jobs(m: Machine, chapter: str) -> str:
    """One sentence for a chapter's prose: where each of its launches ran on this machine."""
    runs = "; ".join(chapter_job(m, chapter, n).describe() for n in CHAPTER_JOBS[chapter])
    return f"On this machine ({m.describe()}), this chapter's jobs ran as {runs}."


def two_gpus_in_one_process(m: Machine) -> bool:
    """Whether one process can drive two GPUs: what nn.DataParallel (3.1) and the article's
    model split (3.2, 5.3) need to run as the article wrote them."""
    return m.n_gpus >= 2


def split_devices(m: Machine) -> tuple[str, str]:
    """Where the article's two-device model puts its halves in one process: two GPUs, else the CPU twice."""
    return ("cuda:0", "cuda:1") if two_gpus_in_one_process(m) else ("cpu", "cpu")


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


def allreduce_fit_bounds(m: Machine) -> tuple[float, float]:
    """4.2's bounds on its p = 2 fit: the least R^2 over the bandwidth-bound sizes, and the most a held-out
    size may miss. Where the two ranks take turns on one core (one logical CPU), the kernel switches
    between them in slices of a few ms and a call that outlasts one waits for the next, so the line
    bends there: on one core of this book's machine, R^2 0.90-0.93 and held-out misses of 12-27%."""
    r = communication_ranks(m)
    return (0.85, 0.35) if r.shared and not r.hyperthreads else (0.98, 0.20)


def ring_model_bound(backend: str) -> float:
    """How close 4.2 asserts the ring model (fitted at p = 2) comes to other p's bandwidth-bound sizes:
    gloo's all_reduce is that ring; NCCL picks a ring, a tree or NVLink SHARP by size and topology,
    so there the ring is a model of it, not its algorithm."""
    return 0.20 if backend == "gloo" else 0.50


def good_regime_claim(m: Machine) -> bool:
    """Chapter 4.3 (CPU ranks over gloo on every machine) asserts S(2) > 1.5 on its compute-bound job
    only where each of its 2 ranks has a physical core of its own."""
    return m.whole_cores >= 2


def contention_ceiling(m: Machine) -> float:
    """The most 4.3 asserts two ranks computing side by side slow each other: two cores share only the
    memory system; on one core the ranks take turns or split its units, each about twice as slow."""
    return 2.0 if m.whole_cores >= 2 else 3.0

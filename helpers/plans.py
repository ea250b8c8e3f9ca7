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
GLOO_JOBS = {"07_1_elastic": (1,), "07_2_hangs": (2,)}

# The machines the book is planned for: a unit test takes every chapter's plan through each.
GIB = 2**30
PROFILES = {  # with the memory such a machine typically has: it bounds what one launch may start
    "CPU only, 1 core": Machine(cores=1, memory=2 * GIB),
    "CPU only, 2 cores": Machine(cores=2, memory=8 * GIB),
    "CPU only, 16 cores": Machine(cores=16, memory=32 * GIB),
    "CPU only, 64 cores": Machine(cores=64, memory=256 * GIB),
    "macOS, 8 cores": Machine(cores=8, system="Darwin", memory=16 * GIB),
    "Colab: 1 GPU + 2 cores": Machine(cores=2, gpus=("Tesla T4",), memory=12 * GIB),
    "1 GPU + 16 cores": Machine(cores=16, gpus=("NVIDIA H200",), memory=128 * GIB),
    "2 GPUs + 16 cores": Machine(cores=16, gpus=("NVIDIA A100",) * 2, memory=128 * GIB),
    "8 GPUs + 96 cores": Machine(cores=96, gpus=("NVIDIA H100",) * 8, memory=1024 * GIB),
}


@dataclass(frozen=True)
class Ranks:
    """The rank counts of a sweep, and what its ranks run on.

    ``ok``: counts at which every rank has a device of its own (a GPU under NCCL, else a
    core under gloo); ``over``: one count past that, run where it teaches what
    oversubscription does, else None; ``shared``: on a 1-core machine the sweep still runs
    2 ranks, which then share the core (the chapter warns).
    """

    backend: str
    units: int
    ok: tuple[int, ...]
    over: int | None
    shared: bool = False

    @property
    def ps(self) -> tuple[int, ...]:
        return self.ok + ((self.over,) if self.over else ())

    @property
    def device(self) -> str:
        return "GPU" if self.backend == "nccl" else "CPU core"

    def describe(self) -> str:
        """One sentence for the prose: where the ranks of this sweep run."""
        where = (f"one {self.device} each, over {self.backend}" if not self.shared else
                 f"2 ranks sharing this machine's single core, over {self.backend}")
        past = f", and p = {self.over} is past the {self.units} {self.device}s" if self.over else ""
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
    if nprocs in PAIRED_JOBS.get(chapter, ()):
        return job(m, nprocs, m.backend(2))
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


MP_TIMELINE_RANKS = (2, 4)  # 3.2's schedule timelines: p = 2 and p = 4 stages, one per rank


def cpu_stage_counts(m: Machine) -> list[int]:
    """The stage counts of 3.2's timelines whose stages are CPU cores here (the others are GPUs)."""
    return [p for p in MP_TIMELINE_RANKS if job(m, p).backend == "gloo"]


def rank_units(m: Machine) -> tuple[str, int]:
    """NCCL with one GPU per rank where there are two GPUs or more; else gloo, one core per rank.

    A single GPU cannot give two ranks a device each, so a sweep over p runs on the CPU there.
    """
    return ("nccl", m.n_gpus) if m.n_gpus >= 2 else ("gloo", m.cores)


def speedup_ranks(m: Machine, most: int = 16) -> Ranks:
    """Chapter 4.1: p = 1, 2, 4, ... up to the devices (16 at most), and on a CPU with 8 cores or
    fewer one point at twice the cores. A 1-core machine still runs p = 2, sharing its core."""
    backend, units = rank_units(m)
    if units == 1:
        return Ranks(backend, units, (1, 2), None, shared=True)
    ok = tuple(2**k for k in range(5) if 2**k <= min(units, most))
    return Ranks(backend, units, ok, 2 * units if backend == "gloo" and units <= 8 else None)


def communication_ranks(m: Machine) -> Ranks:
    """Chapter 4.2: all_reduce sweeps at p = 2, 4, 8 up to the devices, and on a CPU with 4 cores
    or fewer one sweep at twice the cores. A 1-core machine still runs p = 2, sharing its core."""
    backend, units = rank_units(m)
    if units == 1:
        return Ranks(backend, units, (2,), None, shared=True)
    ok = tuple(p for p in (2, 4, 8) if p <= units)
    return Ranks(backend, units, ok, 2 * units if backend == "gloo" and units <= 4 else None)


def good_regime_claim(m: Machine) -> bool:
    """Chapter 4.3 asserts S(2) > 1.5 on its compute-bound job only where each of its 2 ranks has a
    device of its own: a core under gloo, or a GPU under NCCL."""
    return not communication_ranks(m).shared


# --- torchrun jobs started as subprocesses on this one host (5.1, 7.1, 7.3) ----------------------

@dataclass(frozen=True)
class HostJob:
    """torchrun agents started on this one host (``cluster.run_nodes``): ``nodes`` agents of ``nproc``
    ranks each. ``backend``: what their environment sets (``HELPERS_BACKEND``); None leaves each rank
    to pick from its own agent's ``LOCAL_WORLD_SIZE``, as ``helpers.dist.setup`` does."""

    nodes: int
    nproc: int
    backend: str | None = None


# Every torchrun job a chapter starts as subprocesses: a test holds this table true to their cells,
# and takes every job through every profile (no two NCCL ranks may share a GPU).
TORCHRUN_JOBS = {
    "05_1_ddp_training": (HostJob(2, 1, "gloo"),),          # two loopback nodes: RANK against LOCAL_RANK
    "07_1_elastic": (HostJob(1, 2), HostJob(2, 1, "gloo")),  # a restart under the CLI; a lost node
    "07_3_cluster": (HostJob(2, 1, "gloo"), HostJob(1, 2, "gloo")),  # 2 nodes x 1, then 1 node x 2
}


def host_ranks(m: Machine, job: HostJob) -> list[tuple[int, int, str]]:
    """(node, LOCAL_RANK, backend) of every rank of ``job`` on ``m``, the backend as each rank's
    ``helpers.dist.setup`` picks it: the environment's, else NCCL where its own agent's ranks can
    each own a GPU. An agent knows nothing of the others on its host: each counts from LOCAL_RANK 0."""
    return [(node, local, job.backend or m.backend(job.nproc))
            for node in range(job.nodes) for local in range(job.nproc)]


def place_ranks(m: Machine, job: HostJob) -> list[tuple[int, int, str, object]]:
    """(node, LOCAL_RANK, backend, device) of every rank of ``job`` on ``m``, each device as
    ``helpers.devices.for_rank`` gives it; refused where two NCCL ranks would share a GPU."""
    from . import devices  # torch: only where ranks are placed, so that planning needs none
    placed = [(node, local, backend, devices.for_rank(backend, local, m))
              for node, local, backend in host_ranks(m, job)]
    gpus = [str(device) for *_, backend, device in placed if backend == "nccl"]
    if len(gpus) != len(set(gpus)):
        raise RuntimeError(
            f"{job.nodes} torchrun agents on this host would put two NCCL ranks on one GPU ({', '.join(gpus)}): "
            "each agent numbers its ranks from LOCAL_RANK 0. Give them cluster.shared_host_env (gloo)")
    return placed


# --- Chapter 5.1's throughput pairs: 1 rank, then 2 -------------------------------------------

# The launches that run on the backend 2 ranks get, whatever launch would pick for them alone.
PAIRED_JOBS = {"05_1_ddp_training": (1,)}


def throughput_backends(m: Machine) -> tuple[str, ...]:
    """Where 5.1 runs its pair of throughput runs (1 rank, then 2), one pair per backend.

    Both runs of a pair on the backend that 2 ranks get: a ratio of rank counts, not of devices (a
    single GPU cannot hold 2 ranks, so there both run on the CPU). Where that is NCCL, a second
    pair runs over gloo: chapter 4.3's fits, which predict the ratio, are measured over gloo on CPU
    cores, and a prediction is compared with a run of the kind it was fitted on.
    """
    first = m.backend(2)
    return (first,) if first == "gloo" else (first, "gloo")

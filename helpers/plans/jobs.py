"""What a chapter launches and where its ranks run: the chapters' fixed launches, the machines
the book is planned for (``PROFILES``), one launch's ``Job``, and how many ranks one may start."""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import Machine

# Every fixed-size launch in the chapters, by notebook: a test holds this table true to their cells.
# (Its rows look alike to `duplicates`, as a table's rows do.)
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
    "08_1_transformer_bill": (2,),
    "08_2_sequence_context": (2, 4),
    "08_3_experts": (1, 2, 4),
    "08_4_four_d": (2, 8),
    "08_5_plan": (2, 4, 8),
}
# The launches whose size is a mesh's, not a machine's: 8.4's dp 2 x tp 2 x pp 2 is 8 ranks wherever it
# runs. Fewer cores than 8 take turns (launch warns); fewer GPUs than 8 run it on the CPU over gloo,
# since NCCL refuses two ranks on one GPU. 8 is within most_ranks on every profile (8 a core).
MESH_JOBS = {"08_4_four_d": (8,), "08_5_plan": (4, 8)}
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


# --- Chapter 8.2: torch's own context parallelism -------------------------------------------------

def torch_cp_runs(m: Machine) -> bool:
    """Whether 8.2 runs torch's ``context_parallel`` on 2 ranks: its ring wraps only SDPA's CUDA
    kernels (``probes.context_parallel``), so each rank needs a GPU of its own, which is where
    ``launch`` picks NCCL."""
    return job(m, 2).backend == "nccl"

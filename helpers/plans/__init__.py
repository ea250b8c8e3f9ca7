"""What a chapter launches, planned from the machine's facts alone.

A plan reads a ``Machine`` and nothing else, so a unit test can plan for every
machine a reader brings (``PROFILES``) while the real runs use this one::

    ranks = plans.speedup_ranks(machine.this())
    helpers.launch(..., nprocs=max(ranks.ps), backend=ranks.backend)
"""
from .jobs import (  # noqa: F401
    CHAPTER_JOBS, GIB, GLOO_JOBS, MEMORY_PER_RANK, MP_TIMELINE_RANKS, PAIRED_JOBS, PROFILES, RANKS_PER_CORE,
    MESH_JOBS, Job, chapter_job, chapter_jobs, cpu_stage_counts, job, most_ranks, most_ranks_why, split_devices,
    throughput_backends, torch_cp_runs, two_gpus_in_one_process,
)
from .nodes import TORCHRUN_JOBS, HostJob, host_ranks, place_ranks  # noqa: F401
from .sweeps import (  # noqa: F401
    Ranks, allreduce_fit_bounds, allreduce_sizes, alltoall_sizes, communication_ranks, contention_ceiling, crowded, good_regime_claim,
    rank_units, ring_model_bound, speedup_ranks,
)

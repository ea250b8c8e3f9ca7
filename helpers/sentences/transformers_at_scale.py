"""Part 8, transformers at scale: what its chapters say about the machine they ran on."""
from __future__ import annotations

from .. import plans
from ..machine import Machine
from .common import _runs

MESH_RANKS = 8  # 8.4's dp 2 x tp 2 x pp 2 (plans.MESH_JOBS)


def four_d(m: Machine) -> dict[str, str]:
    """8.4: where the 8-rank mesh ran, and why its seconds are shown but not representative."""
    job = plans.job(m, MESH_RANKS)
    if job.shared:
        note = (f"{job.warning()} So the step times below are shown, not representative: with a device "
                f"each, the {MESH_RANKS} ranks would not wait for each other's turn on a core.")
    elif job.backend == "gloo":
        note = (f"Here the job ran as {job.describe()}: no rank waited for a core, but a CPU's seconds on a "
                "model this small are Python and message overheads, so they are shown, not representative "
                "of a GPU cluster.")
    else:
        note = (f"Here the job ran as {job.describe()}. A model this small leaves each GPU idle for most of a "
                "step, so the seconds below measure launches and messages: shown, not representative of a "
                "real model's step.")
    return {"fd_time_note": note, **_runs(m, "08_4_four_d")}


def four_d_cp(m: Machine, composed: bool, errors: dict[str, str | None], max_diff: float) -> str:
    """8.4: what the context-parallel probe (2 ranks) found on this machine."""
    where = plans.job(m, 2).describe()
    if composed:
        return (f"Here the probe ran as {where}, and torch's ring attention matched the whole attention to "
                f"{max_diff:.1e}: on GPUs context parallelism composes, and would join the mesh as a fourth "
                "dimension beside dp, tp and pp.")
    math = errors.get("math kernel") or "it ran"
    return (f"Here the probe ran as {where}, and torch's ring attention stopped at once: "
            f"`{errors['default kernel']}`. Context parallelism replaces only the GPU attention kernels "
            "(flash, memory-efficient and cuDNN: torch/distributed/tensor/experimental/_context_parallel/"
            "_attention.py), not the CPU's; forced onto the plain-math kernel it fails too "
            f"(`{math}`), so on this machine it does not join the mesh.")


def four_d_wire(m: Machine, most_over: float | None) -> str:
    """8.4: what the sockets showed of the counted step: a ratio to the formulas' sum, where counted."""
    job = plans.job(m, MESH_RANKS)
    if most_over is None:
        why = ("the collectives ran over NCCL, whose bytes are not writes to a process's sockets"
               if job.backend == "nccl" else f"{m.system} does not count the bytes a process writes")
        return f"Here {why}, so the counts above are the collectives' own, not the wire's."
    return (f"The sockets agree: in the counted step each rank wrote at most {most_over:.3f} times the "
            "bytes the formulas give it, over all three dimensions together (at least the formulas' "
            "bytes and at most 5% more, asserted); the rest is what gloo writes besides the messages themselves.")


def plan(m: Machine) -> dict[str, str]:
    """8.5: where its runs ran (the held-out mesh of 8 and the panel's layouts of 4), and what the
    planner is told of the held-out mesh's ranks."""
    return {**_runs(m, "08_5_plan"), "p_time_note": plan_time(m)}


def plan_time(m: Machine, nprocs: int = MESH_RANKS) -> str:
    """8.5: what the planner is told of this machine's ranks, for the held-out step time."""
    job = plans.job(m, nprocs)
    if job.backend == "nccl":
        return f"Here the {nprocs} ranks ran as {job.describe()}: each rank's FLOP/s is its GPU's, measured."
    if job.shared:
        return (f"{job.warning()} The planner is told so: each rank computes at its turn's share, "
                f"{m.cores}/{nprocs} of one core's measured FLOP/s.")
    return (f"Here the {nprocs} ranks ran as {job.describe()}: each computes at its "
            f"{m.threads_per_rank(nprocs)} threads' worth of one core's measured FLOP/s.")

"""torchrun jobs that a chapter starts as subprocesses on this one host (5.1, 7.1, 7.3): where
every node's ranks run, and the refusal of two NCCL ranks on one GPU."""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import Machine


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
    "07_3_cluster": (HostJob(2, 1, "gloo"), HostJob(2, 2, "gloo"), HostJob(1, 2, "gloo")),  # 2 x 1, 2 x 2, 1 x 2
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
    from .. import devices  # torch: only where ranks are placed, so that planning needs none
    placed = [(node, local, backend, devices.for_rank(backend, local, m))
              for node, local, backend in host_ranks(m, job)]
    gpus = [str(device) for *_, backend, device in placed if backend == "nccl"]
    if len(gpus) != len(set(gpus)):
        raise RuntimeError(
            f"{job.nodes} torchrun agents on this host would put two NCCL ranks on one GPU ({', '.join(gpus)}): "
            "each agent numbers its ranks from LOCAL_RANK 0. Give them cluster.shared_host_env (gloo)")
    return placed

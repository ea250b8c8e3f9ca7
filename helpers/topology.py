"""Where each rank sits in a hybrid job: one small dataclass, checked against the world size.

torchtitan's way: the parallel dimensions are declared once, their product must equal
the number of processes, and every process group comes from that one object::

    topo = Topology(dp=2, pp=2)
    mesh = topo.build_mesh("cpu")          # a DeviceMesh named ("pp", "dp")
    dp_group = mesh["dp"].get_group()      # the replicas of my stage: DDP averages over it
    stage_ranks = mesh["pp"].mesh.tolist() # my replica's stages, in order: send/recv along it

Layout: ``pp`` is the outer dimension and ``dp`` the inner one, so a replica's stages
are ``dp`` ranks apart and the replicas of one stage are neighbours. On GPU nodes
this keeps the heavy gradient all-reduce between nearby ranks (the same node) and
sends only activations between stages, which may cross nodes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """``dp`` data-parallel replicas of a model cut into ``pp`` pipeline stages."""

    dp: int = 1
    pp: int = 1

    def __post_init__(self):
        for name in ("dp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Topology.{name} must be an integer >= 1, got {value!r}")

    @property
    def world_size(self) -> int:
        return self.dp * self.pp

    def check(self, world_size: int) -> "Topology":
        """Raise unless dp * pp uses every process exactly once."""
        if self.world_size != world_size:
            raise ValueError(f"dp * pp = {self.dp} * {self.pp} = {self.world_size}, but the job has "
                             f"{world_size} processes; they must be equal")
        return self

    def coords(self, rank: int) -> tuple[int, int]:
        """(dp_rank, pp_rank) of a global rank: which replica, which stage."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1}")
        return rank % self.dp, rank // self.dp

    def rank(self, dp_rank: int, pp_rank: int) -> int:
        """The global rank at (replica, stage): the inverse of ``coords``."""
        return pp_rank * self.dp + dp_rank

    def stage_ranks(self, dp_rank: int) -> list[int]:
        """The ranks that hold replica ``dp_rank``'s stages, first stage first (a pipeline)."""
        return [self.rank(dp_rank, s) for s in range(self.pp)]

    def replica_ranks(self, pp_rank: int) -> list[int]:
        """The ranks that hold stage ``pp_rank`` in every replica (a gradient all-reduce group)."""
        return [self.rank(d, pp_rank) for d in range(self.dp)]

    def build_mesh(self, device_type: str):
        """The job's DeviceMesh, shape (pp, dp). Every rank must call it (it creates the groups)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        self.check(dist.get_world_size())
        return init_device_mesh(device_type, (self.pp, self.dp), mesh_dim_names=("pp", "dp"))

    def table(self) -> list[dict]:
        """One row per rank: what a reader wants to see before launching."""
        return [{"rank": r, "replica (dp)": self.coords(r)[0], "stage (pp)": self.coords(r)[1]}
                for r in range(self.world_size)]

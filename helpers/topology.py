"""Where each rank sits in a hybrid job: one small dataclass, checked against the world size.

torchtitan's way: the parallel dimensions are declared once, their product must equal
the number of processes, and every process group comes from that one object::

    topo = Topology(dp=2, pp=2)
    mesh = topo.build_mesh(ctx.device)     # a DeviceMesh named ("pp", "dp"), on the ranks' device
    dp_group = mesh["dp"].get_group()      # the replicas of my stage: DDP averages over it
    stage_ranks = mesh["pp"].mesh.tolist() # my replica's stages, in order: send/recv along it

    topo = Topology(dp=2, tp=2)            # chapter 6.3: FSDP over dp, each layer split over tp
    mesh = topo.build_mesh(ctx.device)     # a DeviceMesh named ("dp", "tp"), shape (2, 2)

Layout: ``pp`` is the outer dimension, ``dp`` the middle one and ``tp`` the inner one. The
ranks that split one layer (tp) are neighbours: they exchange activations in every layer,
forward and backward, so on GPU nodes they want the fastest links (the same node). The
replicas of one stage come next, so the gradient all-reduce also stays near, and only
activations between stages may cross nodes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """``dp`` data-parallel replicas of a model cut into ``pp`` pipeline stages, each stage's
    layers split over ``tp`` ranks (tensor parallelism)."""

    dp: int = 1
    pp: int = 1
    tp: int = 1

    def __post_init__(self):
        for name in ("dp", "pp", "tp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Topology.{name} must be an integer >= 1, got {value!r}")

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp

    def check(self, world_size: int) -> "Topology":
        """Raise unless dp * pp (* tp) uses every process exactly once."""
        if self.world_size != world_size:
            names = ("dp", "pp", "tp") if self.tp > 1 else ("dp", "pp")
            sizes = " * ".join(str(getattr(self, n)) for n in names)
            raise ValueError(f"{' * '.join(names)} = {sizes} = {self.world_size}, but the job has "
                             f"{world_size} processes; they must be equal")
        return self

    def _within(self, what: str, value, size: int) -> None:
        """A coordinate past its dimension would name another rank (or none): refused, not wrapped."""
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < size:
            raise ValueError(f"{what} must be an integer in 0..{size - 1} for {self}, got {value!r}")

    def coords(self, rank: int) -> tuple[int, int]:
        """(dp_rank, pp_rank) of a global rank: which replica, which stage (``tp_rank``: which shard)."""
        self._within("rank", rank, self.world_size)
        return (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def tp_rank(self, rank: int) -> int:
        """Which slice of each split layer a global rank holds."""
        self.coords(rank)
        return rank % self.tp

    def rank(self, dp_rank: int, pp_rank: int, tp_rank: int = 0) -> int:
        """The global rank at (replica, stage, shard): the inverse of ``coords`` and ``tp_rank``."""
        for what, value, size in (("dp_rank", dp_rank, self.dp), ("pp_rank", pp_rank, self.pp),
                                  ("tp_rank", tp_rank, self.tp)):
            self._within(what, value, size)
        return (pp_rank * self.dp + dp_rank) * self.tp + tp_rank

    def stage_ranks(self, dp_rank: int, tp_rank: int = 0) -> list[int]:
        """The ranks that hold replica ``dp_rank``'s stages, first stage first (a pipeline)."""
        return [self.rank(dp_rank, s, tp_rank) for s in range(self.pp)]

    def replica_ranks(self, pp_rank: int, tp_rank: int = 0) -> list[int]:
        """The ranks that hold the same part of the model in every replica (a gradient group)."""
        return [self.rank(d, pp_rank, tp_rank) for d in range(self.dp)]

    def shard_ranks(self, dp_rank: int, pp_rank: int = 0) -> list[int]:
        """The ranks that split one stage's layers between them (a tensor-parallel group)."""
        return [self.rank(dp_rank, pp_rank, t) for t in range(self.tp)]

    @property
    def mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The mesh's (name, size), outer first: dp always; pp unless the job is dp x tp alone; tp if > 1."""
        dims = [("pp", self.pp)] if self.pp > 1 or self.tp == 1 else []
        return tuple(dims + [("dp", self.dp)] + ([("tp", self.tp)] if self.tp > 1 else []))

    def build_mesh(self, device, every_dim: bool = False):
        """The job's DeviceMesh over ``mesh_dims``: (pp, dp), or (dp, tp), or (pp, dp, tp), on
        ``device``, the ranks' own (``ctx.device``; ``devices.mesh`` builds it). ``every_dim``: all
        three, (pp, dp, tp), even those of size 1, for code that takes each by name (chapter 8.4).
        Every rank must call it (it creates the groups)."""
        import torch.distributed as dist
        from . import devices
        self.check(dist.get_world_size())
        dims = (("pp", self.pp), ("dp", self.dp), ("tp", self.tp)) if every_dim else self.mesh_dims
        names, sizes = zip(*dims)
        return devices.mesh(device, sizes, names)

    def table(self) -> list[dict]:
        """One row per rank: what a reader wants to see before launching."""
        rows = []
        for r in range(self.world_size):
            row = {"rank": r, "replica (dp)": self.coords(r)[0], "stage (pp)": self.coords(r)[1]}
            rows.append(row | ({"shard (tp)": self.tp_rank(r)} if self.tp > 1 else {}))
        return rows

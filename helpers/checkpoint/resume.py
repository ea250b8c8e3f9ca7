"""Resuming exactly: where the sampler stood in its epoch (the random generators: ``helpers.devices``)."""
from __future__ import annotations

from torch.utils.data import DistributedSampler

from .errors import IncompatibleCheckpoint


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` that can start an epoch part-way through.

    Its order is a function of (seed, epoch) alone, so (epoch, samples already
    consumed) is its whole state. Without it, a run resumed mid-epoch starts the
    epoch again and trains twice on what it had already seen.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        self.start = 0

    def __iter__(self):
        indices = list(super().__iter__())[self.start:]
        self.start = 0  # only the epoch being resumed starts late
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples - self.start

    def state_dict(self, consumed: int) -> dict:
        """The position after ``consumed`` samples of the current epoch (the loop counts them)."""
        return {"epoch": self.epoch, "consumed": int(consumed), "seed": self.seed,
                "num_replicas": self.num_replicas, "num_samples": self.num_samples,
                "shuffle": self.shuffle}

    def mismatch(self, state: dict) -> list[str]:
        return [f"sampler {k}: checkpoint {state.get(k)!r}, here {getattr(self, k)!r}"
                for k in ("num_replicas", "num_samples", "seed", "shuffle")
                if state.get(k) != getattr(self, k)]

    def load_state_dict(self, state: dict) -> None:
        if self.mismatch(state):
            raise IncompatibleCheckpoint("; ".join(self.mismatch(state)))
        if state["consumed"] >= self.num_samples:  # saved at the end of an epoch
            self.set_epoch(state["epoch"] + 1)
            self.start = 0
        else:
            self.set_epoch(state["epoch"])
            self.start = state["consumed"]

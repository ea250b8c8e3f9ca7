"""MNIST through torchvision's real loader, and an honest offline fallback.

The article trains on MNIST. ``prepare()`` (run once, in the notebook) puts it
on disk where the network allows. Where it does not, as on machines that
reach only package registries, every loader here falls back to real
handwritten digits that ship inside scikit-learn (1,797 scans, 8x8 pixels),
resized to MNIST's 28x28 layout, and says so. Nothing here is random noise.

Set ``HELPERS_OFFLINE=1`` to skip the download attempt (CI does).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler, TensorDataset

DATA_DIR = Path(os.environ.get("HELPERS_DATA_DIR", Path(__file__).resolve().parent.parent / "data"))
MEAN, STD = 0.5, 0.5  # the article's Normalize((0.5,), (0.5,))


@dataclass(frozen=True)
class Source:
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name} ({self.detail})"


def offline() -> bool:
    return os.environ.get("HELPERS_OFFLINE", "") not in ("", "0")


def _mnist_on_disk() -> bool:
    raw = DATA_DIR / "MNIST" / "raw"
    return all((raw / f).exists() for f in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte"))


def prepare(timeout: float = 15.0) -> Source:
    """Download MNIST if it is missing and the network allows; say which data the chapters will use."""
    if not _mnist_on_disk() and not offline():
        from torchvision import datasets
        old = socket.getdefaulttimeout()
        socket.setdefaulttimeout(timeout)
        try:
            for train in (True, False):
                datasets.MNIST(DATA_DIR, train=train, download=True)
        except Exception as e:  # noqa: BLE001 - any failure to fetch means: use the fallback
            print(f"MNIST could not be downloaded ({type(e).__name__}); using the offline digits.")
        finally:
            socket.setdefaulttimeout(old)
    return source()


def source() -> Source:
    if _mnist_on_disk():
        return Source("MNIST", f"torchvision, {DATA_DIR}")
    why = "HELPERS_OFFLINE is set" if offline() else "MNIST is not on disk"
    return Source("scikit-learn digits", f"1,797 real handwritten digits resized to 28x28; "
                                         f"offline fallback because {why}")


def _normalize(x: torch.Tensor) -> torch.Tensor:
    return (x - MEAN) / STD


def _mnist(train: bool) -> TensorDataset:
    from torchvision import datasets
    ds = datasets.MNIST(DATA_DIR, train=train, download=False)
    x = ds.data.unsqueeze(1).float() / 255.0  # what ToTensor() does, for all images at once
    return TensorDataset(_normalize(x), ds.targets.clone())


def _digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits at 28x28 in [0, 1], built once and kept in DATA_DIR.

    The file spares every rank of every launch scikit-learn's import (about a second of CPU).
    """
    cached = DATA_DIR / "sklearn-digits-28x28.pt"
    if cached.exists():
        blob = torch.load(cached, weights_only=True)
        return blob["x"], blob["y"]
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    # MNIST centres a 20x20 digit in a 28x28 frame; do the same.
    x = F.pad(F.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False), (4, 4, 4, 4))
    x, y = x.clamp(0, 1), torch.tensor(d.target, dtype=torch.long)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")  # ranks may race: each writes its own
    torch.save({"x": x, "y": y}, tmp)
    os.replace(tmp, cached)
    return x, y


def _digits(train: bool, test_fraction: float = 0.2) -> TensorDataset:
    x, y = _digits_tensors()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    n_test = int(len(y) * test_fraction)
    idx = order[n_test:] if train else order[:n_test]
    return TensorDataset(_normalize(x[idx]), y[idx])


def load(train: bool = True) -> TensorDataset:
    """The training or test split as tensors: images N x 1 x 28 x 28 (normalized), labels N."""
    return _mnist(train) if _mnist_on_disk() else _digits(train)


def at_least(n: int, train: bool = True) -> TensorDataset:
    """The split repeated until it holds ``n`` samples or more, so that one rank can take a batch of
    ``n`` (the offline digits are 1,437 training images)."""
    x, y = load(train).tensors
    k = -(-n // len(y))
    return TensorDataset(x.repeat(k, *[1] * (x.dim() - 1)), y.repeat(k))


def first_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``batch_size`` training images and labels: the same batch in every process."""
    x, y = load(train=True).tensors
    return x[:batch_size], y[:batch_size]


# --- Which samples each step trains on: DistributedSampler's order, computed anywhere ------

def replica_batches(n: int, batch_size: int, epochs: int, seed: int, dp: int = 1,
                    dp_rank: int = 0, max_steps: int | None = None) -> list[torch.Tensor]:
    """Sample indices of each step for one replica: DistributedSampler's order, ``set_epoch`` each epoch.

    With dp = 1 this is the article's ``shuffle=True``, made reproducible by the seed.
    Every stage of a replica computes the same list, so its stages agree on the batch
    without sending it (the first stage uses the images, the last the labels).
    ``max_steps`` cuts the list short (on full MNIST, 5 epochs are 4,690 steps).
    """
    sampler = DistributedSampler(range(n), num_replicas=dp, rank=dp_rank, shuffle=True, seed=seed)
    steps = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        steps += list(torch.tensor(list(sampler)).split(batch_size))
    return steps[:max_steps]


def global_batches(n: int, batch_size: int, epochs: int, seed: int, dp: int = 1,
                   max_steps: int | None = None) -> list[torch.Tensor]:
    """What the dp replicas see together at each step: their batches, concatenated."""
    per_replica = [replica_batches(n, batch_size, epochs, seed, dp, r, max_steps) for r in range(dp)]
    return [torch.cat(step) for step in zip(*per_replica)]


def batch_plan(n: int, world_size: int, batch_size: int, steps: int, seed: int = 0) -> list:
    """Indices each rank trains on at each step (steps x ranks x batch_size), computed in one process.

    Exactly what DistributedSampler (shuffled, ``set_epoch`` every epoch) feeds a
    ``DataLoader(drop_last=True)`` on each rank, so one step's global batch is the
    concatenation over ranks. Only full batches: equal sizes keep the mean of the
    ranks' mean losses equal to the mean over the global batch.
    """
    if -(-n // world_size) < batch_size:
        raise ValueError(f"{n} samples over {world_size} ranks make no full batch of {batch_size}")
    out, epoch = [], 0
    while len(out) < steps:
        per_rank = []
        for rank in range(world_size):
            sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=seed)
            sampler.set_epoch(epoch)
            idx = list(sampler)
            per_rank.append([idx[i:i + batch_size] for i in range(0, len(idx) - batch_size + 1, batch_size)])
        out += [list(step) for step in zip(*per_rank)]
        epoch += 1
    return out[:steps]

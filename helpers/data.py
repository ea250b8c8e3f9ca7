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
from torch.utils.data import TensorDataset

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

"""The models the chapters train: the article's, and a few built to make a point."""
from __future__ import annotations

import torch
import torch.nn as nn


class SimpleModel(nn.Module):
    """The article's model (its section 5.1): 784 -> 256 -> 10."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class ThreeLayerMLP(nn.Module):
    """The article's ``ModelParallelModel`` (its section 5.3) on one device: 784 -> 256 -> 128 -> 10.

    ``stages()`` cuts it where the article puts the device boundary.
    """

    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(784, 256)
        self.layer2 = nn.Linear(256, 128)
        self.layer3 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.layer1(x.flatten(1)))
        x = torch.relu(self.layer2(x))
        return self.layer3(x)

    def stages(self) -> tuple[nn.Module, nn.Module]:
        """(stage 0, stage 1) sharing this model's parameters: layer1 | layer2, layer3."""
        first = nn.Sequential(nn.Flatten(1), self.layer1, nn.ReLU())
        second = nn.Sequential(self.layer2, nn.ReLU(), self.layer3)
        return first, second


class WideMLP(nn.Module):
    """A matmul-heavy MLP on MNIST-shaped input: where compute, not Python, sets the step time."""

    def __init__(self, width: int = 1024, depth: int = 4):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten(1), nn.Linear(784, width), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, 10))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())

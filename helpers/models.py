"""The models the chapters train: the article's, and a few built to make a point.

Recipes name them through one registry, so a name means one model everywhere::

    models.build("wide-1024x4")      # WideMLP(1024, 4)
"""
from __future__ import annotations

import re

import torch
import torch.nn as nn

from helpers import gpt


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


def simple_with_dropout(p: float = 0.1) -> SimpleModel:
    """The article's SimpleModel with dropout after the hidden layer, so that the RNG matters."""
    model = SimpleModel()
    if p:
        model.fc.insert(2, nn.Dropout(p))
    return model


def balanced_mlp(p: int, width: int = 784, layers_per_stage: int = 2) -> nn.Sequential:
    """An MLP of ``p`` stages with equal work, for timing schedules; ``model[s]`` is stage s.

    The article's model is lopsided (its first stage does about 85% of the arithmetic,
    see ``linear_macs``), which would hide the schedule behind the imbalance. Here each
    stage is ``layers_per_stage`` Linear(width, width) layers; width 784 takes the
    image's pixels directly, and the last stage adds a small 10-way head.
    """
    stages = []
    for s in range(p):
        layers: list[nn.Module] = [nn.Flatten(1)] if s == 0 else []
        for i in range(layers_per_stage):
            layers += [nn.Linear(784 if s == i == 0 else width, width), nn.ReLU()]
        if s == p - 1:
            layers.append(nn.Linear(width, 10))
        stages.append(nn.Sequential(*layers))
    return nn.Sequential(*stages)


MODELS = {
    "simple": SimpleModel,                       # the article's 784 -> 256 -> 10
    "simple-dropout": simple_with_dropout,       # ... with Dropout(0.1), chapter 5.4
    "three-layer": ThreeLayerMLP,                # the article's model-parallel model, whole
    "wide-512x4": lambda: WideMLP(512, 4),       # 0.9 M parameters
    "wide-1024x4": lambda: WideMLP(1024, 4),     # 2.9 M parameters: matmuls set the step time
    "gpt-tiny": lambda: gpt.build("gpt-tiny"),   # part 8's GPT (helpers/gpt.py), 2 layers
    "gpt-small": lambda: gpt.build("gpt-small"), # ... 4 layers of 128: chapter 8.1's model
}


def build(name: str) -> nn.Module:
    """A fresh model by its registry name, or any ``wide-WIDTHxDEPTH`` (seed torch first for
    reproducible weights)."""
    if name in MODELS:
        return MODELS[name]()
    if m := re.fullmatch(r"wide-(\d+)x(\d+)", name):
        width, depth = int(m[1]), int(m[2])
        if width >= 1 and depth >= 2:
            return WideMLP(width, depth)
    raise ValueError(f"unknown model {name!r}; the registry has {sorted(MODELS)}, "
                     "or wide-WIDTHxDEPTH with depth >= 2 (e.g. wide-2048x2)")


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def widths(model: nn.Module) -> list[int]:
    """[in, hidden..., out] of a stack of Linears: what ``theory``'s MLP formulas take."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return [m.in_features for m in linears] + [linears[-1].out_features]


def linear_macs(module: nn.Module) -> int:
    """Multiply-adds per sample in a module's Linear layers: the work of an MLP stage."""
    return sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))

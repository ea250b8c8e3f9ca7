"""Chapters 3.2 and 5.3's references, run in the notebook's own process: the model whole, or split
over the devices of one process as the article does. The split runs over processes in
``helpers.recipes.model_parallel`` and ``helpers.recipes.model_parallel_training``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.article import ModelParallelModel
from helpers.data import global_batches, load, replica_batches
from helpers.models import ThreeLayerMLP
from helpers.training import snapshot, train_step


def forward_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One forward and backward of a whole model in this process: outputs, loss and gradients."""
    model.zero_grad(set_to_none=True)
    out = model(x.to(next(model.parameters()).device))  # the input goes where the first layer is
    loss = F.cross_entropy(out, y.to(out.device))  # the labels go where the output is
    loss.backward()
    return {"out": out.detach().cpu(), "loss": loss.item(),
            "grads": {n: p.grad.cpu() for n, p in model.named_parameters()},
            "devices": {n: str(p.device) for n, p in model.named_parameters()}}


def train_in_process(dev0: str = "cuda:0", dev1: str = "cuda:1", epochs: int = 5,
                     batch_size: int = 64, lr: float = 0.05, seed: int = 0,
                     max_steps: int | None = None) -> dict:
    """The article's ``train_model_parallel``, corrected; runs in the calling process.

    On two GPUs it splits the model across them. With ``dev0 = dev1 = "cpu"`` it is
    the same program with nothing moved: it checks the arithmetic, not the split.
    The article's lr = 0.01 suits MNIST's 4,690 steps in 5 epochs; the book's default
    0.05 learns in the 115 steps that 5 epochs of the offline digits give.
    """
    torch.manual_seed(seed)
    model = ModelParallelModel(dev0, dev1)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x_all, y_all = load(train=True).tensors
    losses = []
    model.train()
    for idx in replica_batches(len(y_all), batch_size, epochs, seed, max_steps=max_steps):
        data, target = x_all[idx], y_all[idx]
        data = data.view(data.size(0), -1)  # still on the CPU (not "on GPU 0"): forward() moves it
        target = target.to(model.dev1)  # right as the article has it: where the output (layer3) is
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()  # autograd carries the gradient from dev1 back to dev0 by itself
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "state": snapshot(model),
            "devices": {n: str(p.device) for n, p in model.named_parameters()}}


def train_unsplit(epochs: int = 5, batch_size: int = 64, lr: float = 0.05, seed: int = 0,
                  dp: int = 1, max_steps: int | None = None, device: str | torch.device = "cpu") -> dict:
    """The reference: the whole model in this process, on the dp replicas' global batches.

    ``device``: where the runs it is compared with computed (``helpers.devices.for_rank``): after a
    hundred steps, float32 on a GPU and on a CPU drift apart by more than rounding in one step.
    """
    torch.manual_seed(seed)
    model = ThreeLayerMLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x_all, y_all = load(train=True).tensors
    losses = []
    for idx in global_batches(len(y_all), batch_size, epochs, seed, dp, max_steps):
        losses.append(train_step(model, optimizer, x_all[idx].to(device), y_all[idx].to(device)))
    return {"losses": losses, "state": snapshot(model)}


def accuracy(state: dict) -> float:
    """Accuracy of a trained state dict on the test split, evaluated whole in this process."""
    model = ThreeLayerMLP()
    model.load_state_dict(state)
    x, y = load(train=False).tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()

"""The checkpoint of a DDP job: rank 0 writes all a resume needs; every rank loads it, checked first."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from ..devices import rng_state, set_rng_state
from ..training import unwrap
from .atomic import atomic_save
from .errors import CheckpointError, IncompatibleCheckpoint
from .read import read, seal
from .resume import ResumableSampler


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


@dataclass
class Resume:
    """Where a loaded checkpoint leaves training."""

    step: int
    epoch: int
    extra: dict = field(default_factory=dict)
    path: Path | None = None


def save(path: str | os.PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
         scaler: torch.amp.GradScaler | None = None, step: int = 0, epoch: int = 0,
         sampler_state: dict | None = None, extra: dict | None = None) -> Path:
    """Save a resumable checkpoint of a DDP (replicated) model. Collective: rank 0 writes.

    Every rank must call it. A sharded model goes through ``save_sharded`` instead.

    Every rank's RNG state is gathered to rank 0 first. Rank 0 then tells all
    ranks whether the write succeeded, so a failed save (a full disk) raises on
    every rank instead of leaving them waiting, and the previous file stays.
    """
    _check_plain(extra or {}, "extra")  # on every rank, before any collective: all raise alike
    rngs = [None] * _world_size()
    mine = rng_state(_device_of(model))
    if dist.is_initialized():
        dist.all_gather_object(rngs, mine)
    else:
        rngs = [mine]
    outcome = [None]
    if _rank() == 0:
        try:
            atomic_save(seal({
                "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict() if optimizer else None,
                "optimizer_class": type(optimizer).__name__ if optimizer else None,
                "scaler": scaler.state_dict() if scaler else None,
                "step": int(step), "epoch": int(epoch), "sampler": sampler_state,
                "rng": rngs, "world_size": _world_size(), "extra": extra or {}}), path)
        except Exception as e:  # noqa: BLE001 - sent to every rank, then raised there
            outcome[0] = f"{type(e).__name__}: {e}"
    if dist.is_initialized():
        dist.broadcast_object_list(outcome, src=0)  # also the barrier: the file is complete now
    if outcome[0]:
        raise CheckpointError(f"rank 0 could not save {path}: {outcome[0]}. "
                              f"The previous checkpoint, if any, is untouched.")
    return Path(path)


_PLAIN = (int, float, str, bool, type(None), torch.Tensor)


def _check_plain(value: Any, where: str) -> None:
    """Refuse what ``read`` (``weights_only=True``) would refuse later: numpy scalars, objects."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(k, f"a key of {where}")
            _check_plain(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple, set)):  # a frozenset is refused by weights_only
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif not isinstance(value, _PLAIN) or type(value).__module__ == "numpy":  # np.float64 is a float
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        hint = " (convert it with .item() or float())" if kind.startswith("numpy.") else ""
        raise CheckpointError(f"{where} is a {kind}, which a safe load (weights_only=True) refuses; "
                              f"save only tensors, numbers, strings, lists and dicts{hint}. "
                              f"Nothing was written.")


_SAVED = {"model", "optimizer", "scaler", "step", "epoch", "sampler", "rng", "world_size", "extra"}


def model_mismatch(model: nn.Module, state: dict) -> list[str]:
    """How ``state`` differs from ``model``'s own state_dict: missing, unexpected, reshaped."""
    own = unwrap(model).state_dict()
    problems = [f"missing {k}" for k in own if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in own]
    problems += [f"{k}: checkpoint {tuple(v.shape)} {v.dtype}, model {tuple(own[k].shape)} "
                 f"{own[k].dtype}" for k, v in state.items()
                 if k in own and (v.shape != own[k].shape or v.dtype != own[k].dtype)]
    return problems


def _optimizer_mismatch(optimizer: torch.optim.Optimizer, state: dict | None,
                        saved_class: str | None) -> list[str]:
    """How a saved optimizer state differs from ``optimizer``: its class, its parameter groups
    (sizes), and the names of the per-parameter states it keeps. (Settings are not compared when
    the class is known: a torch release may add one, and load_state_dict fills it in.)"""
    if state is None:
        return ["the checkpoint has no optimizer state"]
    mine_class = type(optimizer).__name__
    if saved_class is not None and saved_class != mine_class:
        return [f"optimizer: checkpoint {saved_class}, here {mine_class}"]
    problems = []
    mine = [len(g["params"]) for g in optimizer.param_groups]
    theirs = [len(g["params"]) for g in state["param_groups"]]
    if mine != theirs:
        problems.append(f"optimizer parameter groups: checkpoint {theirs}, here {mine}")
    if saved_class is None:  # a file without the class: the groups' setting names tell SGD from Adam
        for i, (g, h) in enumerate(zip(optimizer.param_groups, state["param_groups"])):
            ours, saved = set(g) - {"params"}, set(h) - {"params"}
            if ours != saved:
                problems.append(f"optimizer group {i} settings: checkpoint {sorted(saved)}, "
                                f"here {sorted(ours)}")
    own_state = optimizer.state_dict()["state"]
    for k, v in state["state"].items():
        if k in own_state and set(own_state[k]) != set(v):
            problems.append(f"optimizer state of parameter {k}: checkpoint {sorted(v)}, "
                            f"here {sorted(own_state[k])}")
            break
    return problems


def _device_of(model: nn.Module) -> torch.device:
    return next(unwrap(model).parameters()).device


def load(path: str | os.PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
         scaler: torch.amp.GradScaler | None = None, sampler: ResumableSampler | None = None,
         map_location: Any = None) -> Resume:
    """Load a checkpoint written by ``save`` into this rank's objects. Collective.

    A barrier comes first, so no rank reads before rank 0 has finished writing.
    Everything is checked before anything is copied: on any error the model,
    optimizer, scaler and sampler are exactly as they were.
    """
    _barrier()
    ckpt = read(path, map_location if map_location is not None else _device_of(model))
    absent = sorted(_SAVED - ckpt.keys())
    if absent:
        raise IncompatibleCheckpoint(f"{path} is not a training checkpoint: it has no {absent}.")
    problems = model_mismatch(model, ckpt["model"])
    if optimizer is not None:
        problems += _optimizer_mismatch(optimizer, ckpt["optimizer"], ckpt.get("optimizer_class"))
    if scaler is not None and scaler.is_enabled() and not ckpt["scaler"]:
        problems.append("the GradScaler is enabled here but the checkpoint has no scaler state")
    if sampler is not None:
        problems += sampler.mismatch(ckpt["sampler"]) if ckpt["sampler"] else \
            ["the checkpoint has no sampler position"]
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise IncompatibleCheckpoint(f"{path} does not fit this job: {shown}. "
                                     f"Nothing was loaded; the model and optimizer are unchanged.")
    # Only now copy: nothing above touched the objects.
    unwrap(model).load_state_dict(ckpt["model"])
    if optimizer is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None and ckpt["scaler"]:
        scaler.load_state_dict(ckpt["scaler"])
    if sampler is not None:
        sampler.load_state_dict(ckpt["sampler"])
    if len(ckpt["rng"]) == _world_size():
        set_rng_state(ckpt["rng"][_rank()], _device_of(model))
    else:
        warnings.warn(f"{path} was saved by {len(ckpt['rng'])} ranks and is loaded by "
                      f"{_world_size()}: random number generators not restored.", stacklevel=2)
    return Resume(ckpt["step"], ckpt["epoch"], ckpt["extra"], Path(path))

"""Checkpoints under DDP that survive a crash, resume exactly, and refuse what they should.

The article's section 5.4 saves with ``torch.save(ckpt, path)`` on rank 0 and
loads with ``torch.load(path)`` on every rank. This module keeps that shape
and fixes it:

* **atomic**: write a temporary file in the same folder, fsync, ``os.replace``.
  A crash mid-write leaves the previous checkpoint whole (``atomic_save``);
* **safe**: ``torch.load(weights_only=True)``, because unpickling runs code,
  and ``map_location``, so each rank reads onto its own device (``read``);
* **collective**: rank 0 writes from ``model.module``; every rank loads only
  after a barrier, so nobody reads a file rank 0 is still writing;
* **complete**: model, optimizer, GradScaler, epoch, step, the sampler's
  position and every rank's RNG, so a resumed run repeats the uninterrupted
  one exactly (``save`` / ``load``, with ``ResumableSampler``);
* **checked**: a digest over every value catches bytes changed on disk, and
  a checkpoint of another model is rejected *before* anything is copied, so
  a bad file leaves the model, the optimizer and the file as they were.

Sharded checkpoints (each rank writes its own part, and a different number
of ranks can read them back) go through ``torch.distributed.checkpoint``:
``save_sharded`` / ``load_sharded``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import random
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DistributedSampler

FORMAT = "helpers.checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint could not be used. Nothing in memory or on disk was changed."""


class CorruptCheckpoint(CheckpointError):
    """The file is truncated, damaged, or its contents do not match the digest saved with them."""


class UnsafeCheckpoint(CheckpointError):
    """``weights_only=True`` refused the file: its pickle names a function or class to call."""


class IncompatibleCheckpoint(CheckpointError):
    """The checkpoint is whole but belongs to another model, optimizer or job layout."""


# --- Writing a file so that a crash leaves the old one -------------------------------------

def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable: a directory entry lives in the directory's own blocks."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows has no directory fsync; os.replace is still atomic
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` that never leaves a partial file at ``path``.

    The temporary file is in the same folder because ``os.replace`` is atomic only
    within one file system. Whoever reads ``path`` sees the old file or the new
    one, never half of either; a crash leaves at most a stray ``.*.tmp`` file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def stray_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Temporary files left by saves that were killed mid-write."""
    return sorted(Path(folder).glob(".*.tmp"))


def remove_stray_temp_files(folder: str | os.PathLike) -> int:
    """Delete them. Call only when no save can be running (at job start, on rank 0)."""
    strays = stray_temp_files(folder)
    for p in strays:
        p.unlink(missing_ok=True)
    return len(strays)


def latest(folder: str | os.PathLike, pattern: str = "step_*.pt") -> Path | None:
    """The newest checkpoint in ``folder`` by the number in its name, or None."""
    def number(p: Path) -> int:
        digits = re.findall(r"\d+", p.stem)
        return int(digits[-1]) if digits else -1
    found = sorted(Path(folder).glob(pattern), key=number)
    return found[-1] if found else None


# --- Reading a file safely -----------------------------------------------------------------

def digest(obj: Any) -> str:
    """A SHA-256 over every tensor's bytes and every plain value, in order.

    ``torch.load`` does not check the data it reads: bytes flipped inside a tensor
    load without a word. Comparing this digest with the one saved does.
    """
    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(x.shape)}".encode())
            h.update(t.view(torch.uint8).numpy())  # the buffer itself: no copy
        elif isinstance(x, dict):
            h.update(b"{")
            for k, v in x.items():
                walk(k)
                walk(v)
            h.update(b"}")
        elif isinstance(x, (list, tuple)):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        else:
            h.update(f"{type(x).__name__}:{x!r};".encode())

    walk(obj)
    return h.hexdigest()


def seal(body: dict) -> dict:
    """``body`` with the format tag and its digest: what ``read`` accepts."""
    body = {"format": FORMAT, **body}
    return {**body, "digest": digest(body)}


def _first_line(e: BaseException) -> str:
    """The first sentence of an exception's message: torch's run on for a paragraph."""
    line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    return line.split(". ")[0].rstrip(".")


def read(path: str | os.PathLike, map_location: Any = "cpu") -> dict:
    """``torch.load(path, map_location, weights_only=True)`` with clear errors and a digest check.

    ``weights_only=True`` builds only tensors and plain containers; a pickle that
    names anything else to call is refused instead of run. ``map_location`` puts
    every tensor on this rank's device, whatever device it was saved from.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    size = path.stat().st_size
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if refused:
            raise UnsafeCheckpoint(
                f"{path} was refused: its pickle calls {refused.group(1)}, and unpickling runs "
                f"whatever a pickle names. torch.load(weights_only=True) builds only tensors and "
                f"plain containers. Load it with weights_only=False only if you wrote it yourself. "
                f"The file was left as it is.") from None
        why = re.search(r"WeightsUnpickler error:\s*([^\n]+)", str(e))
        raise CorruptCheckpoint(f"{path} ({size:,} bytes) is corrupt: its pickle does not parse "
                                f"({why.group(1) if why else _first_line(e)}). "
                                f"The file was left as it is.") from None
    except Exception as e:  # noqa: BLE001 - zip, EOF and key errors all mean a damaged file
        raise CorruptCheckpoint(
            f"{path} ({size:,} bytes) is truncated or corrupt; torch.load said: "
            f"{type(e).__name__}: {_first_line(e)}. The file was left as it is; "
            f"load an earlier checkpoint.") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        keys = list(ckpt)[:6] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise IncompatibleCheckpoint(f"{path} was not written by helpers.checkpoint.save "
                                     f"(it holds {keys}).")
    body = {k: v for k, v in ckpt.items() if k != "digest"}
    if digest(body) != ckpt.get("digest"):
        raise CorruptCheckpoint(
            f"{path} loads, but its contents do not match the digest saved with them: bytes "
            f"changed on disk after the save. Its tensors cannot be trusted; load an earlier "
            f"checkpoint. The file was left as it is.")
    return ckpt


# --- Resuming exactly: where the sampler stood, and every rank's random numbers ------------

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


def rng_state() -> dict:
    """This process's random number generators (dropout draws from them)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- The checkpoint of a DDP job ------------------------------------------------------------

def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP (or DataParallel): its state_dict keys carry no ``module.`` prefix."""
    return model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model


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
    rngs = [None] * _world_size()
    if dist.is_initialized():
        dist.all_gather_object(rngs, rng_state())
    else:
        rngs = [rng_state()]
    outcome = [None]
    if _rank() == 0:
        try:
            atomic_save(seal({
                "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict() if optimizer else None,
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


def _optimizer_mismatch(optimizer: torch.optim.Optimizer, state: dict | None) -> list[str]:
    if state is None:
        return ["the checkpoint has no optimizer state"]
    mine = [len(g["params"]) for g in optimizer.param_groups]
    theirs = [len(g["params"]) for g in state["param_groups"]]
    return [] if mine == theirs else [f"optimizer parameter groups: checkpoint {theirs}, here {mine}"]


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
        problems += _optimizer_mismatch(optimizer, ckpt["optimizer"])
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
        set_rng_state(ckpt["rng"][_rank()])
    else:
        warnings.warn(f"{path} was saved by {len(ckpt['rng'])} ranks and is loaded by "
                      f"{_world_size()}: random number generators not restored.", stacklevel=2)
    return Resume(ckpt["step"], ckpt["epoch"], ckpt["extra"], Path(path))


# --- Sharded checkpoints: torch.distributed.checkpoint --------------------------------------

# What a DCP .metadata file may name. DCP reads it with plain pickle.load, which
# would run anything the file names; these are the classes DCP itself writes.
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_DCP_OTHERS = {("torch", "Size"), ("torch.serialization", "_get_layout"),
               ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "Path"),
               ("collections", "OrderedDict")}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        obj = super().find_class(module, name) if (
            module in _DCP_MODULES or (module, name) in _DCP_OTHERS
            or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype))) else None
        if obj is None or (module in _DCP_MODULES and not isinstance(obj, type)):
            raise UnsafeCheckpoint(f"the sharded checkpoint's .metadata names {module}.{name}, "
                                   f"which DCP never writes; refusing to unpickle it")
        return obj


def check_sharded(folder: str | os.PathLike) -> None:
    """Unpickle a DCP folder's ``.metadata`` with an allowlist before DCP does it without one."""
    meta = Path(folder) / ".metadata"
    if not meta.is_file():
        raise CorruptCheckpoint(f"{folder} is not a complete sharded checkpoint: no .metadata "
                                f"(DCP writes it last, so a save that died leaves none)")
    try:
        with open(meta, "rb") as f:
            _MetadataUnpickler(f).load()
    except UnsafeCheckpoint as e:
        raise UnsafeCheckpoint(f"{folder}: {e}. The folder was left as it is.") from None
    except Exception as e:  # noqa: BLE001 - any other unpickling failure: a damaged file
        raise CorruptCheckpoint(f"{meta} is corrupt: {type(e).__name__}: {_first_line(e)}") from None


@contextlib.contextmanager
def _single_process_is_meant():
    """DCP warns on every call without a process group; here one process is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled|unavailable)")
        yield


def save_sharded(folder: str | os.PathLike, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None = None) -> Path:
    """Every rank writes its own shards with DCP. Collective.

    DCP writes into a temporary folder; rank 0 renames it to ``folder`` once
    every rank has finished, so the name exists only for a complete checkpoint.
    One folder per save (``step_000100``), as torchtitan does: a rename cannot
    replace a folder that exists.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    final = Path(folder)
    if final.exists():
        raise FileExistsError(f"{final} exists; save each sharded checkpoint to a new folder")
    tmp = final.with_name(f".{final.name}.tmp")  # the same name on every rank
    if _rank() == 0 and tmp.exists():
        shutil.rmtree(tmp)  # left by a save that died
    _barrier()
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optimizer": osd}
    # Collective: it returns after rank 0 has written .metadata, which DCP does last.
    with _single_process_is_meant():
        dcp.save(state, checkpoint_id=tmp, no_dist=not dist.is_initialized())
    if _rank() == 0:
        for p in tmp.iterdir():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        os.rename(tmp, final)
        _fsync_dir(final.parent)
    _barrier()
    return final


def load_sharded(folder: str | os.PathLike, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
    """Load a DCP checkpoint into ``model`` however it is sharded now. Collective.

    DCP matches every saved shard against the shards this rank owns now, so a
    checkpoint written by 2 ranks loads into 1 rank or 4 (resharding).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_state_dict,
                                                         set_model_state_dict, set_state_dict)
    from torch.utils._pytree import tree_map_only
    check_sharded(folder)
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optimizer": osd}
    # DCP reads in place into the tensors it is given; these share storage with the
    # parameters, so load into copies: a load that fails half-way then changes nothing.
    state = tree_map_only(torch.Tensor, lambda t: t.detach().clone(), state)
    try:
        with _single_process_is_meant():
            dcp.load(state, checkpoint_id=folder, no_dist=not dist.is_initialized())
    except (Exception, dcp.CheckpointException) as e:  # noqa: BLE001 - the latter is a BaseException
        raise IncompatibleCheckpoint(f"{folder} does not fit this model: {_first_line(e)[:300]}. "
                                     f"Nothing was copied into the model.") from None
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])

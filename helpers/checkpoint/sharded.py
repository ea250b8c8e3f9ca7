"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP).

Each rank writes its own part, and a job of any other layout can read them back.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from .atomic import _fsync_dir
from .ddp import _barrier, _rank
from .errors import CorruptCheckpoint, IncompatibleCheckpoint, UnsafeCheckpoint
from .read import _first_line


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

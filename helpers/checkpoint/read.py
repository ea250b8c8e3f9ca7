"""Reading a checkpoint safely: ``weights_only=True``, clear errors, and a digest over every value."""
from __future__ import annotations

import hashlib
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from .errors import FORMAT, CorruptCheckpoint, IncompatibleCheckpoint, UnsafeCheckpoint


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
        elif isinstance(x, (set, frozenset)):  # iteration order depends on PYTHONHASHSEED
            h.update(b"<")
            for v in sorted(x, key=repr):
                walk(v)
            h.update(b">")
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

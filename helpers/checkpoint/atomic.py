"""Writing a file so that a crash leaves the old one whole: temp file, fsync, os.replace."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch


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

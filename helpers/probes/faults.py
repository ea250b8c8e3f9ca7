"""Faults caused on purpose in the notebook's own process (chapter 5.4): a save killed mid-write,
and files that carry code. The rank-side workloads are ``helpers.recipes.checkpointing``.
"""
from __future__ import annotations

import itertools
import os
import pickle
import signal
import time
from pathlib import Path

import torch

from helpers import checkpoint
from helpers.models import SimpleModel


def save_versions(path: str, megabytes: int = 32, first: int = 1, atomic: bool = True) -> None:
    """Save versions first, first+1, ... of a checkpoint to ``path`` until killed.

    Version v holds ``weights`` filled with v, so a reader can tell a whole file
    from a mix. ``atomic=False`` is the article's plain ``torch.save(ckpt, path)``.
    """
    weights = torch.empty(megabytes * 2**20 // 4)
    for version in itertools.count(first):
        weights.fill_(float(version))
        sealed = checkpoint.seal({"version": version, "weights": weights})
        if atomic:
            checkpoint.atomic_save(sealed, path)
        else:
            torch.save(sealed, path)


def read_version(path: str | os.PathLike) -> int:
    """The version a ``save_versions`` file holds, after checking it is whole and unmixed."""
    ckpt = checkpoint.read(path)
    version = ckpt["version"]
    if not bool((ckpt["weights"] == version).all()):
        raise checkpoint.CorruptCheckpoint(f"{path} mixes versions")
    return version


def start_saver(path: str | os.PathLike, megabytes: int = 32, first: int = 1,
                atomic: bool = True):
    """Run ``save_versions`` in a child process (forked from the torch-preloaded forkserver)."""
    from helpers.launch import forkserver_context
    proc = forkserver_context().Process(target=save_versions, args=(str(path), megabytes, first, atomic),
                                        daemon=True)
    proc.start()
    return proc


def _writing(path: Path, atomic: bool, largest: int) -> bool:
    """Is a save of a version after the first in progress right now?"""
    if atomic:  # a whole file under the name, and the next one growing beside it
        return path.exists() and any(p.stat().st_size > 0 for p in checkpoint.stray_temp_files(path.parent))
    return 0 < path.stat().st_size < largest if path.exists() else False


def kill_mid_write(path: str | os.PathLike, atomic: bool = True, megabytes: int = 32,
                   tries: int = 5, timeout: float = 30.0) -> dict:
    """SIGKILL a process while it is writing a checkpoint; return what it left on disk.

    Waits until a save after the first is under way, then kills the saver. If the
    write finished in the instant between looking and killing, it tries again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, tries + 1):
        for p in [path, *checkpoint.stray_temp_files(path.parent)]:
            p.unlink(missing_ok=True)
        proc, largest = start_saver(path, megabytes, atomic=atomic), 0
        deadline = time.monotonic() + timeout
        try:
            while not _writing(path, atomic, largest):
                if not proc.is_alive():
                    raise RuntimeError(f"the saver died on its own (exit code {proc.exitcode})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the saver did not start a second save in {timeout:g} s")
                if path.exists():
                    largest = max(largest, path.stat().st_size)
                time.sleep(0.0005)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.join()
        temps = checkpoint.stray_temp_files(path.parent)
        mid_write = bool(temps) if atomic else path.stat().st_size < largest
        if mid_write:
            return {"attempts": attempt, "exitcode": proc.exitcode, "file_bytes": path.stat().st_size,
                    "whole_bytes": largest or path.stat().st_size,
                    "temp_files": {p.name: p.stat().st_size for p in temps}}
    raise RuntimeError(f"no kill landed mid-write in {tries} tries")


# --- Files that run code when they are loaded ----------------------------------------------

class RunsCode:
    """An object whose unpickling runs ``code``: what a hostile checkpoint carries."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code, {})  # pickle stores "call exec with this string"


def write_code_carrying_checkpoint(path: str | os.PathLike, marker: str | os.PathLike) -> Path:
    """A checkpoint that looks like any other, plus a payload that writes ``marker`` when unpickled."""
    code = f"open({str(marker)!r}, 'w').write('written while a checkpoint was unpickled')"
    torch.save({"epoch": 3, "model_state_dict": SimpleModel().state_dict(),
                "note": RunsCode(code)}, path)
    return Path(path)


def write_code_carrying_metadata(folder: str | os.PathLike, marker: str | os.PathLike) -> Path:
    """Replace a sharded checkpoint's ``.metadata`` with a pickle that writes ``marker``."""
    code = f"open({str(marker)!r}, 'w').write('written while DCP metadata was unpickled')"
    meta = Path(folder) / ".metadata"
    meta.write_bytes(pickle.dumps(RunsCode(code)))
    return meta

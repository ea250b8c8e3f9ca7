"""What ``launch()`` and ``%%torchrun`` accept: every argument checked before anything starts.

A wrong argument is refused with one line that names it, what it must be and what it was:
never a raw TypeError from deep inside, and never a job that runs with a meaning nobody
asked for (a NaN timeout compares false with every deadline, so such a job never timed out).
"""
from __future__ import annotations

import importlib
import math
from numbers import Real
from typing import Any, Callable

import torch.distributed as dist

from . import plans
from .machine import this as this_machine


class LaunchError(RuntimeError):
    """The job could not run as asked (bad arguments); nothing was started."""


def check_importable(fn: Callable) -> None:
    """Workers import ``fn`` by name; a function typed in a notebook cell has none."""
    if not callable(fn):
        raise LaunchError(f"launch() runs a function; got {fn!r}, which cannot be called.")
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    name = getattr(fn, "__name__", repr(fn))
    hint = ("Define it with def in a module (e.g. helpers/recipes/) and import it, "
            "or run the cell's code with %%torchrun.")
    if module in (None, "__main__") or "<" in qualname:
        where = ("defined in the notebook" if module == "__main__" else
                 "a lambda" if name == "<lambda>" else "defined in a local scope")
        raise LaunchError(f"launch() cannot send {name!r} to other processes: it is {where}. {hint}")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        raise LaunchError(f"launch() cannot import {module}.{qualname} as the same function "
                          f"(was it redefined after import?). {hint}")


def is_count(n: Any, least: int) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= least


def check_seconds(timeout: Any) -> float:
    """A timeout is a finite number of seconds above zero: NaN and infinity would never expire."""
    if isinstance(timeout, bool) or not isinstance(timeout, Real) or not math.isfinite(timeout) or timeout <= 0:
        raise LaunchError(f"timeout must be a finite positive number of seconds, got {timeout!r}.")
    return float(timeout)


def check_args(nprocs: Any, backend: Any, timeout: Any, max_restarts: Any = 0, threads: Any = None,
               on_progress: Any = None) -> None:
    if not is_count(nprocs, 1):
        raise LaunchError(f"nprocs must be an integer >= 1, got {nprocs!r}.")
    if not is_count(max_restarts, 0):
        raise LaunchError(f"max_restarts must be an integer >= 0, got {max_restarts!r}.")
    if threads is not None and not is_count(threads, 1):
        raise LaunchError(f"threads must be an integer >= 1 or None (this machine's share), got {threads!r}.")
    if on_progress is not None and not callable(on_progress):
        raise LaunchError(f"on_progress must be a function of one record, or None; got {on_progress!r}.")
    check_seconds(timeout)
    if nprocs > plans.most_ranks(this_machine()):
        raise LaunchError(f"nprocs={nprocs} is more ranks than this machine can hold "
                          f"({plans.most_ranks_why(this_machine())}); use fewer.")
    if backend not in (None, "gloo", "nccl"):
        raise LaunchError(f"backend must be 'gloo', 'nccl' or None (pick for me), got {backend!r}.")
    if backend == "nccl" and (not dist.is_nccl_available() or this_machine().n_gpus < nprocs):
        raise LaunchError(f"backend='nccl' needs {nprocs} GPUs; this machine has "
                          f"{this_machine().n_gpus}. Use backend=None to get gloo on the CPU.")
    if backend == "gloo" and not dist.is_gloo_available():
        raise LaunchError("this torch build has no gloo backend; use backend=None.")


def shown_ranks(show: Any, nprocs: int) -> set[int]:
    """The ranks whose output a launch streams; anything that would silently show nothing is refused."""
    if show == "all":
        return set(range(nprocs))
    if show is None:
        return set()
    ranks = [show] if not isinstance(show, (list, tuple, set)) else list(show)
    if not ranks or any(not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < nprocs for r in ranks):
        raise LaunchError(f"show must be a rank in 0..{nprocs - 1}, a list of them, 'all' or None; "
                          f"got {show!r}.")
    return set(ranks)

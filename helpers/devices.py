"""Where a rank's tensors live, decided once: its backend picks its device, and its device picks
how tensors meet a collective, how random states are saved, how meshes are built and how time is read.

Every recipe, probe and checkpoint asks here, so that a new chapter cannot put a CPU tensor into an
NCCL collective, a GPU tensor into ``torch.set_rng_state``, or read a GPU's clock before its
kernels ran::

    device = devices.for_rank(backend, local_rank)      # cuda:LOCAL_RANK under NCCL, else the CPU
    t = torch.ones(4, device=devices.of_group())        # a tensor the default group can reduce
    mesh = devices.mesh(device, (2, 2), ("dp", "tp"))    # the mesh follows the ranks' device
    devices.sync(device); time.perf_counter()            # the GPU's work is done before the clock
"""
from __future__ import annotations

import contextlib
import random
import resource
import sys
from typing import Callable

import torch
import torch.distributed as dist

from .machine import Machine
from .machine import this as this_machine


def pinned_backend(recipe: Callable) -> str | None:
    """The backend a recipe's module pins, or None to let the machine decide.

    A module that studies gloo or CPU cores (4.3's regimes, 7.2's hangs) says ``BACKEND = "gloo"``;
    ``helpers.launch`` and ``python -m helpers.run`` then run it over gloo on every machine, so the
    CPU tensors it hands its collectives are right under torchrun on a GPU node too.
    """
    return getattr(sys.modules.get(getattr(recipe, "__module__", "")), "BACKEND", None)


def for_rank(backend: str, local_rank: int = 0, m: Machine | None = None) -> torch.device:
    """The device of a rank: its own GPU (``cuda:LOCAL_RANK``) under NCCL, the CPU under gloo.

    NCCL refuses two ranks of one group on one GPU ("Duplicate GPU detected"), and a rank whose
    ``LOCAL_RANK`` has no GPU cannot run at all: both are refused here, with the reason.
    """
    if backend != "nccl":
        return torch.device("cpu")
    gpus = (m or this_machine()).n_gpus
    if local_rank >= gpus:
        raise RuntimeError(
            f"NCCL needs a GPU of its own for every rank on a host: LOCAL_RANK {local_rank} has none "
            f"({gpus} GPU{'s' if gpus != 1 else ''} here). Start fewer ranks per node, or run on the "
            f"CPU with HELPERS_BACKEND=gloo (two torchrun agents on one host each count from "
            f"LOCAL_RANK 0, and would share cuda:0)")
    return torch.device("cuda", local_rank)


def of_process(m: Machine | None = None) -> torch.device:
    """The device a single-process probe runs on (3.3, 5.2): what a job of one rank would get, the
    first GPU where there is one, else the CPU."""
    m = m or this_machine()
    return for_rank(m.backend(1), 0, m)


def of_group(group=None) -> torch.device:
    """Where the tensors handed to ``group``'s collectives must live: this rank's GPU under NCCL,
    the CPU under gloo (code that has no ``Context`` at hand asks the group itself)."""
    if dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def mesh(device: torch.device, shape: tuple[int, ...], names: tuple[str, ...] | None = None):
    """A DeviceMesh over the default group whose device type is the ranks' own.

    Never leave it to torch: ``fully_shard`` and DTensor build a default mesh on
    ``torch._C._get_accelerator()``, which is ``cuda`` on any machine with a GPU, even inside a
    gloo rank, and then move its parameters to cuda:0 while its inputs stay on the CPU.
    """
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device.type, tuple(shape), mesh_dim_names=names)


@contextlib.contextmanager
def cpu_threads(n: int | None):
    """torch's intra-op threads set to ``n`` inside the block (None: left as they are), restored after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sync(device: torch.device | None) -> None:
    """Wait until ``device`` has finished the work queued on it (a no-op on the CPU).

    A GPU runs its kernels after the host has queued them, and NCCL's send, recv and all_reduce
    return at once: without this, a clock read measures the queueing, not the work.
    """
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def rng_state(device: torch.device) -> dict:
    """This process's random generators: the CPU's, Python's, and the rank's own GPU's if it has one.

    Only the rank's own GPU: reading every GPU's state would start a CUDA context on each of them,
    from every rank, and a state saved on 8 GPUs could not be put back on a machine with 2.
    """
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Put back what ``rng_state`` saved. The generators' states are byte tensors on the CPU,
    whatever ``map_location`` a checkpoint was loaded with (torch refuses them on a GPU)."""
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def peak_memory(device: torch.device) -> dict:
    """The most memory this process has held: the GPU's allocator on a GPU, and the host's RSS.

    Both, named: a GPU run's model and activations are in the first, its Python and torch in the
    second, and a figure that called either one "the memory" would mislead.
    """
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"host_peak_rss_bytes": rss if sys.platform == "darwin" else rss * 1024}  # macOS: bytes
    if device.type == "cuda":
        out["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(device)
    return out

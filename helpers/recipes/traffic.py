"""What collectives a rank calls, and the bytes it really sends (chapter 6.2).

``Traffic`` is a thin wrapper around ``torch.distributed``'s collectives: inside it, every
call of ``all_reduce``, ``all_gather_single`` or ``reduce_scatter_single`` (under any name
this torch has for them: ``compat.COLLECTIVES``) is noted as (collective, bytes of the whole
message). FSDP2, the ZeRO optimizers of ``recipes.zero`` and DDP's Python communication hook
all call them through the module, so all three are seen. Textbook volumes follow from these
(``theory.sharding.bytes_sent``).

It also reads what the process wrote to its sockets: Linux counts every byte a process
writes, sockets included, in ``/proc/self/io`` (``wchar``). gloo's TCP transport writes
each message with ``writev``, so the difference over a step is what the rank sent, whatever
algorithm gloo chose. NCCL's traffic does not pass through there (NVLink, shared memory, or
its own network proxy): its count would read about 0, so it is not read at all unless every
collective went over gloo.
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import compat

SOCKET_BACKENDS = frozenset({"gloo"})  # the backends whose collectives are writes to this process's sockets


def written_bytes() -> int | None:
    """Bytes this process has written so far, sockets included (Linux); None elsewhere."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration):
        return None


def counts_sockets(backend: str) -> bool:
    """Whether this process's socket writes show what collectives over ``backend`` sent: gloo's,
    where the system counts what a process writes (Linux)."""
    return backend in SOCKET_BACKENDS and written_bytes() is not None


def _argument(params: list[str], name: str, args: tuple, kwargs: dict, default=None):
    """The argument passed for parameter ``name``, by position or by keyword."""
    i = params.index(name)
    return args[i] if len(args) > i else kwargs.get(name, default)


class Traffic:
    """``with Traffic() as t: ...``; then ``t.calls`` lists (collective, message bytes) in order,
    ``t.backends`` the backends of the groups they went over, and ``t.wire_bytes`` is what the
    process wrote meanwhile: None where it cannot be read (not Linux), or where a collective went
    over a backend whose bytes are not socket writes (NCCL)."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.backends: set[str] = set()
        self.wire_bytes: int | None = None
        self._saved: dict = {}

    def _wrap(self, name: str, op: str, message: str):
        real = self._saved[name]
        params = list(inspect.signature(real).parameters)  # once: a call must cost next to nothing

        def counted(*args, **kwargs):
            t = _argument(params, message, args, kwargs)
            self.calls.append((op, t.numel() * t.element_size()))
            self.backends.add(str(dist.get_backend(_argument(params, "group", args, kwargs))))
            return real(*args, **kwargs)
        return counted

    def __enter__(self) -> "Traffic":
        for name, (op, message) in compat.COLLECTIVES.items():
            if hasattr(dist, name):
                self._saved[name] = getattr(dist, name)
                setattr(dist, name, self._wrap(name, op, message))
        self._start = written_bytes()
        return self

    def __exit__(self, *exc) -> None:
        end = written_bytes()
        for name, real in self._saved.items():
            setattr(dist, name, real)
        counted = all(counts_sockets(b) for b in self.backends) and None not in (end, self._start)
        self.wire_bytes = end - self._start if counted else None

    def totals(self) -> dict[str, int]:
        """Message bytes by collective."""
        out: dict[str, int] = {}
        for op, nbytes in self.calls:
            out[op] = out.get(op, 0) + nbytes
        return out


# --- By mesh dimension (chapter 8.4) --------------------------------------------------------------

_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "send", "recv", "broadcast", "barrier")


def _kind(func) -> str | None:
    name = func._overloadpacket.__name__.replace("_", "").replace("base", "")
    return next((k for k in _KINDS if k.replace("_", "") in name), None)


def _message_bytes(kind: str, func, args) -> int:
    """The whole message: an all_gather's output, a reduce_scatter's input, the tensor sent."""
    tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else [a]) if isinstance(t, torch.Tensor)]
    sizes = [t.numel() * t.element_size() for t in tensors]
    if kind == "all_gather" and func.namespace == "_c10d_functional":
        return sizes[0] * int(args[1])  # (shard, group_size, group_name)
    return max(sizes, default=0) if kind != "all_reduce" else sum(sizes)


def _group_name(args, names) -> str | None:
    """The process group an op ran on, among ``names``: a functional collective passes the
    group's name, a c10d op the group itself (boxed, as the dispatcher carries it)."""
    for a in args:
        if isinstance(a, torch.ScriptObject) and a._type().qualified_name().endswith(".ProcessGroup"):
            a = dist.ProcessGroup.unbox(a).group_name
        if isinstance(a, str) and a in names:
            return a
    return None


class MeshTraffic(TorchDispatchMode):
    """Every collective and point-to-point op dispatched meanwhile, as (dimension, kind, message
    bytes): the dimension is the mesh dimension whose process group it ran on. FSDP2 (c10d ops),
    DTensor (functional collectives) and the pipeline's sends all pass through torch's dispatcher."""

    def __init__(self, mesh):
        super().__init__()
        self.dims = {mesh[d].get_group().group_name: d for d in mesh.mesh_dim_names}
        self.calls: list[tuple[str, str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional") and (kind := _kind(func)):
            dim = self.dims.get(_group_name(args, self.dims), "other")
            self.calls.append((dim, kind, _message_bytes(kind, func, args)))
        return func(*args, **(kwargs or {}))

    def totals(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for dim, kind, nbytes in self.calls:
            out.setdefault(dim, {}).setdefault(kind, 0)
            out[dim][kind] += nbytes
        return out

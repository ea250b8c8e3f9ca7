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

import torch.distributed as dist

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

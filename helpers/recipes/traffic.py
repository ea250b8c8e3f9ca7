"""What collectives a rank calls, and the bytes it really sends (chapter 6.2).

``Traffic`` is a thin wrapper around ``torch.distributed``'s collectives: inside it, every
call of ``all_reduce``, ``all_gather_single`` or ``reduce_scatter_single`` (and their older
names) is noted as (collective, bytes of the whole message). FSDP2, the ZeRO optimizers of
``recipes.zero`` and DDP's Python communication hook all call them through the module, so
all three are seen. Textbook volumes follow from these (``theory.sharding.bytes_sent``).

It also reads what the process wrote to its sockets: Linux counts every byte a process
writes, sockets included, in ``/proc/self/io`` (``wchar``). gloo's TCP transport writes
each message with ``writev``, so the difference over a step is what the rank sent, whatever
algorithm gloo chose. NCCL's GPU traffic does not pass through there.
"""
from __future__ import annotations

import torch.distributed as dist

# each wrapped name: the collective it performs, and where its whole message is (position, keyword)
_WRAPPED = {"all_reduce": ("all_reduce", 0, "tensor"),
            "all_gather_single": ("all_gather", 0, "output_tensor"),
            "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
            "reduce_scatter_single": ("reduce_scatter", 1, "input"),
            "reduce_scatter_tensor": ("reduce_scatter", 1, "input")}


def written_bytes() -> int | None:
    """Bytes this process has written so far, sockets included (Linux); None elsewhere."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration):
        return None


class Traffic:
    """``with Traffic() as t: ...``; then ``t.calls`` lists (collective, message bytes) in order,
    and ``t.wire_bytes`` is what the process wrote meanwhile (None where it cannot be read)."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.wire_bytes: int | None = None
        self._saved: dict = {}

    def _wrap(self, name: str, op: str, position: int, keyword: str):
        real = self._saved[name]

        def counted(*args, **kwargs):
            t = args[position] if len(args) > position else kwargs[keyword]
            self.calls.append((op, t.numel() * t.element_size()))
            return real(*args, **kwargs)
        return counted

    def __enter__(self) -> "Traffic":
        for name, (op, position, keyword) in _WRAPPED.items():
            if hasattr(dist, name):
                self._saved[name] = getattr(dist, name)
                setattr(dist, name, self._wrap(name, op, position, keyword))
        self._start = written_bytes()
        return self

    def __exit__(self, *exc) -> None:
        end = written_bytes()
        for name, real in self._saved.items():
            setattr(dist, name, real)
        self.wire_bytes = None if end is None or self._start is None else end - self._start

    def totals(self) -> dict[str, int]:
        """Message bytes by collective."""
        out: dict[str, int] = {}
        for op, nbytes in self.calls:
            out[op] = out.get(op, 0) + nbytes
        return out

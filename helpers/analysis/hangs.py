"""Chapter 7.2: what each tool said about a hang, and whether that names its cause."""
from __future__ import annotations

import re

# The part of each error that carries its news, in the order they are looked for.
SAYINGS = [
    re.compile(r"Collectives differ in the following aspects:\s*(.*)"),   # TORCH_DISTRIBUTED_DEBUG=DETAIL
    re.compile(r"Ranks? [\d, ]+ failed to pass monitoredBarrier in \d+ ms"),  # monitored_barrier, and DETAIL
    re.compile(r"Timed out waiting \d+ms for \w+ operation"),                # gloo's own timeout
    re.compile(r"Received data size doesn't match expected size"),           # gloo's check, then abort
]


def said(error: BaseException) -> str:
    """One line: what the error tells the reader (per rank for a launch's timeout)."""
    where = getattr(error, "where", None)
    if where is not None:
        return "; ".join(f"rank {r} {w}" for r, w in sorted(where.items()))
    text = str(error).split("\n\n--- traceback")[0]
    for pattern in SAYINGS:
        if m := pattern.search(text):
            return f"rank {error.rank}: " + (m.group(1) if m.groups() else m.group(0)).strip()
    return text.splitlines()[0][:160]


def names_cause(case: str, error: BaseException) -> bool:
    """Whether the error points at rank 1's bug: the rank that skipped, both ops, or both shapes."""
    where = getattr(error, "where", None)
    if where is not None:
        ops = {r: w.collective if w else "?" for r, w in where.items()}
        return ops == {"skip": {0: "all_reduce", 1: None}, "mismatch": {0: "all_reduce", 1: "broadcast"}}.get(case)
    text = str(error)
    return {"skip": "Ranks 1 failed to pass monitoredBarrier" in text,
            "mismatch": "Op type: BROADCASTvs ALLREDUCE" in text or "Op type: ALLREDUCEvs BROADCAST" in text,
            "shape": bool(re.search(r"Tensor shapes: (4vs 5|5vs 4)", text))}[case]

"""Chapter 7.2: what each tool said about a hang, and whether that names its cause."""
from __future__ import annotations

import re

# What torch and gloo say, written once. The words are C++ strings (ProcessGroupWrapper's
# fingerprint, gloo's tcp transport) that have kept their wording for years; spacing and
# brackets are left free, so a release that writes "[4] vs [5]" for "4vs 5" still matches.
DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(.*)")            # DETAIL
MISSING = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier in (\d+)\s*ms")  # monitored_barrier
TIMED_OUT = re.compile(r"Timed out waiting (\d+)\s*ms for \w+ operation")              # gloo's own timeout
SIZE = re.compile(r"Received data size doesn't match expected size")                  # gloo's check, then abort
# The part of each error that carries its news, in the order they are looked for.
SAYINGS = [DIFFER, MISSING, TIMED_OUT, SIZE]


def _differ(aspect: str, a: str, b: str) -> re.Pattern:
    """One aspect of DETAIL's difference, either rank first: ``Op type: ALLREDUCEvs BROADCAST``."""
    one = r"\[?\s*{}\s*\]?\s*vs\s*\[?\s*{}\s*\]?"
    return re.compile(rf"{aspect}:\s*(?:{one.format(a, b)}|{one.format(b, a)})")


CAUSES = {"skip": re.compile(r"Ranks? 1 failed to pass monitoredBarrier"),
          "mismatch": _differ("Op type", "BROADCAST", "ALLREDUCE"),
          "shape": _differ("Tensor shapes", "4", "5")}


def said(error: BaseException) -> str:
    """One line: what the error tells the reader (per rank for a launch's timeout)."""
    where = getattr(error, "where", None)
    if where is not None:
        return "; ".join(f"rank {r} {w}" for r, w in sorted(where.items()))
    text = str(error).split("\n\n--- traceback")[0]
    for pattern in SAYINGS:
        if m := pattern.search(text):
            return f"rank {error.rank}: " + (m.group(1) if pattern is DIFFER else m.group(0)).strip()
    return text.splitlines()[0][:160]


def names_cause(case: str, error: BaseException) -> bool:
    """Whether the error points at rank 1's bug: the rank that skipped, both ops, or both shapes."""
    where = getattr(error, "where", None)
    if where is not None:
        ops = {r: w.collective if w else "?" for r, w in where.items()}
        return ops == {"skip": {0: "all_reduce", 1: None}, "mismatch": {0: "all_reduce", 1: "broadcast"}}.get(case)
    return bool(CAUSES[case].search(str(error)))

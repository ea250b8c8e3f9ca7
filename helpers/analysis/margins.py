"""A timing claim a busy machine cannot flip: paired rounds, and the margin over their scatter.

A chapter that says "A is faster than B" measures both sides in every round, seconds apart, so a
slow spell on a shared machine hits both alike, and compares round by round: each round gives one
ratio ``r = B / A``. On the logs of those ratios:

* ``center``: their median (the claim's size: ``exp(center)`` is the median ratio);
* ``scatter``: their robust spread, 1.4826 x the median absolute deviation (one standard
  deviation where the rounds are normal, and deaf to the one round a burst of load ruined);
* ``margin``: ``center`` over the standard error ``scatter / sqrt(n)``: how many times the
  uncertainty of the median the effect stands clear of "no difference".

Where the rounds measured leave the margin short, ``until_clear`` measures more, as many as the
effect and its scatter say are needed, up to a cap.

``clear(margin)`` is the claim's test: a margin of ``TARGET`` or more cannot come from noise
of the size measured. ``bench/load.py`` sets ``RECORD`` to a file, and every comparison a
chapter makes appends itself there, so a run under load reports each margin it found.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

RECORD = "HELPERS_MARGINS"  # a file path: each comparison appends one JSON line (bench/load.py)
TARGET = 3.0  # margins of 3 standard errors; rounds are added until one is reached, or the cap is
FLOOR = 0.005  # a scatter below half a percent is the clock's, not the machine's: never less


@dataclass(frozen=True)
class Comparison:
    """``name``: the claim, as the chapter says it; ``ratios``: one per round, each side B over A
    (above 1 where the claim holds)."""

    name: str
    ratios: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def center(self) -> float:
        return median(math.log(r) for r in self.ratios)

    @property
    def ratio(self) -> float:
        return math.exp(self.center)

    @property
    def scatter(self) -> float:
        logs = [math.log(r) for r in self.ratios]
        return max(1.4826 * median(abs(x - self.center) for x in logs), FLOOR)

    @property
    def margin(self) -> float:
        return self.center / (self.scatter / math.sqrt(self.n))

    def clear(self, target: float = TARGET) -> bool:
        return self.margin >= target

    def said(self) -> str:
        """The measurement in words, for a page: the median ratio, the scatter and the margin."""
        return (f"{self.ratio:.2f} times (median of {self.n} paired rounds; scatter {self.scatter:.1%} a round, "
                f"so {self.margin:.1f} standard errors from no difference)")


def compare(name: str, ratios, *, record: bool = True) -> Comparison:
    """The comparison of paired rounds' ratios (each B / A, above 1 where the claim holds)."""
    ratios = tuple(float(r) for r in ratios)
    if not ratios or any(not r > 0 or math.isinf(r) for r in ratios):
        raise ValueError(f"{name}: every round's ratio must be a positive number, got {ratios}")
    c = Comparison(name, ratios)
    if record and (path := os.environ.get(RECORD)):
        with open(path, "a") as f:
            f.write(json.dumps({**asdict(c), "margin": c.margin, "scatter": c.scatter, "ratio": c.ratio}) + "\n")
    return c


def until_clear(name: str, ratios, more, *, cap: int, target: float = TARGET) -> Comparison:
    """The comparison of ``ratios``, topped up with ``more(k)`` (a list of k more rounds' ratios,
    measured the same way) until its margin reaches ``target`` or it has ``cap`` rounds in all.
    Each top-up asks for the rounds this effect and scatter need (``rounds_needed``), at least one.
    A comparison still short of ``target`` at the cap is returned as it stands: the page says so."""
    c = compare(name, ratios, record=False)
    while not c.clear(target) and c.n < cap:
        k = min(cap, max(rounds_needed(c, target), c.n + 1)) - c.n
        c = compare(name, c.ratios + tuple(more(k)), record=False)
    return compare(name, c.ratios)


def apart(a: Comparison, b: Comparison, *, name: str | None = None) -> float:
    """How many standard errors ``a``'s median ratio stands above ``b``'s, when the two were measured
    in different runs (no pairs between them): their centers' difference over both errors combined.
    Recorded for bench/load.py as a comparison of its own when ``name`` is given."""
    margin = (a.center - b.center) / math.hypot(a.scatter / math.sqrt(a.n), b.scatter / math.sqrt(b.n))
    if name and (path := os.environ.get(RECORD)):
        with open(path, "a") as f:
            f.write(json.dumps({"name": name, "ratios": [a.ratio, b.ratio], "margin": margin}) + "\n")
    return margin


def rounds_needed(c: Comparison, target: float = TARGET) -> int:
    """How many rounds this effect and scatter would need for ``target`` (the standard error shrinks
    with the square root of the rounds); a chapter that adds rounds asks this, within its cap."""
    if c.center <= 0:
        return 10 ** 9
    return math.ceil((target * c.scatter / c.center) ** 2)


def read(path: str | os.PathLike) -> list[dict]:
    """Every comparison recorded in ``path`` (none if the file is absent)."""
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

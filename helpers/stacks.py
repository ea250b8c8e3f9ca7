"""Every rank's Python stack, taken while the job hangs: what a launch's timeout reports.

Each rank's ``faulthandler`` writes all its threads' stacks to ``stack{r}.txt`` when it gets
``protocol.STACK_SIGNAL`` (``helpers.worker`` registers it). Before a timed-out launch kills
its ranks, ``take`` signals them and reads those files; ``where`` reads one stack for the
collective the rank is in and the user's line that called it::

    rank 0: in all_reduce, called from hangs.py line 38 in _step
    rank 1: in no collective, at hangs.py line 29 in _step
"""
from __future__ import annotations

import os
import re
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import protocol

FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
STDLIB = sysconfig.get_paths()["stdlib"]


def _torch_dir() -> str:
    import torch
    return os.path.dirname(torch.__file__)


@dataclass(frozen=True)
class Where:
    """Where one rank's main thread was: the torch.distributed function it waits in (or None),
    and the innermost line of the user's code."""

    collective: str | None
    file: str
    line: int
    func: str

    def __str__(self) -> str:
        at = f"{os.path.basename(self.file)} line {self.line} in {self.func}"
        return f"in {self.collective}, called from {at}" if self.collective else f"in no collective, at {at}"


def main_thread(dump: str) -> list[tuple[str, int, str]]:
    """The frames of the thread that runs the rank's function (the one with ``rank_entry``),
    innermost first; of the last thread dumped if none has it."""
    threads, frames = [], None
    for line in dump.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            frames = []
            threads.append(frames)
        elif (m := FRAME.match(line)) and frames is not None:
            frames.append((m["file"], int(m["line"]), m["func"]))
    ours = [t for t in threads if any(f == "rank_entry" for _, _, f in t)]
    return (ours or threads or [[]])[-1]


def short(dump: str) -> str:
    """The main thread's frames, innermost first, down to ``rank_entry``: one ``file:line func`` each."""
    lines = []
    for file, line, func in main_thread(dump):
        if func == "rank_entry":
            break
        lines.append(f"{os.path.basename(file)}:{line} {func}")
    return "\n".join(lines)


def where(dump: str) -> Where | None:
    """The collective a rank waits in, and the user's line that called it, from its stack dump."""
    frames = main_thread(dump)
    torch_dir, collective = _torch_dir(), None
    for file, line, func in frames:
        if file.startswith(torch_dir):
            if f"{os.sep}distributed{os.sep}" in file and func != "wrapper":
                collective = func  # the outermost such frame wins: the API the user called
            continue
        if file.startswith(STDLIB):
            continue
        return Where(collective, file, line, func)
    return None


def _top_level(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The ranks themselves, not processes they started (a data loader's workers inherit the
    handler and would write into their rank's file)."""
    pids = {p.pid for p in procs}
    out = []
    for p in procs:
        try:
            if p.ppid() not in pids:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def take(run_dir: str | os.PathLike, procs: list[psutil.Process], wait: float = 2.0) -> dict[int, str]:
    """Signal every rank to dump its stacks; return each rank's dump, by rank (``wait`` s at most)."""
    ranks = _top_level(procs)
    for p in ranks:
        try:
            p.send_signal(protocol.STACK_SIGNAL)
        except psutil.NoSuchProcess:
            pass
    files = sorted(Path(run_dir).glob("stack*.txt"))
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and sum(f.stat().st_size > 0 for f in files) < len(ranks):
        time.sleep(0.02)
    time.sleep(0.1)  # a dump is written in one go, by the signal handler: let the last one finish
    dumps = {int(f.stem.removeprefix("stack")): f.read_text(errors="replace") for f in files}
    return {r: d for r, d in dumps.items() if d}


def summary(dumps: dict[int, str]) -> str:
    """One clause per rank: the collective it waits in and the line that called it."""
    return "; ".join(f"rank {r}: {where(d) or 'no stack'}" for r, d in sorted(dumps.items()))

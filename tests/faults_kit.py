"""The fault suite's kit: the leak check every trial goes through, a runner that counts trials, and a
stand-in kernel (a subprocess running helpers.probes.launch_faults) to interrupt and to kill.

bench/faults.py runs the suite with HELPERS_FAULT_RESULTS=path and prints what ``run_trials`` recorded.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil
import pytest

TRIALS = 10
FOLDERS = ("helpers-launch-*", "torchrun-cell-*")  # what launch() and %%torchrun make in the temp dir
ROOT = Path(__file__).resolve().parents[1]


def alive(p: psutil.Process) -> bool:
    """Running, and not a zombie waiting for a parent to reap it."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[-80:] or p.name()
    except psutil.Error:
        return "?"


@dataclass(frozen=True)
class Snapshot:
    children: dict[int, str]      # every descendant of this process: pid -> command line
    fds: dict[int, int]           # open fds of each root (this process, and the kernels it drives)
    ports: frozenset[int]         # TCP ports this process tree listens on
    folders: frozenset[str]       # run folders in the temp dir, and in the kernels' own temp dirs


def snapshot(roots: tuple[int, ...]) -> Snapshot:
    family = [p for p in psutil.Process().children(recursive=True) if alive(p)]
    ports = set()
    for p in [psutil.Process(), *family]:
        try:
            ports |= {c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
    return Snapshot({p.pid: _name(p) for p in family}, {pid: psutil.Process(pid).num_fds() for pid in roots},
                    frozenset(ports), run_folders())


def run_folders() -> frozenset[str]:
    """The run folders in the temp dir, and in the temp dirs of the kernels a test started there."""
    tmp = Path(tempfile.gettempdir())
    return frozenset(str(f) for pat in FOLDERS for where in (pat, f"kernel-*/{pat}") for f in tmp.glob(where))


class Leaks:
    """What trials left behind, against a snapshot taken before the first one.

    Left over: a process, port or folder that was not there before, an fd above the count before,
    or a process from before that is gone (the forkserver launch() keeps must stay the same one).
    Each is counted once, at the first trial after which it is seen.
    """

    def __init__(self, roots: tuple[int, ...] = ()):
        self.roots = (os.getpid(), *roots)
        self.before = snapshot(self.roots)
        self.seen: set[str] = set()
        self.fd_high = dict(self.before.fds)

    def _new(self, now: Snapshot) -> tuple[list[str], dict[int, int]]:
        b = self.before
        found = [f"process {pid} ({name})" for pid, name in now.children.items() if pid not in b.children]
        found += [f"process {pid} from before is gone ({name})" for pid, name in b.children.items()
                  if pid not in now.children]
        found += [f"listening port {port}" for port in now.ports - b.ports]
        found += [f"folder {f}" for f in now.folders - b.folders]
        fds = {pid: n - self.fd_high[pid] for pid, n in now.fds.items() if n > self.fd_high[pid]}
        return [f for f in found if f not in self.seen], fds

    def left_over(self, settle: float = 5.0) -> list[str]:
        """What is new since the last call, once it had ``settle`` seconds to go away."""
        deadline = time.monotonic() + settle
        while True:
            found, fds = self._new(snapshot(self.roots))
            if (not found and not fds) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.seen |= set(found)
        for pid, extra in fds.items():
            self.fd_high[pid] += extra
            found += [f"fd {self.fd_high[pid] - i} in process {pid}" for i in range(extra)]
        return found


RESULTS: dict[str, dict] = {}


def run_trials(fault: str, trial: Callable[[int], list[str] | None], n: int = TRIALS,
               roots: tuple[int, ...] = (), together: int = 1) -> None:
    """Run ``trial(i)`` n times and check for leaks after each; record the fault's row; fail on any miss.

    A trial raises if the launcher did not behave as stated, and may return leftovers only it can
    see (ranks orphaned by a killed kernel, by pid). ``together`` trials run at once, then one check.
    """
    leaks, survived, left, notes = Leaks(roots), 0, 0, []

    def one(i: int) -> tuple[bool, list[str]]:
        try:
            return True, trial(i) or []
        except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 - a miss, counted
            notes.append(f"trial {i}: {type(e).__name__}: {str(e)[:400]}")
            return False, []

    with ThreadPoolExecutor(together) as pool:
        for start in range(0, n, together):
            outcomes = list(pool.map(one, range(start, min(n, start + together))))
            survived += sum(ok for ok, _ in outcomes)
            found = [f for _, extra in outcomes for f in extra] + leaks.left_over()
            left += len(found)
            notes += [f"after trial {start + together - 1}: left {f}" for f in found]
    RESULTS[fault] = {"trials": n, "survived": survived, "left_over": left}
    assert survived == n and left == 0, "\n".join(notes)


@pytest.fixture(scope="module", autouse=True)
def private_tmp(tmp_path_factory):
    """A temp dir of the suite's own, so run folders of other launches on this machine do not count."""
    tmp = tmp_path_factory.mktemp("faults")
    old, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(tmp), str(tmp)
    yield tmp
    tempfile.tempdir = old
    if old_env is None:
        os.environ.pop("TMPDIR")
    else:
        os.environ["TMPDIR"] = old_env
    if out := os.environ.get("HELPERS_FAULT_RESULTS"):
        path = Path(out)
        path.write_text(json.dumps({**(json.loads(path.read_text()) if path.exists() else {}), **RESULTS}))


def family(pid: int) -> list[psutil.Process]:
    """A process's live descendants."""
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if alive(p)]
    except psutil.NoSuchProcess:
        return []


def wait_mid_run(tmp: Path, pid: int, timeout: float = 60) -> list[psutil.Process]:
    """Once both ranks of a ``hang`` job launched into ``tmp`` are in it (their logs say so): ``pid``'s family."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = " ".join(p.read_text() for p in tmp.glob("helpers-launch-*/rank*.log"))
        if "entering barrier" in logs and "sleeping instead" in logs:
            return family(pid)
        time.sleep(0.02)
    raise TimeoutError(f"the job in {tmp} never started")


class Kernel:
    """``python -m helpers.probes.launch_faults [args]``: launches when told, as a Jupyter kernel would."""

    def __init__(self, *args: str):
        self.tmp = Path(tempfile.gettempdir()) / f"kernel-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        env = {**os.environ, "TMPDIR": str(self.tmp),
               "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        with open(self.tmp / "stderr", "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "helpers.probes.launch_faults", *args],
                                         cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, env=env)
        self.pid = self.proc.pid
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the kernel did not answer {event!r} in {timeout:g} s") from None
            if line is None:
                raise RuntimeError(f"the kernel ended: {(self.tmp / 'stderr').read_text()[-2000:]}")
            record = json.loads(line)
            if record["event"] == event:
                return record
            if record["event"] == "error":
                raise RuntimeError(f"the kernel's launch failed: {record['error']}")

    def wait_mid_run(self) -> list[psutil.Process]:
        return wait_mid_run(self.tmp, self.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)  # it ends at the EOF of a kernel that is gone
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:  # a stdin whose reader was killed
                pass

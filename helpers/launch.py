"""Run a function in N real processes from a notebook cell, on torch's elastic launcher.

``launch(fn, *args, nprocs=2, **kwargs)`` is what ``torchrun --nproc-per-node 2``
does for a script, done for a function: torch's elastic agent rendezvouses on
127.0.0.1, starts the ranks, and hands back each rank's return value. Around
that engine this module adds what a notebook needs:

* the agent runs in a thread, so the cell's own thread can stream every rank's
  output, draw rank 0's progress, enforce a timeout and catch the stop button;
* a failing rank becomes one ``RankError`` carrying that rank's traceback;
* workers fork from a forkserver with torch preloaded: only a kernel's first launch imports it;
* whatever happens, no worker outlives the call.

Locality: ranks address each other at 127.0.0.1, gloo and NCCL are pinned to the loopback
interface, every store listens on 127.0.0.1 alone (``helpers.loopback``; torch's own would
listen on every interface), and each launch has a fresh random run id and OS-chosen ports,
so two kernels launching at once never collide.

Restarts: ``max_restarts=n`` lets the agent restart the whole job up to n times when a
rank fails, as ``torchrun --max-restarts n`` does. The restarted ranks must not join
through the agent's own store (torch's default, pytorch/pytorch#135712): the keys of the
round that failed are still in it, under the same names, and gloo dials the dead
ranks' addresses. So a launch with restarts sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
unless the caller has set it, and each round's rank 0 serves a fresh store.
"""
from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.forkserver as forkserver
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable

import psutil
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import elastic_launch

from . import compat, devices, loopback, plans, protocol, stacks as stacks_
from .launch_args import LaunchError, check_args, check_importable, shown_ranks
from .displays import ProgressDisplay
from .worker import RankSpec, rank_entry
from .live import LogTail
from .machine import this as this_machine, to_json

DEFAULT_TIMEOUT = 120.0
# A launch's timeout counts from when its last rank has started, not from the call: on a busy machine
# the forkserver's imports and the first forks can take longer than a short timeout, and a timeout that
# fires before a rank can say where it is tells the reader nothing. A start-up that never ends is still
# ended, STARTUP_S after the call plus the timeout.
STARTUP_S = 120.0
# Once its ranks are killed, the agent thread notices, closes its stores and ends; a launch returns only
# then, so that no port outlives it. That takes well under a second on a quiet machine; under load it
# once took more than the 10 s this used to wait (fault case 4). A second interrupt ends the wait.
AGENT_END_S = 60.0
SEPARATE_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"  # "1": each round's rank 0 serves a new store
# Third-party modules only: the reader may edit helpers/, and a preloaded copy would go stale.
# DDP and the optimizers import dynamo (~1 s a rank); importing helpers in a rank pulls in the
# launcher's API, psutil and tabulate (80 of its 100 ms here).
PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch.distributed.elastic", "numpy",
           "torch.optim", "torch._dynamo", "torch.distributed.launcher.api", "psutil", "tabulate"]


class SharedCoresWarning(UserWarning):
    """More ranks than cores: the job runs, but its timings do not mean what they would."""


class RankError(RuntimeError):
    """A rank raised. Carries that rank's own traceback instead of the launcher's."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str):
        self.rank, self.exc_type, self.message = rank, exc_type, message
        self.remote_traceback = remote_traceback
        super().__init__(f"rank {rank} raised {exc_type}: {message}")

    def __str__(self) -> str:
        head = self.args[0]
        if not self.remote_traceback:
            return head
        return f"{head}\n\n--- traceback in rank {self.rank} ---\n{self.remote_traceback.rstrip()}"

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of pages of launcher frames.
        return [f"RankError: {self}"]


class LaunchStopped(LaunchError):
    """The caller's ``stop`` event was set while the job ran: its ranks were killed, nothing is left."""


class LaunchTimeout(TimeoutError):
    """The job ran past its ``timeout``; its ranks were killed, after each dumped its stacks:
    ``stacks`` (rank -> faulthandler's text) and ``where`` (rank -> ``helpers.stacks.Where``)."""

    def __init__(self, timeout: float, last_lines: str, stacks: dict[int, str]):
        self.stacks, self.where = stacks, {r: stacks_.where(d) for r, d in stacks.items()}
        super().__init__(f"launch timed out after {timeout:g} s and its ranks were killed. A rank stuck in a "
                         f"collective waits for peers that never come. {last_lines} Where each rank was: "
                         f"{stacks_.summary(stacks) or 'no stacks'}. Pass a larger timeout= if the job is only slow.")


def forkserver_context() -> multiprocessing.context.BaseContext:
    """The forkserver (torch preloaded), started once per kernel: every worker forks from it.

    Also for processes a chapter starts by itself (a checkpoint writer to kill, say),
    so that they too skip torch's import and are cleaned up with the launcher's.
    """
    multiprocessing.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()
    return multiprocessing.get_context("forkserver")


def worker_processes() -> list[psutil.Process]:
    """The live workers of this kernel: the forkserver's descendants."""
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _kill_workers() -> None:
    procs = worker_processes()
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def _end(agent: threading.Thread) -> None:
    """Kill the ranks, wait for the agent thread to end (``AGENT_END_S``), and collect what it left in
    reference cycles: CI once found one store port of an interrupted launch still open 5 s later, as a
    cycle the collector had not reached yet would keep it. Only on a launch cut short (about 0.1 s)."""
    _kill_workers()
    agent.join(AGENT_END_S)
    gc.collect()


def _signal_name(code: int) -> str:
    try:
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    except ValueError:
        return f"exit code {code}"


def _root_cause(run_dir: Path, failure: BaseException, restart: int = 0) -> Exception:
    """The rank that failed first in the job's last attempt, with its own traceback; what other
    ranks reported is an echo.

    In order: the earliest error a rank raised by itself; else a rank that died without raising
    (a signal); else the earliest error raised in a collective (which fails in every rank), one that
    says its peer hung up (``protocol.peer_gone``) last: that peer failed first, whoever was quicker
    to catch it.
    """
    errors = sorted(protocol.read_errors(run_dir, restart), key=lambda e: bool(e.get("echo")))  # stable
    own = [e for e in errors if not e.get("collective")]
    died = None
    if isinstance(failure, ChildFailedError) and failure.failures:
        rank, f = min(failure.failures.items(), key=lambda kv: kv[1].timestamp)
        if rank not in {e["rank"] for e in errors}:
            said = protocol.abort_message(run_dir, rank)  # gloo's checks abort in C++, saying why
            died = RankError(rank, "ProcessDied", f"the process ended with {_signal_name(f.exitcode)}{said}", "")
    if own or (errors and not died):
        e = (own or errors)[0]
        return RankError(e["rank"], e["type"], e["message"], e["traceback"])
    return died or RuntimeError(f"the elastic launcher failed: {type(failure).__name__}: {failure}")


def _without_tracebacks(e: BaseException) -> BaseException:
    """The agent's exception without its frames: they hold its TCPStore servers (2 listening ports,
    ~26 fds) in a reference cycle that only the garbage collector would ever free."""
    todo, seen = [e], set()
    while todo:  # both links: `raise X from Y` inside an except block sets a cause and a context
        link = todo.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        link.__traceback__ = None
        todo += [link.__cause__, link.__context__]
    return e


def launch(fn: Callable, *args: Any, nprocs: int = 2, timeout: float = DEFAULT_TIMEOUT,
           backend: str | None = None, show: int | str | list[int] | None = 0,
           on_progress: Callable[[dict], None] | None = None, threads: int | None = None,
           max_restarts: int = 0, stop: threading.Event | None = None, progress: bool = True,
           **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``nprocs`` processes; return their results, rank 0 first.

    Each rank sees torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), so ``helpers.dist.setup()`` or a plain
    ``init_process_group()`` joins the job.

    show:        ranks whose output is streamed into the cell: a rank, a list, "all" or None.
    backend:     None: what the recipe's module pins (``devices.pinned_backend``), else NCCL when every
                 rank can own a GPU, else gloo.
    threads:     torch threads per rank; default: this machine's cores // nprocs.
    timeout:     seconds (finite, > 0) the job may run, from when its last rank has started, before the
                 ranks are killed and LaunchTimeout is raised (all attempts; starting may take STARTUP_S more).
    max_restarts: how many times the elastic agent may restart the job after a rank fails;
                 a restarted rank sees TORCHELASTIC_RESTART_COUNT (``protocol.restart_count``).
    on_progress: called in the cell with each record rank 0 passes to ``helpers.dist.report``.
    stop:        an event another thread may set (a panel's Stop button, while the kernel is free):
                 the ranks are killed and LaunchStopped is raised.
    progress:    draw rank 0's progress bar in the cell; a caller that draws its own passes False.
    """
    check_importable(fn)
    backend = backend or devices.pinned_backend(fn)
    check_args(nprocs, backend, timeout, max_restarts, threads, on_progress)
    if stop is not None and not callable(getattr(stop, "is_set", None)):
        raise LaunchError(f"stop must be a threading.Event (or None), got {stop!r}.")
    try:
        pickle.dumps((args, kwargs))
    except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing here
        raise LaunchError(f"the arguments cannot be sent to other processes: {e}") from None
    shown = shown_ranks(show, nprocs)
    if note := plans.job(this_machine(), nprocs, backend).warning():
        warnings.warn(note, SharedCoresWarning, stacklevel=2)

    run_dir = Path(tempfile.mkdtemp(prefix="helpers-launch-"))
    env = {protocol.TIMEOUT: str(timeout + protocol.GROUP_MARGIN_S), "GLOO_SOCKET_IFNAME": this_machine().loopback,
           "NCCL_SOCKET_IFNAME": this_machine().loopback, protocol.MACHINE: to_json(this_machine()),
           **({protocol.BACKEND: backend} if backend else {})}
    if threads:
        env[protocol.THREADS] = str(threads)
    spec = RankSpec(fn, args, kwargs, str(run_dir), env)
    config = compat.launch_config(
        min_nodes=1, max_nodes=1, nproc_per_node=nprocs, run_id=uuid.uuid4().hex,
        rdzv_backend=loopback.BACKEND, rdzv_endpoint=f"{loopback.HOST}:0", local_addr=loopback.HOST,
        max_restarts=max_restarts, monitor_interval=0.02, start_method="forkserver",
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "elastic")), shutdown_timeout=5,
    )
    outcome: dict[str, Any] = {}

    def agent() -> None:
        try:
            outcome["results"] = elastic_launch(config, rank_entry)(spec)
        except BaseException as e:  # noqa: BLE001 - handed to the cell's thread
            outcome["error"] = _without_tracebacks(e)

    # The launcher's own logs (warnings about signal handlers, SIGTERMs) would bury the cell.
    loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic", "torch.multiprocessing")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    own_store = max_restarts and SEPARATE_STORE not in os.environ  # the caller's choice stands
    tail = LogTail(run_dir, shown)
    bar = ProgressDisplay(protocol.progress_file(run_dir), on_progress, draw=progress)
    thread = threading.Thread(target=agent, name="elastic-agent", daemon=True)
    try:
        if own_store:
            os.environ[SEPARATE_STORE] = "1"  # read by the agent's rendezvous, in this process
        forkserver_context()
        thread.start()
        deadline, started = time.monotonic() + STARTUP_S + timeout, False
        while thread.is_alive():
            thread.join(0.05)
            tail.poll()
            bar.poll()
            if stop is not None and stop.is_set():
                _end(thread)
                raise LaunchStopped(f"stopped after {bar.step_reached()} steps; every rank was killed.")
            if not started and all(protocol.stack_file(run_dir, r).exists() for r in range(nprocs)):
                deadline, started = min(deadline, time.monotonic() + timeout), True
            if time.monotonic() > deadline:
                dumps = stacks_.take(run_dir, worker_processes())  # before the kill: where each waits
                _end(thread)
                tail.poll(most=None)
                raise LaunchTimeout(timeout, tail.last_lines(), dumps)
        tail.poll(most=None)
        bar.poll()
        if "error" in outcome:
            raise _root_cause(run_dir, outcome["error"], max_restarts) from None
        results = outcome["results"]
        return [results[r] for r in range(nprocs)]
    except KeyboardInterrupt:
        _end(thread)
        raise
    finally:
        _kill_workers()
        bar.close()
        tail.close()
        for lg, lvl in zip(loggers, levels):
            lg.setLevel(lvl)
        if own_store:
            del os.environ[SEPARATE_STORE]
        shutil.rmtree(run_dir, ignore_errors=True)

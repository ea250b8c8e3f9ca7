"""The launcher's side inside each worker: what the elastic agent starts in every rank.

``rank_entry`` sends the rank's output to its log file, sets its environment,
threads and seed (``protocol.prepare_process``), runs the user's function, and
turns an exception into the record the launcher reads. A watchdog thread ends
the rank if the launching process dies first.
"""
from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

from . import loopback, protocol


@dataclass
class RankSpec:
    """Everything a rank needs, pickled once and sent to each worker."""

    fn: Callable
    args: tuple
    kwargs: dict
    run_dir: str
    env: dict = field(default_factory=dict)
    launcher_pid: int = field(default_factory=os.getpid)


def _exit_when_gone(launcher_pid: int, run_dir: str) -> None:
    """End this rank if the launching process dies without cleaning up (a killed kernel).

    Workers are children of the forkserver, not of the kernel, so nothing else tells them:
    a finished rank would wait forever for the agent that should collect its result.
    The run folder goes too: the launcher that would have removed it is gone.
    """
    while True:
        time.sleep(1.0)
        try:
            os.kill(launcher_pid, 0)
        except ProcessLookupError:
            shutil.rmtree(run_dir, ignore_errors=True)
            os._exit(1)


def rank_entry(spec: RankSpec) -> Any:
    """The function the elastic agent starts in every worker: wraps the user's ``fn``."""
    threading.Thread(target=_exit_when_gone, args=(spec.launcher_pid, spec.run_dir), daemon=True).start()
    rank = int(os.environ["RANK"])
    log = os.open(protocol.rank_log(spec.run_dir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    os.environ.update(spec.env)
    # On the launcher's signal, every thread's stack goes to a file of its own (a timeout reads it).
    faulthandler.register(protocol.STACK_SIGNAL, open(protocol.stack_file(spec.run_dir, rank), "w"),
                          all_threads=True)
    os.environ.update(protocol.rank_env(spec.run_dir, rank))
    loopback.serve_master_port()  # a restarted job's rank 0: its store on 127.0.0.1, before fn asks for one
    # For code that never calls helpers.dist.setup() (a %%torchrun cell, say): same split, same seed.
    protocol.prepare_process(int(os.environ["LOCAL_WORLD_SIZE"]))
    try:
        result = spec.fn(*spec.args, **spec.kwargs)
        # The result goes back through torch.multiprocessing's queue, whose pickler refuses what
        # plain pickle takes (a tensor that requires grad): try that one here, and fail with a
        # message rather than in torch's wrapper, which exits 1 and says nothing.
        try:
            ForkingPickler.dumps(result)
        except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing
            raise TypeError(f"{getattr(spec.fn, '__name__', 'the function')} returned a value that "
                            f"cannot be sent back to the launcher ({e}); return tensors, numbers, "
                            f"strings, lists and dicts; detach() tensors that require grad") from None
        return result
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, then the rank dies
        protocol.write_error(e)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip multiprocessing's own traceback dump: the launcher reports it once

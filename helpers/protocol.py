"""What the launcher and its ranks say to each other, in one place.

``helpers.launch`` gives every run a folder and tells each rank, through
environment variables, where in it to write. A rank writes three kinds of
file there; the launching thread reads them while the job runs:

* ``rank{r}.log``: the rank's stdout and stderr;
* ``error{r}.json``: the rank's first exception (``write_error`` / ``read_errors``); after
  the elastic agent restarts the job, ``error{r}-restart{n}.json`` for its n-th restart;
* ``progress.jsonl``: rank 0's progress records, one JSON object a line (``append_progress``);
* ``stack{r}.txt``: the rank's Python stacks, written when the launcher sends it ``STACK_SIGNAL``.

Under the torchrun CLI none of the variables is set, and a rank prints instead.
"""
from __future__ import annotations

import json
import os
import random
import signal
import time
import traceback
from datetime import timedelta
from pathlib import Path

from . import machine

DEFAULT_SEED = 0

# Environment variables the launcher sets in every rank.
TIMEOUT = "HELPERS_TIMEOUT"          # seconds: the process group's timeout
# A launch's group outlives its deadline by this much, so that the launcher, not a collective's own
# timeout, ends a hang: it reads every rank's stack first. The deadline counts from when the last
# rank started; a rank that started earlier and inits its group at once is that much ahead of it.
GROUP_MARGIN_S = 30.0
BACKEND = "HELPERS_BACKEND"          # "gloo" or "nccl" if the caller chose one
THREADS = "HELPERS_THREADS"          # torch threads per rank if the caller chose them
ERROR_FILE = "HELPERS_ERROR_FILE"    # where this rank reports its exception
PROGRESS_FILE = "HELPERS_PROGRESS_FILE"  # where rank 0 appends its progress
MACHINE = machine.ENV               # the launcher's Machine as JSON: ranks need not ask the GPUs again

PROGRESS_NAME = "progress.jsonl"


def rank_log(run_dir: str | os.PathLike, rank: int) -> Path:
    return Path(run_dir) / f"rank{rank}.log"


def rank_of_log(path: Path) -> int:
    return int(path.stem.removeprefix("rank"))


STACK_SIGNAL = signal.SIGUSR1  # a rank's faulthandler writes every thread's stack on it


def stack_file(run_dir: str | os.PathLike, rank: int) -> Path:
    return Path(run_dir) / f"stack{rank}.txt"


def abort_message(run_dir: str | os.PathLike, rank: int) -> str:
    """What C++ said as it aborted the rank (``terminate called ... what(): ...``) after ': ', or ''."""
    try:
        lines = rank_log(run_dir, rank).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((": " + ln.split("what():", 1)[1].strip() for ln in reversed(lines) if "what():" in ln), "")


def group_timeout(default: float = 600.0) -> timedelta:
    """The process group's timeout: under helpers.launch, the launch's ``timeout`` plus ``GROUP_MARGIN_S``
    (set by the launcher in ``TIMEOUT``), else ``default``."""
    return timedelta(seconds=float(os.environ.get(TIMEOUT, default)))


def restart_count() -> int:
    """How many times the elastic agent has restarted this job (0 on its first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def error_file(run_dir: str | os.PathLike, rank: int, restart: int = 0) -> Path:
    return Path(run_dir) / (f"error{rank}.json" if not restart else f"error{rank}-restart{restart}.json")


def progress_file(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / PROGRESS_NAME


def rank_env(run_dir: str | os.PathLike, rank: int) -> dict[str, str]:
    """The run-folder variables of one rank: its error file, and rank 0's progress file."""
    env = {ERROR_FILE: str(error_file(run_dir, rank, restart_count()))}
    if rank == 0:
        env[PROGRESS_FILE] = str(progress_file(run_dir))
    return env


def prepare_process(local_world_size: int, seed: int = DEFAULT_SEED) -> int:
    """Threads and seed for a rank: the launcher's entry and ``dist.setup`` both call this.

    Threads: ``HELPERS_THREADS`` if the caller set it, else this host's cores split
    between its ranks. Returns the thread count.
    """
    import torch
    threads = int(os.environ.get(THREADS, 0)) or machine.this().threads_per_rank(local_world_size)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    seed_everything(seed)
    return threads


def seed_everything(seed: int) -> None:
    import torch
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def _write_json(path: str | os.PathLike, record: dict) -> None:
    """Write whole or not at all: the launcher may read the file at any moment."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


# A collective fails in every rank when one rank dies. A rank whose error came out of torch.distributed
# waits this long before reporting it, so the launcher first sees the peer that died (a SIGKILL leaves
# no record) and ends this rank before it can report an echo as the cause.
PEER_GRACE = 1.0
# What gloo (and a TCPStore client) says when the other end of a socket went away: the peer failed,
# and this rank only heard of it.
PEER_GONE = ("closed by peer", "reset by peer", "broken pipe")


def raised_in_torch_distributed(e: BaseException) -> bool:
    """Whether the innermost frame of ``e`` is torch.distributed's: a collective, or the group."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"torch{os.sep}distributed{os.sep}" in tb.tb_frame.f_code.co_filename


def peer_gone(e: BaseException) -> bool:
    """Whether ``e`` says that a peer hung up on this rank: an echo of the peer's own failure."""
    return any(words in str(e).lower() for words in PEER_GONE)


def write_error(e: BaseException) -> None:
    """Under ``helpers.launch``, note this rank's exception (the first one only) for the launcher.

    The record's ``time`` is when the rank caught it, before any grace: two ranks that failed a
    millisecond apart wake from the same grace together, and on a shared core either may write first.
    """
    caught = time.time()
    path = os.environ.get(ERROR_FILE)
    if not path or os.path.exists(path):
        return
    collective = raised_in_torch_distributed(e)
    if collective:
        time.sleep(PEER_GRACE)
    _write_json(path, {"rank": int(os.environ.get("RANK", 0)), "type": type(e).__name__,
                       "message": str(e), "traceback": "".join(traceback.format_exception(e)),
                       "time": caught, "collective": collective, "echo": collective and peer_gone(e),
                       "restart": restart_count()})


def read_errors(run_dir: str | os.PathLike, restart: int = 0) -> list[dict]:
    """Every rank's reported exception in one attempt of the job (0: the first), the earliest caught first.

    A job that failed after its restarts failed in its last attempt: the earlier ones
    failed too (that is why the agent restarted), but they are not how it ended.
    """
    errors = [json.loads(p.read_text()) for p in Path(run_dir).glob("error*.json")]
    return sorted((e for e in errors if e.get("restart", 0) == restart), key=lambda e: e["time"])


def progress_record(step: int, total: int, **metrics: float) -> dict:
    """A progress record: where rank 0 is, and whatever it measures (numbers only)."""
    return {"step": int(step), "total": int(total), **{k: float(v) for k, v in metrics.items()}}


def append_progress(record: dict) -> bool:
    """Append a record for the launcher; False when no launcher listens (the torchrun CLI)."""
    path = os.environ.get(PROGRESS_FILE)
    if not path:
        return False
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
    return True

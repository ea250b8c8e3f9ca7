"""``%%torchrun``: run a cell's code as a script in N ranks, the way torchrun runs a file.

    %load_ext helpers

    %%torchrun -n 2
    import torch.distributed as dist
    dist.init_process_group("gloo")
    print(dist.get_rank(), "of", dist.get_world_size())
    dist.destroy_process_group()

Variables of the notebook do not exist in the ranks: each rank is a fresh
``__main__``, exactly as under ``torchrun script.py``.
"""
from __future__ import annotations

import argparse
import runpy
import shlex
import tempfile
from pathlib import Path

from .launch import DEFAULT_TIMEOUT, launch
from .launch_args import check_args, shown_ranks


def run_script(path: str) -> None:
    """Rank entry point for the magic: execute the cell's file as ``__main__``."""
    runpy.run_path(path, run_name="__main__")


USAGE = "usage: %%torchrun [-n NPROCS] [--timeout SECONDS] [--show all|0|0,1] [--max-restarts N]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%torchrun", add_help=False)
    p.add_argument("-n", "--nproc-per-node", "--nprocs", dest="nprocs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    p.add_argument("--show", default="0", help="rank, comma-separated ranks, or 'all'")
    p.add_argument("--max-restarts", dest="max_restarts", type=int, default=0)
    return p


def torchrun(line: str, cell: str) -> None:
    try:
        args = _parser().parse_args(shlex.split(line))
        show = "all" if args.show == "all" else [int(r) for r in args.show.split(",")]
    except (SystemExit, ValueError):
        raise ValueError(USAGE) from None
    # argparse's float takes "nan" and "inf"; launch() refuses them, and so does the magic, before the cell's file.
    check_args(args.nprocs, None, args.timeout, args.max_restarts)
    shown_ranks(show, args.nprocs)
    with tempfile.TemporaryDirectory(prefix="torchrun-cell-") as tmp:
        script = Path(tmp) / "cell.py"
        script.write_text(cell)
        launch(run_script, str(script), nprocs=args.nprocs, timeout=args.timeout, show=show,
               max_restarts=args.max_restarts)


def register(ipython) -> None:
    ipython.register_magic_function(torchrun, magic_kind="cell", magic_name="torchrun")

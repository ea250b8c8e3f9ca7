"""Chapter 7.1's trap, counted: do restarted ranks form a gloo group again, with and without
the agent's shared store (pytorch/pytorch#135712)?

Each trial is ``helpers.launch(elastic.rejoin, nprocs=2, max_restarts=1)``: rank 1 raises once
the group is up on the first attempt, the agent restarts both ranks, and they must form a plain
``init_process_group("gloo")`` again. ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` is set to each
value in turn (the launcher leaves a caller's setting alone). Writes bench/results/restarts.md.

    python bench/restarts.py --trials 5 --timeout 20
"""
from __future__ import annotations

import argparse
import os
import re
import time

import helpers
import report
from helpers.launch import SEPARATE_STORE
from helpers.recipes import elastic


def trial(timeout: float) -> tuple[str, float]:
    start = time.perf_counter()
    try:
        ranks = helpers.launch(elastic.rejoin, nprocs=2, max_restarts=1, show=None, timeout=timeout)
        outcome = f"rejoined (restart {ranks[0]['restart']}, sum {ranks[0]['sum']:g})"
    except (helpers.RankError, helpers.LaunchTimeout) as e:
        said = re.sub(r"\[/[^\]]*\] ", "", str(e).splitlines()[0])  # gloo's source path says nothing
        outcome = f"{type(e).__name__}: {said[:140]}"
    return outcome, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per launch")
    args = ap.parse_args()
    lines = [f"Machine: {report.machine_line()}", "",
             f"| {SEPARATE_STORE} | trial | outcome | seconds |", "|---|---|---|---|"]
    for value in ("0", "1"):
        os.environ[SEPARATE_STORE] = value
        for i in range(args.trials):
            outcome, seconds = trial(args.timeout)
            lines.append(f"| {value} | {i} | {outcome.replace('|', '/')} | {seconds:.1f} |")
            print(lines[-1], flush=True)
    print(report.write("restarts", lines))


if __name__ == "__main__":
    main()

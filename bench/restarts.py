"""Chapter 7.1's trap, counted: do restarted ranks form a gloo group again, with and without
the agent's shared store (pytorch/pytorch#135712)?

Each trial is ``helpers.launch(elastic.rejoin, nprocs=2, max_restarts=1)``: rank 1 raises once
the group is up on the first attempt, the agent restarts both ranks, and they must form a plain
``init_process_group("gloo")`` again (``helpers.restarts.rejoin_trial``).
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` is set to each value in turn. Then the restarts under
the torchrun CLI: one node whose rank is killed, and two loopback nodes of which one is lost,
each timed from the first command to the job's end; last, that two-node job with node 1 started
``--late`` seconds after node 0, under a last call shorter and longer than that. Writes
bench/results/restarts.md.

    python bench/restarts.py --trials 5 --timeout 20
"""
from __future__ import annotations

import argparse
import tempfile
import time

import report
from helpers import restarts
from helpers.launch import SEPARATE_STORE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per launch")
    ap.add_argument("--late", type=float, default=6.0, help="seconds node 1 starts after node 0")
    args = ap.parse_args()
    lines = [f"Machine: {report.machine_line()}", "",
             f"| {SEPARATE_STORE} | trial | outcome | seconds |", "|---|---|---|---|"]
    for shared in (True, False):
        for i in range(args.trials):
            o = restarts.rejoin_trial(shared, args.timeout)
            lines.append(f"| {'0' if shared else '1'} | {i} | {o.said.replace('|', '/')} | {o.seconds:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", "| job (elastic.train, 30 steps, fails after step 17) | trial | finished | world after | "
              "resumed from | seconds |", "|---|---|---|---|---|---|"]
    for name, job in (("torchrun --standalone --max-restarts 1, SIGKILL", _cli), ("--nnodes 1:2, node 1 lost", _node)):
        for i in range(args.trials):
            with tempfile.TemporaryDirectory() as folder:
                r = job(folder)
            s = r.summary
            lines.append(f"| {name} | {i} | {r.nodes[0].returncode == 0 and s['steps'] == 30} | "
                         f"{s['world_size']} | {s['resumed_from']} | {r.seconds:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", f"| node 1 starts {args.late:g} s late; last_call_timeout | trial | outcome | seconds |",
              "|---|---|---|---|"]
    for last_call in (2, 10):
        for i in range(args.trials):
            lines.append(f"| {last_call} s | {i} | {_late(last_call, args.late)} |")
            print(lines[-1], flush=True)
    print(report.write("restarts", lines))


def _late(last_call: int, late: float) -> str:
    """What the two-node job did when node 1's agent started ``late`` seconds after node 0's."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        try:
            r = restarts.lose_a_node(folder, last_call=last_call, late=late, fail_at=17, steps=30, save_every=10)
            s = r.summary
            said = f"finished at world size {s['world_size']}, restart {s['restart']}, resumed from {s['resumed_from']}"
        except RuntimeError as e:
            said = "node 0 failed: " + next((ln for ln in reversed(str(e).splitlines()) if "Error" in ln), "")[:120]
    return f"{said.replace('|', '/')} | {time.perf_counter() - start:.1f}"


def _cli(folder: str) -> restarts.CliRun:
    return restarts.torchrun_restart(folder, fail_at=17, how="sigkill", steps=30, save_every=10)


def _node(folder: str) -> restarts.CliRun:
    return restarts.lose_a_node(folder, fail_at=17, steps=30, save_every=10)


if __name__ == "__main__":
    main()

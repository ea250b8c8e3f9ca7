"""Time a 2-rank no-op job (init process group, one all_reduce, return) three ways, side by side.

  (a) helpers.launch, cold: the first launch in a fresh Python process that has imported helpers
  (b) helpers.launch, warm: the launches after it in that same process (their median)
  (c) the torchrun CLI: `torchrun --standalone --nproc-per-node 2 -m helpers.run smoke.allreduce_rank`

The three are interleaved in every round, so machine noise hits them alike. Prints medians and
the ratios c/b and c/a, then where a warm launch's time goes: each stage stamped on the host's
shared clock, in the launcher (torch's elastic agent, wrapped here) and in the ranks
(``smoke.stamped_allreduce``). Usage: python bench/launch.py [--rounds 7] [--warm 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from helpers.training import median

# In a fresh process: a cold launch, then `warm` more, each with the agent's stages stamped.
PROBE = """
import functools, json, sys, time
import helpers
from helpers.recipes import smoke
from torch.distributed.elastic.agent.server import api

STAMPS = {}
def stamped(name, f):
    @functools.wraps(f)
    def g(*a, **k):
        try:
            return f(*a, **k)
        finally:
            STAMPS[name] = time.perf_counter()
    return g
for name in ("_rendezvous", "_initialize_workers"):  # ends: the store and rendezvous; the ranks started
    setattr(api.SimpleElasticAgent, name, stamped(name, getattr(api.SimpleElasticAgent, name)))

if __name__ == "__main__":
    out = []
    for _ in range(1 + int(sys.argv[1])):
        STAMPS.clear()
        t0 = time.perf_counter()
        ranks = helpers.launch(smoke.stamped_allreduce, nprocs=2, show=None)
        t1 = time.perf_counter()
        out.append({"seconds": t1 - t0, "t0": t0, "t1": t1, **STAMPS, "ranks": ranks})
    print(json.dumps(out))
"""

# Stage: from the previous stamp to this one (launcher stamps, or the ranks': the last rank's).
STAGES = [("rendezvous: the agent's store, one node joins", "_rendezvous"),
          ("start the ranks: fork from the forkserver", "_initialize_workers"),
          ("each rank starts: unpickle, import helpers and the recipe, set up", "began"),
          ("gloo connects the group (init_process_group)", "connected"),
          ("the job: one all_reduce", "worked"),
          ("the group torn down (destroy_process_group)", "torn_down"),
          ("teardown: results back, ranks exit, the agent stops", "t1")]


def in_process(warm: int) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(warm)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def breakdown(launch: dict) -> dict[str, float]:
    """Seconds in each stage of one launch."""
    at = {k: launch[k] for k in ("t0", "_rendezvous", "_initialize_workers", "t1")}
    for key in ("began", "connected", "worked", "torn_down"):
        at[key] = max(r[key] for r in launch["ranks"])  # the job waits for its last rank
    marks = ["t0"] + [key for _, key in STAGES]
    return {name: at[key] - at[prev] for (name, key), prev in zip(STAGES, marks)}


def torchrun_cli() -> float:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    t0 = time.perf_counter()
    subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "helpers.run",
                    "smoke.allreduce_rank"], capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warm", type=int, default=3, help="warm launches after the cold one, each round")
    args = ap.parse_args()
    cold, warm, cli, stages = [], [], [], []
    for i in range(args.rounds):
        launches = in_process(args.warm)
        c = torchrun_cli()
        a, b = launches[0]["seconds"], median(x["seconds"] for x in launches[1:])
        cold.append(a), warm.append(b), cli.append(c)
        stages += [breakdown(x) for x in launches[1:]]
        print(f"round {i + 1}: cold {a:.3f} s  warm {b:.3f} s  torchrun {c:.3f} s", flush=True)
    a, b, c = (median(x) for x in (cold, warm, cli))
    print(f"\nmedians over {args.rounds} rounds: (a) cold {a:.3f} s, (b) warm {b:.3f} s, "
          f"(c) torchrun CLI {c:.3f} s")
    print(f"c/b = {c / b:.1f}  (a warm launch is {c / b:.1f}x faster than the CLI)")
    print(f"c/a = {c / a:.1f}  (a cold launch is {c / a:.1f}x faster than the CLI)")
    print(f"\nwhere a warm launch's time goes (median of {len(stages)} warm launches):")
    print("| stage | ms |\n|---|---|")
    for name, _ in STAGES:
        print(f"| {name} | {1e3 * median(s[name] for s in stages):.1f} |")


if __name__ == "__main__":
    main()

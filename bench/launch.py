"""Time a 2-rank no-op job (init process group, one all_reduce, return) three ways, side by side.

  (a) helpers.launch, cold: the first launch in a fresh Python process that has imported helpers
  (b) helpers.launch, warm: the second launch in that same process
  (c) the torchrun CLI: `torchrun --standalone --nproc-per-node 2 -m helpers.run smoke.allreduce_rank`

The three are interleaved in every round, so machine noise hits them alike. Prints medians and
the ratios b/c and a/c. Usage: python bench/launch.py [--rounds 7]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from helpers.training import median

PROBE = """
import json, time, helpers
from helpers.recipes import smoke
if __name__ == "__main__":
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        helpers.launch(smoke.allreduce_rank, nprocs=2, show=None)
        times.append(time.perf_counter() - t0)
    print(json.dumps(times))
"""


def in_process() -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    cold, warm = json.loads(out.stdout.strip().splitlines()[-1])
    return cold, warm


def torchrun_cli() -> float:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    t0 = time.perf_counter()
    subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "helpers.run",
                    "smoke.allreduce_rank"], capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    cold, warm, cli = [], [], []
    for i in range(args.rounds):
        a, b = in_process()
        c = torchrun_cli()
        cold.append(a), warm.append(b), cli.append(c)
        print(f"round {i + 1}: cold {a:.3f} s  warm {b:.3f} s  torchrun {c:.3f} s", flush=True)
    a, b, c = (median(x) for x in (cold, warm, cli))
    print(f"\nmedians over {args.rounds} rounds: (a) cold {a:.3f} s, (b) warm {b:.3f} s, "
          f"(c) torchrun CLI {c:.3f} s")
    print(f"b/c = {b / c:.3f}  (warm launch is {c / b:.1f}x faster than the CLI)")
    print(f"a/c = {a / c:.3f}  (cold launch is {c / a:.1f}x faster than the CLI)")


if __name__ == "__main__":
    main()

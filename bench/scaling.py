"""Chapter 4.1's sweep, larger: DDP strong and weak scaling at one thread per rank, Amdahl fitted.

Runs ``helpers.recipes.scaling.scaling_sweep`` (every p interleaved in one job) over more
rounds, steps and global batches than the notebook, then fits Amdahl's alpha per global
batch, holds out the largest batch for the step model, and reads weak scaling off the grid.
Writes bench/results/scaling.md and prints it.

    python bench/scaling.py                       # p = 1, 2, 4, ... up to the cores, and 2x cores
    python bench/scaling.py --rounds 20 --steps 30 --global-batches 256 512 1024 --model wide
"""
from __future__ import annotations

import argparse
import time

import helpers
import report
from helpers import data
from helpers.analysis import ScalingRuns
from helpers.machine import this as this_machine
from helpers.recipes import scaling
from helpers.training import PHASES


def main() -> None:
    cores = this_machine().cores
    default_ps = [2**k for k in range(6) if 2**k <= cores] + ([2 * cores] if cores <= 8 else [])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ps", type=int, nargs="+", default=default_ps)
    ap.add_argument("--global-batches", type=int, nargs="+", default=[320, 640, 960, 1280],
                    help="strong scaling; the smallest is also the weak-scaling per-rank batch")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", choices=["simple", "wide-1024x4"], default="simple")
    args = ap.parse_args()
    ps, Gs = sorted(args.ps), sorted(args.global_batches)
    assert ps[0] == 1, "the sweep needs p = 1 as its reference"

    start = time.perf_counter()
    sweep = helpers.launch(scaling.scaling_sweep, nprocs=max(ps), threads=1, timeout=3600, show=None,
                           ps=ps, global_sizes=Gs, per_rank_batches=[Gs[0]], rounds=args.rounds,
                           steps=args.steps, model=args.model, dataset=data.load(train=True))[0]
    wall = time.perf_counter() - start
    runs, ok = ScalingRuns(sweep["runs"]), [p for p in ps if p <= cores]

    lines = ["## Strong scaling (chapter 4.1): `bench/scaling.py`", "",
             f"{report.machine_line()}; model {args.model}, one thread per rank, "
             f"backend {sweep['backend']}; {args.rounds} rounds x {args.steps} steps per (p, G) block; "
             f"job wall time {wall:.0f} s. Data: {data.source().name}.", "",
             "Median step time (ms) and speedup T_1/T_p (median over rounds); p past the cores marked *.", "",
             "| G | " + " | ".join(f"p={p}{'*' if p > cores else ''}" for p in ps) + " | alpha (fit, p <= cores) |",
             "|---|" + "---|" * len(ps) + "---|"]
    for G in Gs:
        fit = runs.fit_amdahl(ok, G)
        cells = [f"{runs.median('step', p, G) * 1e3:.2f} ({runs.speedup(p, G):.2f}x)" for p in ps]
        lines.append(f"| {G} | " + " | ".join(cells) + f" | {fit.alpha:.3f} +- {fit.stderr:.3f} |")

    model = runs.step_model(ok, Gs[-1])
    lines += ["", f"Held out: G = {Gs[-1]}, predicted by T_p(b) = s_p + c b fitted on the smaller batches "
              f"(c = {model.per_sample * 1e6:.2f} us/sample, s_p = "
              + ", ".join(f"{p}: {s * 1e3:.2f} ms" for p, s in model.serial.items()) + ").", "",
              "| p | predicted S | measured S | error |", "|---|---|---|---|"]
    for p in ok[1:]:
        pred, meas = model.speedup(p, Gs[-1]), runs.speedup(p, Gs[-1])
        lines.append(f"| {p} | {pred:.3f} | {meas:.3f} | {abs(pred - meas) / meas:.1%} |")

    lines += ["", f"Phases at G = {Gs[1]} (median ms per step):", "",
              "| p | " + " | ".join(PHASES) + " |", "|---|" + "---|" * len(PHASES)]
    for p in ps:
        lines.append(f"| {p} | " + " | ".join(f"{runs.median(ph, p, Gs[1]) * 1e3:.3f}" for ph in PHASES) + " |")

    lines += ["", f"Weak scaling at b = {Gs[0]} per rank:", "",  # the sweep ran b = Gs[0] at every p
              "| p | samples/s | efficiency T_1(b)/T_p(b) |", "|---|---|---|"]
    for p, w in runs.weak(ps, Gs[0]).items():
        lines.append(f"| {p} | {w['samples_per_s']:.0f} | {w['efficiency']:.3f} |")
    print(report.write("scaling", lines))


if __name__ == "__main__":
    main()

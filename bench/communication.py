"""Chapter 4.2's sweep, larger: all_reduce time by size and p, the alpha-beta fit, a DDP step predicted.

For each p, times all_reduce from 4 KB to 256 MB (``helpers.recipes.collectives``), fits
T = L + M/B on the latency- and bandwidth-bound ends (held out: every other bandwidth-bound size),
and checks the ring model fitted at p = 2 against the other p. Then predicts DDP steps of
two models at several batches from the fit and the measured compute. Writes
bench/results/communication.md and prints it.

    python bench/communication.py
    python bench/communication.py --ps 2 4 --max-mb 64 --budget-mb 1024
"""
from __future__ import annotations

import argparse

import numpy as np

import helpers
import report
from helpers import data, theory
from helpers.analysis import ddp_step_predictions, fit_allreduce
from helpers.machine import this as this_machine
from helpers.recipes import collectives, scaling

MB = 2**20


def main() -> None:
    cores = this_machine().cores
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ps", type=int, nargs="+", default=[p for p in (2, 3, 4, 8, 16) if p <= cores]
                    + ([2 * cores] if cores <= 4 else []))
    ap.add_argument("--max-mb", type=int, default=256)
    ap.add_argument("--budget-mb", type=int, default=1024)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 128, 512])
    args = ap.parse_args()
    sizes = [4096 * 2**k for k in range(30) if 4096 * 2**k <= args.max_mb * MB]

    sweeps = {}
    for p in args.ps:
        over = p > cores
        sweeps[p] = helpers.launch(collectives.allreduce_sweep, nprocs=p, threads=1, timeout=3600, show=None,
                                   sizes=sizes[::2] if over else sizes, budget_bytes=args.budget_mb * MB,
                                   max_repeats=10 if over else 60)[0]
        print(f"p = {p} done", flush=True)
    copy_bw = sweeps[args.ps[0]]["copy_bw"]

    lines = ["## all_reduce (chapter 4.2): `bench/communication.py`", "",
             f"{report.machine_line()}; one thread per rank, "
             f"backend {sweeps[args.ps[0]]['backend']}. One core copies memory at {copy_bw / 1e9:.2f} GB/s. "
             "p past the cores marked *.", "",
             "Median time (ms) / bus bandwidth (GB/s):", "",
             "| size | " + " | ".join(f"p={p}{'*' if p > cores else ''}" for p in sweeps) + " |",
             "|---|" + "---|" * len(sweeps)]
    for m in sizes:
        cells = []
        for p, sw in sweeps.items():
            if m in sw["sizes"]:
                t = sw["seconds"][sw["sizes"].index(m)]
                cells.append(f"{t * 1e3:.3f} / {theory.busbw(m, t, p) / 1e9:.3f}")
            else:
                cells.append("")
        lines.append(f"| {m / 1024:.0f} KB | " + " | ".join(cells) + " |")

    lines += ["", "Fit T = L + M/B per p (latency-bound sizes and every other bandwidth-bound size; "
              "R^2 over the bandwidth-bound sizes; the other bandwidth-bound sizes held out):", "",
              "| p | L (us) | B (GB/s) | n_1/2 (KB) | R^2 | worst held-out error | ring model from p=2, worst error (bandwidth-bound) |",
              "|---|---|---|---|---|---|---|"]
    fit2 = None
    for p, sw in sweeps.items():
        f = fit_allreduce(sw["sizes"], sw["seconds"])
        m, t, bw, err = f.sizes, f.seconds, f.bandwidth_bound, f.held_errors
        fit2 = fit2 or (f.fit if p == 2 else None)
        ring = ""
        if fit2 is not None and p != 2:
            step_latency, seconds_per_byte = theory.ring_from_fit(fit2, 2)
            pred = theory.ring_allreduce_time(m[bw], p, step_latency, seconds_per_byte)
            ring = f"{np.max(np.abs(pred - t[bw]) / t[bw]):.1%}"
        lines.append(f"| {p}{'*' if p > cores else ''} | {f.fit.latency * 1e6:.0f} | {f.fit.bandwidth / 1e9:.3f} | "
                     f"{f.fit.half_size / 1024:.0f} | {f.r2:.4f} | "
                     f"{err.max() if err.size else float('nan'):.1%} | {ring} |")

    train = data.load(train=True)
    lines += ["", "DDP step on 2 ranks: predicted T_compute + L + M/B (p = 2 fit) against plain DDP:", "",
              "| model | grad MB | batch/rank | T_compute ms | T_comm ms | predicted ms | measured ms | error |",
              "|---|---|---|---|---|---|---|---|"]
    for model in ("simple", "wide-1024x4"):
        configs = [{"per_rank_batch": b, "model": model, "overlap": o} for b in args.batches for o in (False, True)]
        runs = helpers.launch(scaling.timed_training, nprocs=2, threads=1, timeout=3600, show=None, steps=40,
                              dataset=train, configs=configs)[0]["runs"]
        for s in ddp_step_predictions(runs, fit2):
            lines.append(f"| {model} ({s['buckets']} buckets) | {s['grad_bytes'] / MB:.2f} | "
                         f"{s['per_rank_batch']} | {s['t_compute'] * 1e3:.2f} | {s['t_comm'] * 1e3:.2f} | "
                         f"{s['no_overlap'] * 1e3:.2f} | {s['measured'] * 1e3:.2f} | {s['error']:.1%} |")
    print(report.write("communication", lines))


if __name__ == "__main__":
    main()

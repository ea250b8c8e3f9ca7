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
import os
from pathlib import Path

import numpy as np

import helpers
from helpers import book, data, theory
from helpers.recipes import collectives, scaling

RESULTS = Path(__file__).resolve().parent / "results"
MB = 2**20


def fit_ends(m, t):
    """The chapter's fit: classify by a first fit's n_1/2; fit the latency-bound sizes and every
    other bandwidth-bound one, hold out the rest of the bandwidth-bound sizes."""
    rough = theory.fit_alpha_beta(m, t)
    lat, bw = m <= rough.half_size / 8, m >= 8 * rough.half_size
    even = np.arange(len(m)) % 2 == 0
    fit = theory.fit_alpha_beta(m[lat | bw & even], t[lat | bw & even])
    held = bw & ~even
    err = np.abs(fit.seconds(m[held]) - t[held]) / t[held]
    return fit, bw, held, err


def main() -> None:
    cores = len(os.sched_getaffinity(0))
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
             f"{book.cpu_model()}, {cores} cores, torch {book.machine()['torch']}, one thread per rank, "
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
        m, t = np.array(sw["sizes"], float), np.array(sw["seconds"])
        fit, bw, held, err = fit_ends(m, t)
        fit2 = fit2 or (fit if p == 2 else None)
        ring = ""
        if fit2 is not None and p != 2:
            a, b = theory.ring_from_fit(fit2, 2)
            pred = theory.ring_allreduce_time(m[bw], p, a, b)
            ring = f"{np.max(np.abs(pred - t[bw]) / t[bw]):.1%}"
        lines.append(f"| {p}{'*' if p > cores else ''} | {fit.latency * 1e6:.0f} | {fit.bandwidth / 1e9:.3f} | "
                     f"{fit.half_size / 1024:.0f} | {fit.r2(m[bw], t[bw]):.4f} | "
                     f"{err.max() if err.size else float('nan'):.1%} | {ring} |")

    train = data.load(train=True)
    lines += ["", "DDP step on 2 ranks: predicted T_compute + L + M/B (p = 2 fit) against plain DDP:", "",
              "| model | grad MB | batch/rank | T_compute ms | T_comm ms | predicted ms | measured ms | error |",
              "|---|---|---|---|---|---|---|---|"]
    for model in ("simple", "wide"):
        configs = [{"per_rank_batch": b, "model": model, "overlap": o} for b in args.batches for o in (False, True)]
        runs = helpers.launch(scaling.timed_training, nprocs=2, threads=1, timeout=3600, show=None, steps=40,
                              dataset=train, configs=configs)[0]["runs"]
        for timed, real in zip(runs[::2], runs[1::2]):
            tc = timed["data"] + timed["forward"] + timed["backward"] + timed["optimizer"]
            tm = float(fit2.seconds(timed["grad_bytes"]))
            lines.append(f"| {model} ({real['buckets']} buckets) | {timed['grad_bytes'] / MB:.2f} | "
                         f"{timed['per_rank_batch']} | {tc * 1e3:.2f} | {tm * 1e3:.2f} | {(tc + tm) * 1e3:.2f} | "
                         f"{real['step'] * 1e3:.2f} | {abs(tc + tm - real['step']) / real['step']:.1%} |")
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "communication.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

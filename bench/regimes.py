"""When adding ranks pays (issue 11): the compute-bound and the communication-bound regimes, measured.

Three jobs of 2 ranks, one thread per rank, each with its variants interleaved round by round
(``helpers.recipes.regimes``):

1. Strong scaling S(2) = T_1(G) / T_2(G) per round, for SimpleModel and WideMLP at several
   global batches G (and weak scaling at per-rank batches b, from the same grid).
2. A small gloo all_reduce's time back to back, after a few ms of compute, after as much sleep,
   pinned, after a barrier, and with idle CPUs polling; split into waiting for the peer (skew) and the rest.
3. How much one rank's training step slows when the other rank computes at the same time.
4. Chapter 4.3's predictor: fitted on some (model, batch) jobs, scored on held-out ones.

Writes bench/results/regimes.md and prints it.

    python bench/regimes.py
    python bench/regimes.py --rounds 2 --steps 3 --reps 5 --global-batches 256 1024   # a smoke run
"""
from __future__ import annotations

import argparse
import time

import torch

import helpers
import report
from helpers import data, machine, plans
from helpers.analysis import (ScalingRuns, calibrate, contention_slowdown, crossovers, errors, held_out,
                              paired_ratios, ratio_spread, speedup_lead, split_calls)
from helpers.recipes import regimes
from helpers.training import median

MODELS = ["simple", "wide-1024x4"]


def scaling_section(args) -> list[str]:
    Gs, weak_b = sorted(args.global_batches), sorted(args.weak_batches)
    models = MODELS + (["wide-1024x4 overlap"] if args.overlap else [])
    sizes = {m: Gs + (args.wide_batches if m.startswith("wide") else []) for m in models}
    start = time.perf_counter()
    res = helpers.launch(regimes.strong_scaling, nprocs=2, threads=1, backend="gloo", timeout=1800, show=None,
                         model_names=models, global_sizes=sizes, per_rank_batches=weak_b,
                         dataset=data.at_least(max(Gs + args.wide_batches + [2 * b for b in weak_b])),
                         steps={"simple": args.steps, "wide-1024x4": max(3, args.steps // 6)},
                         rounds=args.rounds)[0]
    wall = time.perf_counter() - start
    lines = ["### 1. Strong scaling: S(2) = T_1(G) / T_2(G), same global batch G", "",
             f"One job, {args.rounds} rounds; each round runs every (model, p, per-rank batch) block "
             f"({args.steps} steps simple, {max(3, args.steps // 6)} wide; median step per block), "
             f"p = 1 and p = 2 alternating first. DDP with the timed (blocking) all_reduce hook of "
             f"`scaling.Trainer` (\"overlap\": plain DDP), the article's DataLoader pipeline over the "
             f"training digits repeated. Job wall time {wall:.0f} s.", "",
             "| model | grad MB | G | T_1 ms | T_2 ms | comm at p=2 ms (timed hook) | S(2) median | min | max |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        runs = ScalingRuns([r for r in res["runs"] if r["model"] == m])
        mb = res["facts"][m]["grad_bytes"] / 1e6
        for G in sizes[m]:
            s = ratio_spread(paired_ratios(runs.rows, {"p": 1, "G": G}, {"p": 2, "G": G}))
            lines.append(f"| {m} | {mb:.2f} | {G} | {runs.median('step', 1, G) * 1e3:.2f} | "
                         f"{runs.median('step', 2, G) * 1e3:.2f} | {runs.median('comm', 2, G) * 1e3:.2f} | "
                         f"**{s['median']:.2f}** | {s['min']:.2f} | {s['max']:.2f} |")
    lines += ["", "Weak scaling from the same grid: per-rank batch b fixed, "
              "scaled speedup 2 T_1(b) / T_2(2b) per round:", "",
              "| model | b | T_1(b) ms | T_2(2b) ms | scaled speedup median | min | max |", "|---|---|---|---|---|---|---|"]
    for m in MODELS:
        runs = ScalingRuns([r for r in res["runs"] if r["model"] == m])
        for b in weak_b:
            s = ratio_spread([2 * x for x in paired_ratios(runs.rows, {"p": 1, "G": b}, {"p": 2, "G": 2 * b})])
            lines.append(f"| {m} | {b} | {runs.median('step', 1, b) * 1e3:.2f} | "
                         f"{runs.median('step', 2, 2 * b) * 1e3:.2f} | {s['median']:.2f} | "
                         f"{s['min']:.2f} | {s['max']:.2f} |")
    return lines


def allreduce_section(args) -> list[str]:
    ranks = helpers.launch(regimes.allreduce_after_compute, nprocs=2, threads=1, backend="gloo", timeout=900, show=None,
                           sizes=[4096, 1 << 20], compute_ms=args.compute_ms, reps=args.reps,
                           rounds=max(2, args.rounds // 2))
    r0 = ranks[0]
    lines = ["", f"### 2. One all_reduce's cost: back to back, and after {args.compute_ms:g} ms of compute", "",
             f"One job, {max(2, args.rounds // 2)} rounds x {args.reps} calls per (group, condition, size); "
             f"compute = {r0['matmuls']} matmuls of 256x256 ({r0['matmul_s'] * 1e3:.3f} ms each). "
             "Conditions: back-to-back; compute (matmuls, then the all_reduce); sleep (as long, idle); "
             "pinned (compute, each rank's threads all on core rank); pinned sleep (sleep, pinned); barrier (compute, barrier, then the "
             "timed all_reduce); X +poll: X with a 0 us PM QoS request held (/dev/cpu_dma_latency), "
             "so idle CPUs poll instead of halting. Medians over all calls of both ranks. skew: last rank's start minus "
             "first's; after both: last start to last end, the call's cost once nobody waits.", "",
             "| group | condition | size | all_reduce ms | skew ms | after both arrived ms |",
             "|---|---|---|---|---|---|"]
    keys = dict.fromkeys((row["group"], row["condition"], row["size"]) for row in r0["rows"])
    for g, cond, size in keys:
        blocks = [[row for row in rk["rows"] if (row["group"], row["condition"], row["size"]) == (g, cond, size)]
                  for rk in ranks]
        split = {"seconds": [], "skew": [], "after_both": []}
        for per_round in zip(*blocks):
            for k, v in split_calls([b["calls"] for b in per_round]).items():
                split[k] += v
        lines.append(f"| {g} | {cond} | {size // 1024} KB | {median(split['seconds']) * 1e3:.3f} | "
                     f"{median(split['skew']) * 1e3:.3f} | {median(split['after_both']) * 1e3:.3f} |")
    return lines


def contention_section(args) -> list[str]:
    configs = [("simple", 512), ("simple", 2048), ("wide-1024x4", 128), ("wide-1024x4", 512)]
    ranks = helpers.launch(regimes.contention, nprocs=2, threads=1, backend="gloo", timeout=900, show=None,
                           configs=configs, steps=max(3, args.steps // 2), rounds=args.rounds)
    table = contention_slowdown([row for rk in ranks for row in rk["rows"]])
    lines = ["", "### 3. Ranks contending: one rank's step alone vs. with the other rank computing", "",
             f"One job, {args.rounds} rounds; per round and model: rank 0 alone (rank 1 idle in a barrier), "
             "rank 1 alone, both together (order rotated). A step: forward, backward, SGD on one batch, "
             "no DDP. Slowdown: together / alone, per rank and round.", "",
             "| model | batch | alone ms | together ms | slowdown median | min | max |",
             "|---|---|---|---|---|---|---|"]
    for (m, b), v in table.items():
        lines.append(f"| {m} | {b} | {v['alone'] * 1e3:.2f} | {v['together'] * 1e3:.2f} | "
                     f"{v['median']:.3f} | {v['min']:.3f} | {v['max']:.3f} |")
    return lines


def prediction_section(args) -> list[str]:
    """Chapter 4.3's job at ``args.rounds``: the predictor's fits, and every held-out pair against it."""
    start = time.perf_counter()
    job = helpers.launch(regimes.predictor_job, nprocs=2, threads=1, backend="gloo", timeout=1800, show=None,
                         rounds=args.rounds,
                         dataset=data.at_least(max(G for Gs in regimes.HELD_OUT.values() for G in Gs)))
    wall = time.perf_counter() - start
    cal = calibrate(job[0]["sweep"], job, regimes.CALIBRATION)
    rows, fit, k = held_out(job, cal, regimes.HELD_OUT), cal.allreduce.fit, cal.link
    e, a, noise = errors(rows), errors(rows, "article_error"), errors(rows, "scatter")
    lines = ["", "### 4. The predictor (chapter 4.3) on held-out jobs", "",
             f"`regimes.predictor_job`, {args.rounds} rounds, job wall time {wall:.0f} s. Fitted on "
             f"{regimes.CALIBRATION} (timed hook): L = {fit.latency * 1e6:.0f} us, B = {fit.bandwidth / 1e9:.2f} "
             f"GB/s, per call in a step +{k.per_call * 1e3:.2f} ms, wait = {k.wait.fixed * 1e3:.2f} ms + "
             f"{k.wait.slope:.3f} x compute, contention {cal.contention:.3f}. Held out: plain DDP.", "",
             "| model | G | measured S(2) | rounds' range | predicted | error | article's | article's error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['G']} | **{r['measured']:.2f}** | {r['spread'][0]:.2f}-{r['spread'][1]:.2f} "
                     f"| {r['predicted']:.2f} | {r['error']:.1%} | {r['article']:.2f} | {r['article_error']:.1%} |")
    lines += ["", f"Predictor: median error {e['median']:.1%}, worst {e['worst']:.1%} over {e['n']} pairs; "
              f"the article's T = T_1/2 + M/B + L: median {a['median']:.1%}, worst {a['worst']:.1%}. The rounds' "
              f"own scatter (half their range): median {noise['median']:.1%}, widest {noise['worst']:.1%}.", "",
              "Crossover, the G at which S(2) first reaches 1.5 (predicted / measured, steps of the grid apart): "
              + "; ".join(f"{m} {c['predicted']} / {c['measured']} ({c['steps_apart']})"
                          for m, c in crossovers(rows).items()) + "."]
    return lines + good_regime_lines(job, rows, args.rounds)


def good_regime_lines(job: list[dict], rows: list[dict], rounds: int) -> list[str]:
    """The bound chapter 4.3 leaves to this bench: its compute-bound job's S(2) above 1.5 where each rank
    has a physical core (``plans.good_regime_claim``); the chapter asserts only ``speedup_lead``."""
    good, small = regimes.COMPUTE_BOUND, regimes.TALK_BOUND
    s = next(r for r in rows if (r["model"], r["G"]) == good)
    lead = speedup_lead(job, good, small)
    here = machine.this()
    verdict = ("above 1.5, as expected with a physical core per rank" if s["measured"] > 1.5 else
               "NOT above 1.5, although each rank had a physical core: look at this run") \
        if plans.good_regime_claim(here) else "no bound expected: the two ranks shared one physical core"
    return ["", f"The compute-bound job, {good[0]} at G = {good[1]}: S(2) {s['measured']:.2f} over {rounds} rounds "
                f"(range {s['spread'][0]:.2f}-{s['spread'][1]:.2f}), {verdict}. Against {small[0]} at G = {small[1]} "
                f"in the same rounds: {lead['median']:.2f}x its S(2) (range {lead['min']:.2f}-{lead['max']:.2f})."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--global-batches", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    ap.add_argument("--wide-batches", type=int, nargs="+", default=[16384],
                    help="global batches for WideMLP only, deep in the compute-bound regime")
    ap.add_argument("--overlap", action="store_true", help="also WideMLP under plain DDP (overlapped)")
    ap.add_argument("--weak-batches", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--compute-ms", type=float, default=3.0)
    ap.add_argument("--only", choices=["scaling", "allreduce", "contention", "prediction"], nargs="+",
                    default=["scaling", "allreduce", "contention", "prediction"])
    args = ap.parse_args()
    start = time.perf_counter()
    lines = ["## When adding ranks pays: `bench/regimes.py`", "",
             f"{report.machine_line()}; 2 ranks, one thread per rank, gloo on the CPU; "
             f"{time.strftime('%Y-%m-%d', time.gmtime())}.", ""]
    sections = {"scaling": scaling_section, "allreduce": allreduce_section, "contention": contention_section,
                "prediction": prediction_section}
    for name in args.only:
        lines += sections[name](args)
    lines += ["", f"Whole run: {time.perf_counter() - start:.0f} s (torch threads per rank: "
              f"{torch.get_num_threads()} in the launching process, 1 in the ranks)."]
    print(report.write("regimes", lines))


if __name__ == "__main__":
    main()

"""The planner (8.5) against what ran: Narayanan et al.'s Table 1 as a table to print, and this
machine as a cluster, for the held-out check against chapter 8.4's own runs."""
from __future__ import annotations

from ..theory import planner, ring_from_fit
from ..theory.planner import published

NARAYANAN_HEADER = ["model", "t", "p", "d", "GPUs", "batch", "b", "v", "published TFLOP/s", "predicted", "error",
                    "memory GiB", "fits", "rank", "planner's best (d, t, p)", "published / best step"]


def narayanan_table(efficiency: float = published.EFFICIENCY) -> list[published.Row]:
    """Every row of Table 1 priced and ranked (``theory.planner.published.compare``)."""
    return published.compare(efficiency)


def narayanan_cells(rows: list[published.Row]) -> tuple[list[str], list[list[str]]]:
    """The rows as table cells, one line each, failures marked rather than left out."""
    body = []
    for r in rows:
        best = r.best_mesh[:3] if r.best_mesh else ()
        body.append([f"{r.billions:g}B", r.tp, r.pp, r.dp, r.gpus, r.batch, r.micro_batch, r.virtual,
                     f"{r.published_tflops:g}", f"{r.predicted_tflops:.0f}", f"{r.error:+.0%}",
                     f"{r.memory_gib:.1f}", "yes" if r.fits else "NO", r.rank if r.rank else "-", str(best),
                     f"{1 + r.slower_than_best:.3f}{'' if r.passes else ' FAILS'}"])
    return NARAYANAN_HEADER, body


def markdown(rows: list[published.Row]) -> str:
    """``narayanan_cells`` as a Markdown table (bench/RESULTS.md)."""
    header, body = narayanan_cells(rows)
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(header), line(["---"] * len(header)), *map(line, body)])


RANKED_HEADER = ["#", "mesh (dp, tp, pp, cp, ep)", "ZeRO", "recompute", "micro-batch", "chunks",
                 "memory a GPU (GiB)", "step (s)", "tokens/s", "MFU"]


def ranked_cells(ranked: list[planner.Priced]) -> tuple[list[str], list[list[str]]]:
    """A plan's layouts, fastest first, as table cells (GiB = 2^30 bytes)."""
    return RANKED_HEADER, [[i, str(p.layout.mesh()), p.layout.zero, p.layout.recompute, p.layout.micro_batch,
                            p.layout.virtual, f"{p.memory_bytes / 2**30:.1f}", f"{p.step_s:.2f}",
                            f"{p.tokens_per_s:,.0f}", f"{p.mfu:.1%}"] for i, p in enumerate(ranked, 1)]


def why_first(ranked: list[planner.Priced]) -> list[tuple[str, float]]:
    """Where the first layout's step gains on the second's: (part, seconds the second spends more),
    largest gain first, only the parts where the second is slower."""
    if len(ranked) < 2:
        raise ValueError("a plan of one layout has no runner-up to compare with")
    a, b = ranked[0].time, ranked[1].time
    return sorted(((k, b[k] - a[k]) for k in planner.TIME_PARTS if b[k] > a[k]), key=lambda kv: -kv[1])


def passing_efficiencies(lows_to_highs=tuple(x / 100 for x in range(40, 61))) -> list[float]:
    """The efficiencies at which every row passes: how much room the one stated value has."""
    return [e for e in lows_to_highs if all(r.passes for r in published.compare(e))]


def machine_cluster(machine, fit, nprocs: int, flops_per_rank: float) -> planner.Cluster:
    """This machine as a cluster of ``nprocs`` gloo ranks (chapter 8.4's held-out runs): its RAM
    split between them, the ring of chapter 4.2's all_reduce fit (an ``AllreduceFit`` or
    ``AlphaBetaFit`` measured at ``nprocs`` ranks), and one rank's measured FLOP/s."""
    alpha_beta = getattr(fit, "fit", fit)
    if not machine.memory:
        raise ValueError("the machine's RAM is not known (Machine.memory = 0): nothing to fit a layout into")
    step_latency, seconds_per_byte = ring_from_fit(alpha_beta, nprocs)
    return planner.machine_cluster(nprocs, machine.memory / nprocs, flops_per_rank, step_latency, seconds_per_byte)

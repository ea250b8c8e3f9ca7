"""The planner (8.5) against what ran: Narayanan et al.'s Table 1 as a table to print, and this
machine as a cluster, for the held-out check against chapter 8.4's own runs."""
from __future__ import annotations

from ..theory import planner, ring_from_fit
from ..theory.planner import published

TABLE_HEADER = ("| model | t | p | d | GPUs | batch | b | v | published TFLOP/s | predicted | error "
                "| memory GiB | fits | rank | planner's best (d, t, p) | published / best step |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def narayanan_table(efficiency: float = published.EFFICIENCY) -> list[published.Row]:
    """Every row of Table 1 priced and ranked (``theory.planner.published.compare``)."""
    return published.compare(efficiency)


def markdown(rows: list[published.Row]) -> str:
    """The rows as a Markdown table, one line each, failures marked rather than left out."""
    lines = [TABLE_HEADER]
    for r in rows:
        best = r.best_mesh[:3] if r.best_mesh else ()
        lines.append(
            f"| {r.billions:g}B | {r.tp} | {r.pp} | {r.dp} | {r.gpus} | {r.batch} | {r.micro_batch} | {r.virtual} "
            f"| {r.published_tflops:g} | {r.predicted_tflops:.0f} | {r.error:+.0%} | {r.memory_gib:.1f} "
            f"| {'yes' if r.fits else 'NO'} | {r.rank if r.rank else '-'} | {best} "
            f"| {1 + r.slower_than_best:.3f}{'' if r.passes else ' FAILS'} |")
    return "\n".join(lines)


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

"""The planner (8.5) against what ran: Narayanan et al.'s Table 1 as a table to print, and this
machine as a cluster, for the held-out check against chapter 8.4's own runs: the planner told what
8.4's recipe trains with (``run_model``, ``run_layout``), its memory set beside the hooks' per stage."""
from __future__ import annotations

from dataclasses import replace
from statistics import correlation, median
from typing import Callable

from . import four_d
from .. import plans
from ..theory import four_d as four_d_theory, planner, ring_from_fit
from ..theory.memory import model_state_bytes
from ..theory.planner import a100_runs, llama3, published

NARAYANAN_HEADER = ["model", "t", "p", "d", "GPUs", "batch", "b", "v", "published TFLOP/s", "predicted", "error",
                    "memory GiB", "fits", "rank", "planner's best (d, t, p)", "published / best step", "row"]


def narayanan_table(efficiency: float = published.MATMUL_EFFICIENCY,
                    attention: float | None = published.ATTENTION_EFFICIENCY) -> list[published.Row]:
    """Every row of Table 1 priced and ranked (``theory.planner.published.compare``)."""
    return published.compare(efficiency, attention=attention)


def ranks(values) -> list[float]:
    """1 for the smallest value, n for the largest; tied values share the mean of their places."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def rank_correlation(xs, ys) -> float:
    """Spearman's rho: the Pearson correlation of the two lists' ranks (+1: the same order)."""
    return correlation(ranks(xs), ranks(ys))


def table_1_errors(rows: list[published.Row]) -> dict[str, float]:
    """How the planner's Table 1 predictions stand: its largest |error| on all rows, on the rows the
    fit saw and on the held-out ones; a baseline's, which says the published median for every row;
    and Spearman's rho of predicted against published TFLOP/s (does it follow the trend?)."""
    pub = [r.published_tflops for r in rows]
    mid = median(pub)

    def worst(errors):
        return max(errors, key=abs)
    return {"worst": worst([r.error for r in rows]), "fit_worst": worst([r.error for r in rows if not r.held_out]),
            "held_worst": worst([r.error for r in rows if r.held_out]), "baseline": mid,
            "baseline_worst": worst([mid / p - 1 for p in pub]),
            "rho": rank_correlation([r.predicted_tflops for r in rows], pub)}


def narayanan_cells(rows: list[published.Row]) -> tuple[list[str], list[list[str]]]:
    """The rows as table cells, one line each, failures marked rather than left out."""
    body = []
    for r in rows:
        best = r.best_mesh[:3] if r.best_mesh else ()
        body.append([f"{r.billions:g}B", r.tp, r.pp, r.dp, r.gpus, r.batch, r.micro_batch, r.virtual,
                     f"{r.published_tflops:g}", f"{r.predicted_tflops:.0f}", f"{r.error:+.1%}",
                     f"{r.memory_gib:.1f}", "yes" if r.fits else "NO", r.rank if r.rank else "-", str(best),
                     f"{1 + r.slower_than_best:.3f}{'' if r.passes else ' FAILS'}",
                     "held out" if r.held_out else "fitted on"])
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


RUNS_HEADER = ["run", "source", "GPUs", "(dp, tp, pp, cp)", "context", "fits", "memory GiB", "published TFLOP/s",
               "predicted", "error", "rank", "published / best step", "targets"]


def published_runs(llama=None) -> list[tuple[str, str, llama3.Run]]:
    """Issue 35's runs beside the planner, as (model, source, ``Run``): Llama 3 405B's three layouts
    (``llama``: ``llama3.compare()``'s rows, or others priced so), MT-NLG 530B's three and BLOOM 176B."""
    rows = [("Llama 3 405B", "Dubey et al. 2024, Table 4", r) for r in (llama or llama3.compare())]
    return rows + [(run[0], a100_runs.SOURCES[run[0]], r) for run, r in zip(a100_runs.RUNS, a100_runs.compare())]


def published_runs_cells(runs) -> tuple[list[str], list[list[str]]]:
    """``published_runs`` as table cells, a run that misses issue 35's targets marked."""
    return RUNS_HEADER, [[name, source, f"{r.gpus:,}", str(r.mesh), f"{r.seq // 1024}K", "yes" if r.fits else "NO",
                          f"{r.memory_gib:.1f}", f"{r.published_tflops:g}", f"{r.predicted_tflops:.0f}",
                          f"{r.error:+.1%}", r.rank or "-", f"{1 + r.slower_than_best:.3f}",
                          "met" if r.passes else "MISSED"] for name, source, r in runs]


def llama3_without() -> dict[str, list[llama3.Run]]:
    """Llama 3's rows priced without what issue 35 taught the planner, one thing at a time: every
    pipeline chunk holding layers; flash attention at the matmuls' efficiency; the search free to use
    what Llama 3's stack did not offer (ZeRO-1, ring attention)."""
    as_matmuls = lambda gpus: replace(llama3.h100s(gpus), flash_efficiency=None)  # noqa: E731
    return {"no chunks for the embedding and the head": llama3.compare(ends=False,
                                                                        stack={**llama3.STACK, "end_chunks": (False,)}),
            "attention at the matmuls' efficiency": llama3.compare(cluster_of=as_matmuls),
            "ZeRO-1 and ring attention allowed": llama3.compare(stack={**llama3.STACK, "zero": (0, 1, 2, 3),
                                                                        "cp_ring": True})}


def passing_efficiencies(lows_to_highs=tuple(x / 100 for x in range(40, 81))) -> list[float]:
    """The matmul efficiencies (the attention core's kept) at which every row passes: how much room
    the fitted value has."""
    return [e for e in lows_to_highs if all(r.passes for r in published.compare(e))]


def machine_cluster(machine, fit, nprocs: int, flops_per_rank: float, fit_ranks: int | None = None,
                    flash_fraction: float | None = None) -> planner.Cluster:
    """This machine as a cluster of ``nprocs`` gloo ranks (chapter 8.4's held-out runs): its RAM
    split between them, the ring of chapter 4.2's all_reduce fit (an ``AllreduceFit`` or
    ``AlphaBetaFit`` measured at ``fit_ranks`` ranks, default ``nprocs``), one rank's FLOP/s, and
    ``flash_fraction``, its fused attention's measured FLOP/s over the matmul's (at most 1)."""
    alpha_beta = getattr(fit, "fit", fit)
    if not machine.memory:
        raise ValueError("the machine's RAM is not known (Machine.memory = 0): nothing to fit a layout into")
    step_latency, seconds_per_byte = ring_from_fit(alpha_beta, fit_ranks or nprocs)
    flash = None if flash_fraction is None else min(1.0, flash_fraction)
    return planner.machine_cluster(nprocs, machine.memory / nprocs, flops_per_rank, step_latency, seconds_per_byte,
                                   flash_efficiency=flash)


def rank_flops(machine, device_flops: float, nprocs: int) -> float:
    """One rank's FLOP/s when ``nprocs`` share this machine, from ``device_flops`` measured on one
    thread (or one GPU): a GPU each where every rank has one; else its threads' worth, or, where ranks
    outnumber cores, its turn on one (cores / nprocs of it)."""
    if plans.job(machine, nprocs).backend == "nccl":
        return device_flops
    return device_flops * machine.threads_per_rank(nprocs) * min(1.0, machine.cores / nprocs)


def clusters(machine, fit, device_flops: float, fit_ranks: int,
             flash_fraction: float | None = None) -> Callable[[int], planner.Cluster]:
    """nprocs -> this machine as a cluster of that many ranks: ``machine_cluster`` at ``rank_flops``."""
    return lambda nprocs: machine_cluster(machine, fit, nprocs, rank_flops(machine, device_flops, nprocs), fit_ranks,
                                          flash_fraction)


# --- The planner told what 8.4's recipe runs (``recipes.four_d.train_4d``) ------------------------

STATE_KINDS = ("parameters", "gradients", "optimizer states")
# What a rank holds that 8.4's hooks do not count: FSDP's gathered weights (model states in transit),
# and the layer full recomputation rebuilds in the backward (saved under the checkpoint's own hooks)
LEFT_OUT = ("gathered layers", "recomputed layer", "reserved")


def run_model(ranks: list[dict]) -> planner.Model:
    """The run's GPT as the planner reads a model: float32, SGD with momentum, LayerNorm statistics."""
    c = ranks[0]["config"]
    return planner.Model(layers=c["layers"], hidden=c["hidden"], heads=c["heads"], seq=c["seq"], vocab=c["vocab"],
                         tied_embeddings=c["tied"], value_bytes=4, optimizer="sgd-momentum", mixed=False,
                         norm_stats=True)


def run_layout(ranks: list[dict]) -> planner.Layout:
    """The run's layout: FSDP2 shards every state (ZeRO-3's states, whether or not it reshards after the
    forward), torch's sequence parallelism keeps gathered inputs whole, the CPU's flash kernel."""
    r0, lay = ranks[0], ranks[0]["layout"]
    return planner.Layout(lay["dp"], lay["tp"], lay["pp"], zero=3, recompute=r0.get("recompute", "none"),
                          micro_batch=r0["batch"] // r0["micro_batches"], sp=lay["tp"] > 1, flash=True,
                          overlap=False, whole_inputs=True)


def run_tokens(ranks: list[dict]) -> int:
    r0 = ranks[0]
    return r0["batch"] * r0["layout"]["dp"] * r0["config"]["seq"]


def held_out(ranks: list[dict], cluster: planner.Cluster) -> list[dict]:
    """Per pipeline stage, what one rank held for the model, measured by 8.4's hooks and predicted by
    the planner for the same layout: states, activations and their sum, and the relative errors.

    ``kept_whole``: the states of the parameters tensor parallelism keeps whole on every rank (the
    LayerNorms, the row-split biases), less the 1/tp of them the planner, dividing every parameter by
    tp, counts; what the planner's states should miss exactly."""
    model, c, lay = run_model(ranks), ranks[0]["config"], ranks[0]["layout"]
    predicted = planner.stage_memory(model, cluster, run_layout(ranks), run_tokens(ranks))
    out = []
    for row, mem in zip(four_d.stage_rows(ranks), predicted):
        kept = four_d_theory.stage_params(c["layers"], c["hidden"], c["vocab"], c["seq"], lay["pp"], row["stage"])[1]
        whole_states = sum(model_state_bytes(kept, model.optimizer, model.state_precision).values())
        kept_whole = whole_states * (lay["tp"] - 1) / lay["tp"] / lay["dp"]
        states = sum(mem.get(k, 0.0) for k in STATE_KINDS)
        acts = sum(v for k, v in mem.items() if k not in STATE_KINDS + LEFT_OUT)
        m_states, m_acts = sum(row["states"].values()), row["activations"]
        out.append({"stage": row["stage"], "states": m_states, "states_planner": states, "activations": m_acts,
                    "activations_planner": acts, "left_out": sum(mem.get(k, 0.0) for k in LEFT_OUT),
                    "kept_whole": kept_whole,
                    "error_states": states / m_states - 1, "error_activations": acts / m_acts - 1,
                    "error": (states + acts) / (m_states + m_acts) - 1})
    return out


def held_out_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """``held_out`` as table cells (kB = 1000 bytes)."""
    header = ["stage", "states kB: measured", "planner", "activations kB: measured", "planner", "total error"]
    return header, [[r["stage"], f"{r['states'] / 1e3:.1f}", f"{r['states_planner'] / 1e3:.1f}",
                     f"{r['activations'] / 1e3:.1f}", f"{r['activations_planner'] / 1e3:.1f}", f"{r['error']:+.2%}"]
                    for r in rows]


def predicted_step(ranks: list[dict], cluster: planner.Cluster) -> planner.Priced:
    """The planner's price of the run's own layout on ``cluster``."""
    return planner.price(run_model(ranks), cluster, run_layout(ranks), run_tokens(ranks))


def for_panel(cluster_for) -> Callable[[list[dict]], dict]:
    """The launch panel's planner: a finished run's fullest stage (what the hooks count) and step, on
    ``cluster_for(nprocs)``."""
    def predict(ranks: list[dict]) -> dict:
        cluster = cluster_for(len(ranks))
        rows = held_out(ranks, cluster)
        return {"memory_bytes": max(r["states_planner"] + r["activations_planner"] for r in rows),
                "step_s": predicted_step(ranks, cluster).step_s}
    return predict

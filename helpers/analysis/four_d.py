"""4D runs (chapter 8.4) -> the numbers the chapter states: the gap to single-process training, the
bytes each mesh dimension carried against ``theory.four_d``, and what each rank held."""
from __future__ import annotations

from collections import Counter

from ..training import median

import numpy as np

from ..theory import four_d as formulas

# float32 training compared with float32 training that summed in another order: torch.testing's
# defaults for float32 (atol 1e-5, rtol 1.3e-6), a few hundred roundings of weights near 0.02-1.
ATOL, RTOL = 1e-5, 1.3e-6


def _layout(ranks: list[dict]) -> dict:
    return ranks[0]["layout"]


def global_losses(ranks: list[dict]) -> list[float]:
    """Each step's loss on the global batch: the mean of the replicas' (equal-sized) batches', read on
    each replica's last stage (its tp ranks hold the same whole logits, and the same loss)."""
    last = _layout(ranks)["pp"] - 1
    by_replica = {r["dp_rank"]: r["losses"] for r in ranks if r["pp_rank"] == last and r["tp_rank"] == 0}
    return [float(v) for v in np.mean([by_replica[k] for k in sorted(by_replica)], axis=0)]


def gathered_weights(ranks: list[dict]) -> dict:
    """The whole model's final weights, put together from each stage's (its first replica's)."""
    out = {}
    for r in ranks:
        if r["weights"]:
            out |= r["weights"]
    return out


def equality(ranks: list[dict]) -> dict:
    """How far the 4D run is from the single-process reference: its losses, its weights (every one
    of the reference's, none missing), and how far training moved the weights, for scale."""
    ref = ranks[0]["reference"]
    weights = gathered_weights(ranks)
    if weights.keys() != ref["weights"].keys():
        raise ValueError(f"the stages' parameters {sorted(weights)} are not the model's {sorted(ref['weights'])}")
    losses = global_losses(ranks)
    loss_gap = max(abs(a - b) for a, b in zip(losses, ref["losses"]))
    gaps = {k: float((weights[k] - w).abs().max()) for k, w in ref["weights"].items()}
    excess = max(float(((weights[k] - w).abs() - (ATOL + RTOL * w.abs())).max()) for k, w in ref["weights"].items())
    return {"losses": losses, "reference_losses": ref["losses"], "loss_gap": loss_gap,
            "weight_gap": max(gaps.values()), "worst_weight": max(gaps, key=gaps.get),
            "within_tolerance": excess <= 0 and loss_gap <= ATOL + RTOL * max(ref["losses"]),
            "n_tensors": len(gaps)}


def messages(calls: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """``MeshTraffic.calls`` -> {dim: {kind: summed message bytes}}."""
    out: dict[str, Counter] = {}
    for dim, kind, nbytes in calls:
        out.setdefault(dim, Counter())[kind] += nbytes
    return {d: dict(c) for d, c in out.items()}


def _cfg(ranks: list[dict]) -> dict:
    c = ranks[0]["config"]
    return {k: c[k] for k in ("layers", "hidden", "vocab", "seq")}


def model_dims(ranks: list[dict]) -> dict:
    """The GPT's sizes the bytes' and states' formulas take: layers, hidden, vocab and seq."""
    return _cfg(ranks)


def settings(ranks: list[dict]) -> dict:
    """The run's ZeRO stage and recomputation (runs recorded before they were options: 2 and none)."""
    return {"zero": ranks[0].get("zero", 2), "recompute": ranks[0].get("recompute", "none")}


def stage_rows(ranks: list[dict]) -> list[dict]:
    """One row per pipeline stage: the messages and bytes sent per step on each dimension (on the run's
    backend), what each of its ranks wrote to its sockets in that step (None where not counted), the
    model states held, measured and by formula. The ranks of one stage must agree (the splits are even)."""
    lay, cfg, run = _layout(ranks), _cfg(ranks), settings(ranks)
    r0 = ranks[0]
    b = r0["batch"] // r0["micro_batches"]
    rows = []
    for stage in range(lay["pp"]):
        mine = [r for r in ranks if r["pp_rank"] == stage]
        measured = messages(mine[0]["calls"])
        if any(messages(r["calls"]) != measured or r["states"] != mine[0]["states"] for r in mine):
            raise ValueError(f"the ranks of stage {stage} sent or held different amounts")
        predicted = formulas.step_messages(**cfg, **lay, stage=stage, micro_batch=b,
                                           micro_batches=r0["micro_batches"], **run)
        rows.append({"stage": stage, "ranks": sorted(r["rank"] for r in mine),
                     "messages": measured, "messages_formula": predicted,
                     "sent": formulas.sent_bytes(measured, lay["dp"], lay["tp"], r0["backend"]),
                     "sent_formula": formulas.sent_bytes(predicted, lay["dp"], lay["tp"], r0["backend"]),
                     "wire": [r["wire_bytes"] for r in mine],
                     "states": mine[0]["states"],
                     "states_formula": formulas.rank_state_bytes(**cfg, **lay, stage=stage),
                     "activations": max(r["peak_saved"] for r in mine),
                     "activations_formula": formulas.activation_bytes(
                         **cfg, heads=r0["config"]["heads"], **lay, stage=stage, micro_batch=b,
                         micro_batches=r0["micro_batches"], recompute=run["recompute"]),
                     "in_flight": formulas.in_flight(lay["pp"], r0["micro_batches"], stage)})
    return rows


def step_seconds(ranks: list[dict]) -> dict:
    """The step's seconds: the slowest rank's median over the steps between the first (which also
    infers the stages' shapes) and the last (whose every op was counted); and the reference's, the
    same global batches in one process, after its first step."""
    ref = ranks[0]["reference"]["seconds"]
    return {"step_s": max(median(r["seconds"][1:-1]) for r in ranks), "reference_s": median(ref[1:] or ref)}


def traffic_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The bytes table as text, one line per stage and dimension: kB = 1000 bytes."""
    header = ["stage", "dimension", "collectives (message kB)", "formula (kB)", "sent per rank (kB)", "formula"]
    body = []
    for row in rows:
        for dim in formulas.DIMS:
            kinds = row["messages"].get(dim, {})
            shown = ", ".join(f"{k} {v / 1e3:.1f}" for k, v in sorted(kinds.items()))
            formula = sum(row["messages_formula"][dim].values()) / 1e3
            body.append([str(row["stage"]), dim, shown or "none", f"{formula:.1f}",
                         f"{row['sent'].get(dim, 0) / 1e3:.1f}", f"{row['sent_formula'][dim] / 1e3:.1f}"])
    return header, body


def memory_cells(rows: list[dict], activation_formula: list[float]) -> tuple[list[str], list[list[str]]]:
    """What one rank of each stage held, beside the formulas: kB = 1000 bytes."""
    header = ["stage", "states held (kB)", "formula", "activations, peak (kB)", "formula", "micro-batches in flight"]
    return header, [[str(r["stage"]), f"{sum(r['states'].values()) / 1e3:.1f}",
                     f"{sum(r['states_formula'].values()) / 1e3:.1f}", f"{r['activations'] / 1e3:.1f}",
                     f"{a / 1e3:.1f}", str(r["in_flight"])] for r, a in zip(rows, activation_formula)]


def cp_verdict(probe: list[dict]) -> dict:
    """What the context-parallel probe found, the same on every rank: composed, or each kernel's error."""
    kernels = ("default kernel", "math kernel")
    if any({k: r[k].get("error") for k in kernels} != {k: probe[0][k].get("error") for k in kernels} for r in probe):
        raise ValueError("the ranks disagree on whether context parallelism ran")
    errors = {k: probe[0][k]["error"] for k in kernels}
    return {"composed": errors["default kernel"] is None, "errors": errors,
            "max_diff": max((r[k].get("max_diff") or 0.0) for r in probe for k in kernels)}


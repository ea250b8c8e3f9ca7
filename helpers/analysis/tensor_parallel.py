"""Tensor-parallel runs (chapter 6.3) -> the numbers the chapter states: gaps to the unsplit block,
collectives by kind and phase, and the strategies' table beside ``theory``'s formulas."""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import theory


def collective_summary(calls: list[tuple[str, str, int]]) -> dict[tuple[str, str], tuple[int, int]]:
    """``CommBytes.calls`` -> {(kind, phase): (calls, summed message bytes)}."""
    counts, sizes = Counter(), Counter()
    for kind, phase, message in calls:
        counts[(kind, phase)] += 1
        sizes[(kind, phase)] += message
    return {k: (counts[k], sizes[k]) for k in counts}


def max_gap(run: dict, whole: dict) -> dict[str, float]:
    """Largest absolute difference from the unsplit block: in the output, the input's gradient,
    and any parameter's gradient (the keys must be the same)."""
    if run["grads"].keys() != whole["grads"].keys():
        raise ValueError(f"parameters differ: {sorted(run['grads'])} vs {sorted(whole['grads'])}")
    grads = max(float((run["grads"][k] - whole["grads"][k]).abs().max()) for k in whole["grads"])
    return {"out": float((run["out"] - whole["out"]).abs().max()),
            "x_grad": float((run["x_grad"] - whole["x_grad"]).abs().max()), "grads": grads}


def global_losses(ranks: list[dict], strategy: str) -> list[float]:
    """Each step's loss on the whole global batch: the mean of the replicas' (equal-sized) batches'."""
    by_replica = {r["layouts"][strategy]["replica"]: r["layouts"][strategy]["losses"] for r in ranks}
    return [float(v) for v in np.mean([by_replica[k] for k in sorted(by_replica)], axis=0)]


def weight_gap(ranks: list[dict], strategy: str) -> float:
    """Largest absolute difference, over ranks and parameters, from the unsplit model's final weights."""
    ref = ranks[0]["reference"]["weights"]
    return max(float((r["layouts"][strategy]["weights"][k] - ref[k]).abs().max()) for r in ranks for k in ref)


def weight_movement(ranks: list[dict]) -> float:
    """How far training moved the unsplit model's weights: the scale a weight gap is set against."""
    ref = ranks[0]["reference"]
    return max(float((ref["weights"][k] - ref["initial"][k]).abs().max()) for k in ref["weights"])


def strategy_rows(ranks: list[dict]) -> list[dict]:
    """One row per strategy: what rank 0 held and sent in the last step, measured and predicted.

    Every rank's measurement must be the same (the splits are even): raises if not.
    """
    r0 = ranks[0]
    batch, seq, hidden = r0["shape"]
    rows = []
    for name, lay in r0["layouts"].items():
        if any(r["layouts"][name]["states"] != lay["states"] or
               collective_summary(r["layouts"][name]["calls"]) != collective_summary(lay["calls"]) for r in ranks):
            raise ValueError(f"{name}: the ranks held or sent different amounts")
        dp, tp = lay["dp"], lay["tp"]
        measured = collective_summary(lay["calls"])
        predicted = theory.step_collectives(name, r0["n_split"], r0["n_kept"], dp, tp, r0["layers"],
                                            batch, seq, hidden)
        rows.append({"strategy": name, "dp": dp, "tp": tp, "states_by_kind": lay["states"],
                     "states": sum(lay["states"].values()),
                     "states_formula": sum(theory.state_bytes(name, r0["n_split"], r0["n_kept"], dp, tp).values()),
                     "collectives": measured, "collectives_formula": predicted,
                     "calls": sum(c for c, _ in measured.values()),
                     "sent": theory.sent_bytes(measured, name, dp, tp),
                     "sent_by_phase": {ph: theory.sent_bytes({k: v for k, v in measured.items() if k[1] == ph},
                                                             name, dp, tp) for ph in ("forward", "backward")},
                     "sent_formula": theory.sent_bytes(predicted, name, dp, tp)})
    return rows


def table_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The strategies' table as text: header and rows, kB = 1000 bytes."""
    header = ["strategy", "dp x tp", "states held (kB)", "formula", "collectives per step",
              "sent per step (kB)", "formula"]
    cells = [[r["strategy"], f"{r['dp']} x {r['tp']}", f"{r['states'] / 1e3:.1f}", f"{r['states_formula'] / 1e3:.1f}",
              str(r["calls"]), f"{r['sent'] / 1e3:.1f}", f"{r['sent_formula'] / 1e3:.1f}"] for r in rows]
    return header, cells

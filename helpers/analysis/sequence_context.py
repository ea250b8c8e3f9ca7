"""Sequence- and context-parallel runs (chapter 8.2) -> the numbers the chapter states: each
version's gap to the unsplit GPT or to full attention, its collectives and activation bytes
beside ``theory``'s, and each rank's causal work under the naive and zig-zag splits."""
from __future__ import annotations

from .. import theory
from .tensor_parallel import collective_summary

BY_HAND = {"TP": ("tp", "whole"), "SP": ("sp", "whole"), "SP, shard kept": ("sp", "shard")}
# helpers.gpt's GPT as the chapter runs it: float32, no dropout, the CPU's flash attention, and the
# LayerNorms' statistics, which Korthikanti's count leaves out (theory.transformer.activation_terms).
GPT_ACTIVATIONS = {"bytes_per_value": 4, "dropout": False, "attention": "flash", "norm_stats": True}


def sp_gaps(rank_result: dict) -> dict[str, dict[str, float]]:
    """Each version's largest absolute difference from the unsplit GPT: logits, loss, gradients."""
    runs = rank_result["runs"]
    whole = runs["whole"]
    out = {}
    for name, run in runs.items():
        if run["grads"].keys() != whole["grads"].keys():
            raise ValueError(f"{name}: parameters differ from the unsplit GPT's")
        out[name] = {"logits": float((run["logits"] - whole["logits"]).abs().max()),
                     "loss": abs(run["loss"] - whole["loss"]),
                     "grads": max(float((run["grads"][k] - whole["grads"][k]).abs().max()) for k in whole["grads"])}
    return out


def predicted_collectives(rank_result: dict, name: str) -> dict[tuple[str, str], tuple[int, int]]:
    """``theory``'s collectives for one version of the GPT's step (the loss's own left out)."""
    cfg, b, layers = rank_result["config"], rank_result["batch"], rank_result["config"]["layers"]
    blocks, s, h = theory.tensor_parallel.BLOCKS_PER_LAYER * layers, cfg["seq"], cfg["hidden"]
    if name == "whole":
        return {}
    if name == "TP":  # the first block's input comes from the embeddings: its gradient is wanted
        fwd, bwd = theory.megatron_allreduces(blocks, first_input_needs_grad=True)
        m = theory.tp_message_bytes(b, s, h)
        return {("all_reduce", "forward"): (fwd, fwd * m), ("all_reduce", "backward"): (bwd, bwd * m)}
    if name == "SP, DTensor":
        return theory.sp_plan_collectives(layers, b, s, h)
    return theory.sp_collectives(blocks, b, s, h, keep=BY_HAND[name][1])


def sent(collectives: dict[tuple[str, str], tuple[int, int]], t: int) -> float:
    """Bytes one rank sends in those collectives over a ring of t (``theory.BUS_FACTOR``)."""
    return sum(theory.BUS_FACTOR[kind](t) * message for (kind, _), (_, message) in collectives.items())


def sp_collective_rows(rank_result: dict) -> list[dict]:
    """One row per version: its collectives measured and predicted, and the bytes a rank sent."""
    t = rank_result["t"]
    rows = []
    for name, run in rank_result["runs"].items():
        measured, predicted = collective_summary(run["calls"]), predicted_collectives(rank_result, name)
        rows.append({"name": name, "measured": measured, "predicted": predicted, "sent": sent(measured, t),
                     "sent_formula": sent(predicted, t), "sync": (len(run["sync"]), sum(m for *_, m in run["sync"])),
                     "calls": sum(c for c, _ in measured.values())})
    return rows


def layer_formula(name: str, shape, batch: int, t: int) -> float:
    """Korthikanti's count of one layer's saved bytes on one rank for each version: Eq. 1 (whole),
    Eq. 2 (TP), Eq. 4 (SP keeping its shard), and SP keeping the gathered inputs."""
    if name == "whole":
        return theory.transformer.activation_bytes(shape, batch, **GPT_ACTIVATIONS)
    if name == "TP":
        return theory.transformer.activation_bytes(shape, batch, tp=t, **GPT_ACTIVATIONS)
    keep = "shard" if name == "SP, shard kept" else "whole"
    return theory.sp_activation_bytes(shape, batch, t, keep, **GPT_ACTIVATIONS)


def activation_rows(rank_result: dict) -> list[dict]:
    """Bytes the GPT's L layers kept for backward on one rank, each way, beside L times
    ``layer_formula``."""
    cfg, t = rank_result["config"], rank_result["t"]
    shape = theory.transformer.Shape(cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq"], cfg["vocab"], cfg["tied"])
    return [{"name": name, "measured": measured,
             "formula": cfg["layers"] * layer_formula(name, shape, rank_result["batch"], t)}
            for name, measured in rank_result["activations"].items()]


def cp_rows(ranks: list[dict]) -> list[dict]:
    """One row per rank and layout: its errors against full attention, the score elements it
    computed (forward) and needed, and the bytes it sent, each beside ``theory``'s."""
    rows = []
    for r in ranks:
        b, a, s, d = r["shape"]
        ring = theory.ring_bytes(b, s, a, d, r["n"])
        for layout, got in r["layouts"].items():
            work = theory.causal_work(layout, r["rank"], r["n"], s)
            rows.append({"rank": r["rank"], "n": r["n"], "layout": layout, "error": max(got["errors"].values()),
                         "errors": got["errors"], "computed": got["computed"], "computed_backward": got["computed_backward"],
                         "computed_formula": work["computed"], "needed_formula": work["needed"],
                         "sent": got["sent"], "sent_formula": ring})
    return rows


def balance(rows: list[dict], layout: str) -> float:
    """The busiest rank's measured work over the mean rank's, for one layout of one run."""
    work = [row["computed"] for row in rows if row["layout"] == layout]
    if not work:
        raise ValueError(f"no rank ran the {layout!r} layout")
    return max(work) * len(work) / sum(work)


def sp_table_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """``sp_collective_rows`` as text: each version's collectives by phase, and its bytes, kB = 1000."""
    def calls(c, phase):
        return ", ".join(f"{n} {kind}" for (kind, ph), (n, _) in sorted(c.items()) if ph == phase) or "-"
    header = ["version", "forward", "backward", "sent by one rank (kB)", "formula (kB)"]
    return header, [[r["name"], calls(r["measured"], "forward"), calls(r["measured"], "backward"),
                     f"{r['sent'] / 1e3:.1f}", f"{r['sent_formula'] / 1e3:.1f}"] for r in rows]

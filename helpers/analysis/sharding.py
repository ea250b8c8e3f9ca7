"""Chapter 6.2's results reduced: each variant's bytes per rank and per step beside ``theory.sharding``.

The ranks' results come from ``recipes.sharding`` (``compare``, ``collectives``) and
``recipes.fsdp`` (``reshard``, ``checkpointing``).
"""
from __future__ import annotations

from ..theory.communication import fit_alpha_beta, ring_from_fit
from ..theory.sharding import bytes_sent, collective_time, sharded_state_bytes

STAGE_OF = {"DDP": "DDP", "ZeRO-1": "ZeRO-1", "ZeRO-2": "ZeRO-2", "ZeRO-3": "ZeRO-3", "FSDP2": "ZeRO-3"}
STATE_KINDS = ("parameters", "gradients", "optimizer states")


def memory_table(result: dict) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> kind -> {"measured", "formula"}: one rank's bytes after the last backward (Adam)."""
    out = {}
    for variant, run in result["runs"].items():
        formula = sharded_state_bytes(result["n_params"], result["p"], STAGE_OF[variant], "adam",
                                      n_tensors=result["n_tensors"])
        out[variant] = {k: {"measured": float(run["held"][k]), "formula": float(formula[k])} for k in STATE_KINDS}
    return out


def worst_relative_error(table: dict) -> float:
    """The largest |measured - formula| / formula over every variant and kind of ``memory_table``."""
    return max(abs(c["measured"] - c["formula"]) / c["formula"] for kinds in table.values() for c in kinds.values())


def memory_layouts(table: dict) -> dict[str, dict[str, float]]:
    """``memory_table`` in the shape ``plots.memory_bars`` draws: per variant, its formula's bar
    and its measured bar."""
    return {f"{v}, {which}": {k: c[which] for k, c in kinds.items()}
            for v, kinds in table.items() for which in ("formula", "measured")}


def traffic(calls: list, p: int) -> dict[str, float]:
    """One rank's step, from its collectives' (op, message bytes): the bytes the ring algorithms send
    (``textbook``), what gloo's send (``gloo``), and the message bytes by collective."""
    by_op: dict[str, float] = {}
    for op, m in calls:
        by_op[op] = by_op.get(op, 0.0) + m
    return {"textbook": float(sum(bytes_sent(op, m, p) for op, m in calls)),
            "gloo": float(sum(bytes_sent(op, m, p, "gloo") for op, m in calls)), "messages": by_op,
            "calls": len(calls)}


def traffic_table(result: dict) -> dict[str, dict]:
    """variant -> its last step's ``traffic``, in units of the model's parameter bytes, with the
    bytes this rank wrote to its sockets beside them (``wire``: None where they do not show what
    was sent, as under NCCL or off Linux; ``recipes.traffic.counts_sockets``)."""
    unit, out = result["param_bytes"], {}
    for variant, run in result["runs"].items():
        t = traffic(run["calls"], result["p"])
        out[variant] = {"textbook": t["textbook"] / unit, "gloo": t["gloo"] / unit, "calls": t["calls"],
                        "messages": {op: m / unit for op, m in t["messages"].items()},
                        "wire": None if run["wire_bytes"] is None else run["wire_bytes"] / unit}
    return out


def collective_factors(rows: list[dict], p: int) -> dict[str, dict[str, float]]:
    """op -> bytes sent per message byte: measured on the wire (the largest message, where headers
    weigh least), the ring algorithm's, and gloo's."""
    out = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        big = max((r for r in rows if r["op"] == op), key=lambda r: r["bytes"])
        out[op] = {"wire": None if big["wire_bytes"] is None else big["wire_bytes"] / big["bytes"],
                   "textbook": float(bytes_sent(op, 1.0, p)), "gloo": float(bytes_sent(op, 1.0, p, "gloo"))}
    return out


def ring_fit(rows: list[dict], p: int) -> tuple[float, float]:
    """(step_latency, seconds_per_byte) of the ring model, fitted to the all_reduce timings."""
    ar = [r for r in rows if r["op"] == "all_reduce"]
    fit = fit_alpha_beta([r["bytes"] for r in ar], [r["seconds"] for r in ar])
    return ring_from_fit(fit, p)


def weight_differences(result: dict) -> dict[str, float]:
    """variant -> the largest |weight - DDP's weight| after training."""
    base = result["runs"]["DDP"]["params"]
    return {v: float((run["params"] - base).abs().max()) for v, run in result["runs"].items()}


def reshard_rows(result: dict) -> list[dict]:
    """FSDP2 with ``reshard_after_forward`` on and off (``recipes.fsdp.reshard``): per setting, the
    states one rank holds, the parameters left whole between forward and backward, and the last
    step's all-gathered and sent bytes, the latter two in units of the model's parameter bytes."""
    unit, rows = 4 * result["n_params"], []
    for name in ("on", "off"):
        run = result[name]
        t = traffic(run["calls"], result["p"])
        rows.append({"reshard_after_forward": name, "states": sum(run["states"].values()),
                     "between": run["between_bytes"], "gathered": t["messages"].get("all_gather", 0.0) / unit,
                     "gloo": t["gloo"] / unit,
                     "wire": None if run["wire_bytes"] is None else run["wire_bytes"] / unit,
                     "calls": t["calls"], "step_s": run["step_s"]})
    return rows


def predicted_comm_seconds(calls: list, p: int, step_latency: float, seconds_per_byte: float,
                           backend: str = "gloo") -> float:
    """The ring model's seconds for a step's collectives, call by call (``theory.collective_time``)."""
    return float(sum(collective_time(op, m, p, step_latency, seconds_per_byte, backend) for op, m in calls))


def time_rows(result: dict, step_latency: float, seconds_per_byte: float) -> list[dict]:
    """Per variant of ``compare``: its measured step, and what the ring model fitted on this machine
    gives its collectives, over gloo and, with the same link, over ring algorithms (NCCL's)."""
    p, rows = result["p"], []
    for variant, run in result["runs"].items():
        rows.append({"variant": variant, "step_s": run["step_s"], "calls": len(run["calls"]),
                     "gloo_s": predicted_comm_seconds(run["calls"], p, step_latency, seconds_per_byte, "gloo"),
                     "ring_s": predicted_comm_seconds(run["calls"], p, step_latency, seconds_per_byte, "nccl")})
    return rows

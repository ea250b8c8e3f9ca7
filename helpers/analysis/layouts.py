"""Layouts tried for real (chapter 8.5's launch panel): one finished ``train_4d`` run as one record, its
measured memory, bytes and step time beside the formulas' and the planner's for the same layout.

Shared by the panel (``helpers.widgets.run_panel``), the chapter and its tests, so that a record means
the same wherever it is made. Memory is what a rank holds for the model (its states and the most
activations autograd kept, as 8.4 counts them), on its fullest stage; bytes are what one rank sends
per step on every dimension together, on its busiest stage.
"""
from __future__ import annotations

import html
from typing import Callable

from . import four_d

KB = 1e3


def layout_of(ranks: list[dict]) -> dict:
    """The settings a run was launched with, as the panel names them."""
    r0 = ranks[0]
    return {"nprocs": len(ranks), **r0["layout"], **four_d.settings(ranks),
            "micro_batches": r0["micro_batches"], "seq": r0["config"]["seq"]}


def label(layout: dict) -> str:
    """A layout in one short line: the mesh, then its settings."""
    return (f"dp {layout['dp']} × tp {layout['tp']} × pp {layout['pp']}, ZeRO-{layout['zero']}, "
            f"recompute {layout['recompute']}, m {layout['micro_batches']}, seq {layout['seq']}")


def record(ranks: list[dict], planner: Callable[[list[dict]], dict]) -> dict:
    """One run, measured and predicted. ``planner(ranks)`` gives the planner's ``memory_bytes`` (per
    rank, fullest stage, what the hooks count) and ``step_s`` for the run's own layout."""
    rows = four_d.stage_rows(ranks)
    held = [sum(r["states"].values()) + r["activations"] for r in rows]
    held_formula = [sum(r["states_formula"].values()) + r["activations_formula"] for r in rows]
    sent = [sum(r["sent"].values()) for r in rows]
    sent_formula = [sum(r["sent_formula"].values()) for r in rows]
    eq = four_d.equality(ranks)
    predicted = planner(ranks)
    return {"layout": layout_of(ranks), "memory_bytes": max(held), "memory_formula": max(held_formula),
            "memory_planner": predicted["memory_bytes"], "sent_bytes": max(sent),
            "sent_formula": max(sent_formula), "step_s": four_d.step_seconds(ranks)["step_s"],
            "step_planner": predicted["step_s"], "same_training": eq["within_tolerance"],
            "loss_gap": eq["loss_gap"]}


HEADER = ["#", "layout", "memory kB: measured", "formula", "planner", "sent kB: measured", "formula",
          "step s: measured", "planner", "same training"]
CAPTION = ("memory: what one rank holds for the model (states and the most activations), on its fullest stage; "
           "sent: what one rank sends a step, all dimensions, on its busiest stage; step: the slowest rank's "
           "median; same training: losses and weights equal one process's (largest loss gap)")


def cells(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The records as a table, one line a run (kB = 1000 bytes)."""
    return HEADER, [[str(i), html.escape(label(r["layout"])), f"{r['memory_bytes'] / KB:.1f}",
                     f"{r['memory_formula'] / KB:.1f}", f"{r['memory_planner'] / KB:.1f}",
                     f"{r['sent_bytes'] / KB:.1f}", f"{r['sent_formula'] / KB:.1f}", f"{r['step_s']:.3f}",
                     f"{r['step_planner']:.3f}",
                     f"yes ({r['loss_gap']:.0e})" if r["same_training"] else "NO"]
                    for i, r in enumerate(records, 1)]


def table_html(records: list[dict]) -> str:
    """``cells`` as HTML, under its caption (the panel's and the static page's)."""
    from ..book import html_table
    return f"<p><small>{html.escape(CAPTION)}</small></p>" + html_table(*cells(records)).data

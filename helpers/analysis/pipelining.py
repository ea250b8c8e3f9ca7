"""The library's pipeline schedules (chapter 6.1): idle fractions per step, activations in flight,
and the gradients of every schedule against the unsplit model's."""
from __future__ import annotations

from ..theory.pipeline import replay_idle
from ..training import median
from .runs import max_abs_diff
from .timelines import utilization, window


def step_idle(ranks: list[dict], key) -> list[float]:
    """Each rank's idle fraction of a step of run ``key`` (schedule, m), the median over the steps.

    A step's window runs from its first span on any rank to its last (chapter 3.2's ``window``);
    the ranks wait in a barrier between steps, so no step's window holds another's spans.
    Medians, because a step that another job on the machine slowed says little about the schedule.
    """
    n = len(ranks[0]["runs"][key]["steps"])
    per_step = [utilization([r["runs"][key]["steps"][k] for r in ranks]) for k in range(n)]
    return [1.0 - median(u[rank] for u in per_step) for rank in range(len(ranks))]


def step_seconds(ranks: list[dict], key) -> float:
    """Median wall time of a step of run ``key``, first span to last over all ranks."""
    n = len(ranks[0]["runs"][key]["steps"])
    return median(window([r["runs"][key]["steps"][k] for r in ranks])[1]
                  - window([r["runs"][key]["steps"][k] for r in ranks])[0] for k in range(n))


def summarize_pipelines(ranks: list[dict]) -> dict:
    """Per (schedule, m) of ``pipelining.schedule_timelines``: each rank's idle fraction, the least
    of them (the busiest rank, which sets the pace), the step time, and per rank the most
    micro-batches in flight and the peak of live saved bytes in micro-batches' worth; and the
    busiest rank's idle fraction in slots of the schedule's own order (``slot_idle``)."""
    out = {}
    for key in ranks[0]["runs"]:
        idle = step_idle(ranks, key)
        runs = [r["runs"][key] for r in ranks]
        out[key] = {"idle": idle, "busiest_idle": min(idle), "mean_idle": sum(idle) / len(idle),
                    "step_s": step_seconds(ranks, key), "slot_idle": min(slot_idle(ranks, key)),
                    "in_flight": [run["in_flight"] for run in runs],
                    "saved_in_micro_batches": [run["peak_saved"] / run["micro_batch_saved"] for run in runs]}
    return out


def slot_idle(ranks: list[dict], key) -> list[float]:
    """Each rank's idle fraction of run ``key`` in slots: its first measured step's actions, in the
    order the rank ran them, replayed on equal devices (``theory.replay_idle``). The order is the
    schedule's own; only the times were the machine's, so this is what the schedule alone costs."""
    runs = [r["runs"][key] for r in ranks]
    chunks = {s: n for run in runs for s, n in run["chunks"].items()}
    orders = [[(kind, tag) for kind, tag, _, _ in sorted(run["steps"][0], key=lambda s: s[2])] for run in runs]
    return replay_idle(orders, [chunks[s] for s in range(len(chunks))])


def timed_replay(ranks: list[dict], key) -> list[list[tuple[float, float]]]:
    """Per step of run ``key``, per rank: (its measured idle fraction, the idle fraction of its own
    order replayed with its own measured spans' lengths and free messages, ``theory.replay_idle``).

    The replay is the least idle that the schedule's orders and this run's uneven stages allow:
    the run met the same order and the same dependencies, plus its messages and its Python. So the
    first number is never below the second, whatever the machine did; a rank below it would mean
    spans tagged with the wrong action, or clocks that the ranks do not share.
    """
    runs = [r["runs"][key] for r in ranks]
    chunks = {s: n for run in runs for s, n in run["chunks"].items()}
    out = []
    for k in range(len(runs[0]["steps"])):
        spans = [sorted(run["steps"][k], key=lambda s: s[2]) for run in runs]
        measured = [1.0 - u for u in utilization(spans)]
        replayed = replay_idle([[(kind, tag) for kind, tag, _, _ in sp] for sp in spans],
                               [chunks[s] for s in range(len(chunks))],
                               [[t1 - t0 for _, _, t0, t1 in sp] for sp in spans])
        out.append(list(zip(measured, replayed)))
    return out


def schedule_grad_diffs(ranks: list[dict]) -> dict[str, float]:
    """Per run of ``pipelining.compare_gradients``: the largest gradient difference from the
    unsplit model, over every parameter (each computed by exactly one rank; asserted)."""
    unsplit = ranks[0]["unsplit"]
    out = {}
    for name in ranks[0]["runs"]:
        merged: dict = {}
        for r in ranks:
            if merged.keys() & r["runs"][name].keys():
                raise AssertionError(f"{name}: two ranks computed the same parameter's gradient")
            merged.update(r["runs"][name])
        if merged.keys() != unsplit.keys():
            raise AssertionError(f"{name}: gradients of {sorted(unsplit.keys() - merged.keys())} missing")
        out[name] = max_abs_diff(merged, unsplit)
    return out


def spans_of(ranks: list[dict], key, step: int = 0) -> list[list[tuple]]:
    """One step of run ``key``, as each rank's spans: what ``plots.schedule_gantt`` draws."""
    return [r["runs"][key]["steps"][step] for r in ranks]

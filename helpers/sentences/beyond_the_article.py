"""Chapters 6.x and 7.x: parallelism past the article, and when things break."""
from __future__ import annotations

from .. import plans
from ..machine import Machine, loopback_interface
from .common import _runs, _ran_on_gpus, _loopback_nodes, _untimed


def tensor_parallel(m: Machine) -> dict[str, str]:
    """6.3: the blocks on 2 ranks; the strategies and the 2 x 2 layout on 4, which may share the cores."""
    note = _untimed(m, 4, "chapter", "counts bytes and checks results")
    return {"tp_four_ranks": note, **_runs(m, "06_3_tensor_parallel")}


def pipeline_schedules(m: Machine) -> dict[str, str]:
    """6.1 times schedules at p = 2 and 4: where 4 ranks share the cores, only p = 2's timings count."""
    four = plans.job(m, 4)
    if four.shared:
        note = (f"Here p = 4 ran as {four.describe()}: they took turns, so its seconds are not what 4 "
                "devices would give, and at p = 4 only what no timing changes is asserted: its idle "
                "slots and its counts of activations.")
    else:
        note = (f"Here p = 4 ran as {four.describe()}, so its seconds are a pipeline's own; still, as "
                "on any machine, at p = 4 only its idle slots and its counts of activations are asserted.")
    return {"p4_note": note, **_runs(m, "06_1_pipeline_schedules")}


def sharding(m: Machine) -> dict[str, str]:
    """6.2: the training runs use the launch's backend; the collectives probe always runs over gloo;
    only Linux counts the bytes a process writes to its sockets."""
    if m.system != "Linux":
        system = {"Darwin": "macOS"}.get(m.system, m.system)
        wire = (f"{system} does not count the bytes a process writes (Linux's /proc/self/io), so "
                "here no bytes were measured on the sockets: the table has the collectives' own counts")
    elif _ran_on_gpus(m, 2):
        wire = ("Here the training ran over NCCL, whose GPU traffic the sockets do not see, so the "
                "bytes measured on the sockets come from the probe below, which ran over gloo")
    else:
        wire = "Here the training ran over gloo too, so its sockets show what gloo sent in each step"
    return {"sh_wire_where": wire, "sh_budget": f"{plans.MEMORY_PER_RANK >> 20} MB",
            **_runs(m, "06_2_sharding")}


def sharding_probe(m: Machine, rs_wire: float | None, rs_ring: float) -> str:
    """6.2: what the gloo probe's socket count showed of one reduce-scatter, where it could count."""
    if rs_wire is None:
        return (f"This machine ({m.system}) does not show a process's socket bytes, as Linux's /proc "
                f"does, so the probe counted none here; a ring's reduce-scatter sends {rs_ring:.2f} M, "
                f"and gloo's, an all-reduce, twice that on Linux.")
    return (f"The probe, always on gloo, confirms it for each collective alone. A reduce-scatter of M bytes "
            f"made each rank send {rs_wire:.3f} M, where a ring sends {rs_ring:.2f} M: gloo's "
            f"reduce-scatter is an all-reduce (asserted over 1.9 times the ring's bytes).")


def elastic(m: Machine) -> dict[str, str]:
    """7.1: its two loopback "nodes" share this machine, so they run gloo even where GPUs are."""
    return {"el_nodes_backend": _loopback_nodes(m, "the two nodes below"), **_runs(m, "07_1_elastic")}


def elastic_trap(trials: int, lost: int, lost_s: float = 0.0) -> str:
    """7.1: what the shared store's trials did here, worded for none lost, some, or all."""
    if not 0 <= lost <= trials or trials < 1:
        raise ValueError(f"{lost} lost of {trials} trials")
    if lost == 0:
        return (f"With torch's default, the agent's store, the restarted ranks formed their group in "
                f"all {trials} trials here too: the trap did not spring this time. It is a race: the "
                "store held the dead round's keys (asserted above), and a restarted rank is caught only "
                "if it reads its peer's old address before the peer has written its new one")
    some = f"all {trials}" if lost == trials else f"{lost} of {trials}"
    return (f"With torch's default, the agent's store, the restarted ranks failed to form their group "
            f"in {some} trials, each after at most {lost_s:.0f} s: gloo could not connect to the "
            "address it read, or the ranks waited until the launch's timeout (each such failure is "
            "one of the two, asserted)")


def hangs(m: Machine) -> dict[str, str]:
    """7.2 runs over gloo everywhere (monitored_barrier is gloo's); its flight recorder is dumped on
    demand. The dump on a timeout comes from the NCCL watchdog, which only a GPU job has."""
    # The shape of pipeline_schedules' sentence, deliberately: one sentence for each case of the machine,
    # each chapter's own words
    if m.n_gpus:
        recorder = (f"This machine has {m.describe()}, but this chapter's hangs ran over gloo, so the "
                    "recorders above were dumped on demand: a job over NCCL with the variables above "
                    "has its watchdog dump them on a timeout")
    else:
        recorder = (f"This machine has {m.describe()}, so no watchdog of a GPU job dumped anything "
                    "here: the recorders above are gloo's, dumped on demand")
    return {"hg_recorder_here": recorder, **_runs(m, "07_2_hangs")}


def cluster(hostname: str, interfaces: dict[str, list[str]], netns_why_not: str) -> dict[str, str]:
    """7.3: this machine's interfaces, and whether it can make network namespaces (and why not)."""
    others = [f"{n} ({', '.join(a) or 'no IPv4 address'})" for n, a in interfaces.items()
              if n != loopback_interface()]
    where = (f"Besides loopback, this machine ({hostname}) has {', '.join(others)}: on a cluster the "
             "interface that reaches the other nodes is the one to name" if others else
             f"This machine ({hostname}) has loopback alone, so here both nodes can only meet on 127.0.0.1")
    ns = ("This machine can make network namespaces (it runs as root and a veth pair was made and "
          "removed), so the two nodes could be given addresses of their own: tests/test_cluster.py does it"
          if not netns_why_not else
          f"This machine cannot make network namespaces ({netns_why_not}), so both nodes stay on loopback")
    return {"cl_interfaces": where, "cl_namespaces": ns}

"""What each chapter says about the machine it ran on, built from the machine's facts, never typed.

A chapter's prose glues these in: ``book.glue(**sentences.for_chapter("05_4_checkpointing", here))``.
Each function reads only a ``Machine`` and the plan ``launch`` follows on it (``plans.job``), so
a unit test can read every chapter's sentences on every profile in ``plans.PROFILES``: the names
are the same on each machine, only the text changes.
"""
from __future__ import annotations

from collections.abc import Callable

from . import plans
from .machine import Machine


def _runs(m: Machine, chapter: str) -> dict[str, str]:
    return {"runs_where": plans.chapter_jobs(m, chapter)}


def _ran_on_gpus(m: Machine, nprocs: int) -> bool:
    return plans.job(m, nprocs).backend == "nccl"


def background(m: Machine) -> dict[str, str]:
    return {"machine_described": m.describe(), **_runs(m, "01_background")}


def data_parallel(m: Machine) -> dict[str, str]:
    """3.1: the bucket timeline ran with 2 ranks, on GPUs or not; nn.DataParallel ran where 2 GPUs are."""
    on_gpus = _ran_on_gpus(m, 2)
    case = "the run above is that case" if on_gpus else "that case was not measured"
    if plans.two_gpus_in_one_process(m):
        dp = (f"ran here, on {m.n_gpus} GPUs, and ended with the weights of one GPU training on the "
              "global batch (asserted)")
    else:
        dp = (f"did not run here: this machine has {m.describe()}, and nn.DataParallel needs at least "
              "2 GPUs. On a machine with 2 or more, this cell runs it and asserts its weights equal "
              "those of one GPU training on the global batch")
    clock = ("Each moment in it is a CUDA event recorded on the stream that did the work, placed on the "
             "host's clock afterwards: it shows when the GPU computed or reduced, not when the host queued "
             "the work (NCCL's calls return at once)." if on_gpus else
             "Each moment in it is the host's clock, read as the work happens: on the CPU the backward "
             "runs inside `backward()`, and an all-reduce's end is read when gloo's thread finishes it.")
    return {"tl_clock": clock, "tl_where": "unlike this run, which used NCCL" if on_gpus else "as in this run",
            "tl_gpu_case": f"This machine has {m.describe()}, so {case}", "dp_status": dp,
            **_runs(m, "03_1_data_parallel")}


def _split_why(m: Machine) -> str:
    """Why the article's two-device model ran where ``plans.split_devices`` put it."""
    if plans.split_devices(m)[1] != "cpu":
        return "as the article intends"
    return f"because this machine has {m.describe()}: the two-GPU path did not run here"


def model_parallel(m: Machine) -> dict[str, str]:
    first, second = plans.split_devices(m)
    where = f"{first} and {second}" if second != "cpu" else "the CPU for both halves"
    on_cpu = plans.cpu_stage_counts(m)
    on_gpu = [p for p in plans.MP_TIMELINE_RANKS if p not in on_cpu]
    floor = (f"Where the stages were CPU cores ({_p_list(on_cpu)}), each was also busy at least 0.5/p of "
             f"the time: a send is short next to a stage's compute there (asserted)." if on_cpu else "")
    if on_gpu:
        floor += (f" Where the stages were GPUs ({_p_list(on_gpu)}), no lower bound is asserted: a GPU "
                  f"computes a 784-wide layer in microseconds, about what a send and a synchronize cost, "
                  f"so waiting on the link is a visible share of the step.")
    clock = ("Each span starts and ends with a synchronize of the rank's GPU, so it shows when the GPU ran "
             "the stage, not when the host queued it (NCCL's send and recv return before anything moved)."
             if on_gpu else "On a CPU a stage's arithmetic runs inside the call, so each span is when it ran.")
    return {"mp_inproc_where": f"{where}, {_split_why(m)}", "mp_busy_floor": floor.strip(),
            "mp_span_clock": clock, **_runs(m, "03_2_model_parallel")}


def _p_list(ps: list[int]) -> str:
    return " and ".join(f"p = {p}" for p in ps)


def mixed_precision(m: Machine) -> dict[str, str]:
    """3.3 runs in one process on ``machine.default_device()``: the first GPU, else the CPU."""
    gpu = m.gpus[0] if m.gpus else None
    return {"gpu_case": f"It ran on this machine's GPU, a {gpu}" if gpu
            else f"It did not run on a GPU here: this machine has {m.describe()}",
            "fp16_units": "has them, so here float16 need not be slow" if m.native_fp16 else "has none"}


def cuda_peak(m: Machine, peak: dict | None) -> str:
    """3.3: the allocator's peak during one step, in MiB, where the run was on a GPU (glued after it)."""
    if not peak:
        return f"It did not run here: this machine has {m.describe()}"
    return (f"Here, on the {m.gpus[0]}, one step's peak above the model was {peak['fp32'] / 2**20:.1f} MiB "
            f"in fp32 and {peak['autocast'] / 2**20:.1f} MiB under autocast")


def amp_training(m: Machine) -> dict[str, str]:
    """5.2's DDP runs have 2 ranks: on GPUs only where there are two."""
    if _ran_on_gpus(m, 2):
        gpu_case = f"here it ran on {m.n_gpus} GPUs" if m.n_gpus == 2 else "here it ran on 2 of the GPUs"
    elif m.n_gpus == 1:
        gpu_case = ("one GPU cannot give two ranks a device each, so here they ran on the CPU "
                    "(chapter 3.3 ran float16 on this machine's GPU)")
    else:
        gpu_case = f"it did not run on GPUs here: this machine has {m.describe()}"
    return {"gpu_case": gpu_case, "amp_resume_where": "on the GPUs" if _ran_on_gpus(m, 2) else "on the CPU too",
            **_runs(m, "05_2_amp_training")}


def model_parallel_training(m: Machine) -> dict[str, str]:
    """5.3: the article's split in one process, then 2 stages in 2 ranks, then 2 x 2 in 4 ranks."""
    first, second = plans.split_devices(m)
    where = f"on {first} and {second}" if second != "cpu" else "with both halves on the CPU"
    if _ran_on_gpus(m, 4):
        note = "This machine has enough GPUs for the NCCL path, and it ran on them."
    elif _ran_on_gpus(m, 2):
        note = (f"Here the two-stage run used NCCL, but this machine has {m.describe()}, "
                "too few for 4 ranks, so the hybrid ran on the CPU over gloo.")
    else:
        note = f"That path did not run here: this machine has {m.describe()}."
    return {"mpt_where": f"{where}, {_split_why(m)}", "mpt_gpu_note": note, **_runs(m, "05_3_model_parallel_training")}


def checkpointing(m: Machine) -> dict[str, str]:
    if _ran_on_gpus(m, 2):
        here = "Here each rank loaded onto its own GPU, which is what the fix is for"
    else:
        here = "Here the ranks ran on the CPU, so this fix changed nothing in this run"
    return {"map_location_here": here, **_runs(m, "05_4_checkpointing")}


def speedup(m: Machine) -> dict[str, str]:
    """4.1's claims that hold only where every rank of p = 2 has a core (or GPU) of its own."""
    ranks = plans.speedup_ranks(m)
    if ranks.shared:
        turns = "the two ranks take turns on this machine's one core"
        return {"shrink_claim": f"(asserted above 0.8: {turns}, so the parallel part gets no faster)",
                "weak_claim": f"(asserted below 1.25 times: {turns})",
                "past_claim": "This run had one core, so no point past it was planned."}
    past = (f"Past the {ranks.units} {ranks.device}s the efficiency falls further (asserted), for the "
            "reason above." if ranks.over else
            f"This run planned no point past its {ranks.units} {ranks.device}s.")
    return {"shrink_claim": "(asserted between 0.4 and 0.8; not quite 0.5, because two busy cores share "
                            "one memory system)" if ranks.backend == "gloo" else "(asserted between 0.4 and 0.8)",
            "weak_claim": "(asserted higher)", "past_claim": past}


def _where(backend: str) -> str:
    return "on GPUs, one each, over NCCL" if backend == "nccl" else "on the CPU over gloo"


def ddp_training(m: Machine) -> dict[str, str]:
    """5.1: the live and throughput runs give each rank one thread; the throughput pairs follow
    ``plans.throughput_backends``; the two torchrun nodes share this host."""
    pairs = plans.throughput_backends(m)
    runs = (f"On this machine ({m.describe()}), the live run below ran as 2 ranks {_where(m.backend(2))}, "
            f"and the throughput runs as 1 rank, then 2, {', and again '.join(_where(b) for b in pairs)}; "
            "each of their ranks had one thread.")
    if len(pairs) > 1:
        tp_where = ("Both ran over NCCL, one GPU per rank. The same pair then ran over gloo on the CPU, "
                    "one thread per rank: chapter 4.3's fits, used for the prediction below, were measured "
                    "that way")
        against = "the pair that ran over gloo on the CPU, as 4.3's fits were measured (not the GPU pair)"
    else:
        why = (": one GPU cannot hold two ranks, and a one-rank GPU step set against a two-rank CPU step "
               "would compare devices, not rank counts" if m.n_gpus == 1 else "")
        tp_where = f"Both ran over gloo on the CPU, one thread per rank{why}"
        against = "the same pair, which ran over gloo on the CPU as 4.3's fits were measured"
    return {"runs_where": runs, "tp_where": tp_where, "pred_against": against,
            "nodes_where": _loopback_nodes(m, "the two nodes below")}


def prediction(m: Machine) -> dict[str, str]:
    """4.3's claim of a good regime holds only where each of the 2 ranks has a device of its own."""
    good, device = plans.good_regime_claim(m), plans.communication_ranks(m).device
    claim = (f"(asserted above 1.5: each rank has a {device} of its own here)" if good else
             "(not asserted here: the two ranks take turns on this machine's one core)")
    return {"good_claim": claim, **_runs(m, "04_3_prediction")}


def tensor_parallel(m: Machine) -> dict[str, str]:
    """6.3: the blocks on 2 ranks; the strategies and the 2 x 2 layout on 4, which may share the cores."""
    four = plans.job(m, 4)
    if four.shared:
        note = (f"{four.warning()} This chapter takes no timings: it counts bytes and checks results, "
                "which the turns do not change.")
    else:
        note = f"The 4-rank run ran as {four.describe()}: its ranks did not take turns."
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


def _loopback_nodes(m: Machine, nodes: str) -> str:
    """Where torchrun agents that share this host run (``cluster.shared_host_env``): gloo on the CPU."""
    if m.n_gpus:
        return (f"This machine has {m.n_gpus} GPU{'s' if m.n_gpus > 1 else ''}, but {nodes} share "
                f"{'them' if m.n_gpus > 1 else 'it'}, so they run gloo on the CPU: each agent numbers its "
                "ranks from LOCAL_RANK 0, so both would take cuda:0, and NCCL refuses two ranks on one GPU")
    return f"{nodes[0].upper()}{nodes[1:]} run gloo on the CPU, as every job on this machine does"


def hangs(m: Machine) -> dict[str, str]:
    """7.2 runs over gloo everywhere (monitored_barrier is gloo's); the flight recorder's dump on a
    timeout comes from the NCCL watchdog, which only a GPU job has."""
    if m.n_gpus:
        recorder = (f"This machine has {m.describe()}, but this chapter's hangs ran over gloo, so no "
                    "watchdog dumped a recorder here: a job over NCCL with the variables above does")
    else:
        recorder = f"This machine has {m.describe()}, so that dump is not shown here"
    return {"hg_recorder_here": recorder, **_runs(m, "07_2_hangs")}


# The chapters whose prose speaks of the machine, by notebook.
CHAPTERS: dict[str, Callable[[Machine], dict[str, str]]] = {
    "01_background": background,
    "03_1_data_parallel": data_parallel,
    "03_2_model_parallel": model_parallel,
    "03_3_mixed_precision": mixed_precision,
    "04_1_speedup": speedup,
    "04_3_prediction": prediction,
    "05_1_ddp_training": ddp_training,
    "05_2_amp_training": amp_training,
    "05_3_model_parallel_training": model_parallel_training,
    "05_4_checkpointing": checkpointing,
    "06_1_pipeline_schedules": pipeline_schedules,
    "06_2_sharding": sharding,
    "06_3_tensor_parallel": tensor_parallel,
    "07_1_elastic": elastic,
    "07_2_hangs": hangs,
}


def for_chapter(chapter: str, m: Machine) -> dict[str, str]:
    return CHAPTERS[chapter](m)


def landing(m: Machine) -> dict[str, str]:
    """The landing page: the machine that built the site, and each chapter's launches on it (Markdown)."""
    runs = {chapter: "; ".join(plans.chapter_job(m, chapter, n).describe() for n in ns)
            for chapter, ns in plans.CHAPTER_JOBS.items()}
    rows = [f"| {{doc}}`/notebooks/{chapter}` | {where} |" for chapter, where in runs.items()]
    table = "\n".join(["| chapter | its fixed launches, as they ran here |", "|---|---|", *rows])
    return {"built_on": m.describe(), "launches_table": table}


def cluster(hostname: str, interfaces: dict[str, list[str]], netns_why_not: str) -> dict[str, str]:
    """7.3: this machine's interfaces, and whether it can make network namespaces (and why not)."""
    others = [f"{n} ({', '.join(a) or 'no IPv4 address'})" for n, a in interfaces.items() if n != "lo"]
    where = (f"Besides loopback, this machine ({hostname}) has {', '.join(others)}: on a cluster the "
             "interface that reaches the other nodes is the one to name" if others else
             f"This machine ({hostname}) has loopback alone, so here both nodes can only meet on 127.0.0.1")
    ns = ("This machine can make network namespaces (it runs as root and a veth pair was made and "
          "removed), so the two nodes could be given addresses of their own: tests/test_cluster.py does it"
          if not netns_why_not else
          f"This machine cannot make network namespaces ({netns_why_not}), so both nodes stay on loopback")
    return {"cl_interfaces": where, "cl_namespaces": ns}

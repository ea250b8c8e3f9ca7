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
    return {"tl_where": "unlike this run, which used NCCL" if on_gpus else "as in this run",
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
    return {"mp_inproc_where": f"{where}, {_split_why(m)}", **_runs(m, "03_2_model_parallel")}


def mixed_precision(m: Machine) -> dict[str, str]:
    """3.3 runs in one process on ``machine.default_device()``: the first GPU, else the CPU."""
    gpu = m.gpus[0] if m.gpus else None
    return {"gpu_case": f"It ran on this machine's GPU, a {gpu}" if gpu
            else f"It did not run on a GPU here: this machine has {m.describe()}",
            "fp16_units": "has them, so here float16 need not be slow" if m.native_fp16 else "has none",
            "cuda_peak_case": f"It ran here, on the {gpu}" if gpu
            else f"It did not run here: this machine has {m.describe()}"}


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
        shrink, weak = ranks.shared_bounds
        if ranks.hyperthreads:
            turns = ("the two ranks run on the two hardware threads of this machine's one core, which "
                     "share its arithmetic units")
        else:
            turns = "the two ranks take turns on this machine's one core"
        return {"shrink_claim": f"(asserted above {shrink}; not asserted below 0.8, as it is where each rank "
                                f"has a core of its own: {turns}, and each computes at full speed only while "
                                "the other waits in its all_reduce)",
                "weak_claim": f"(asserted below {weak} times: {turns})",
                "past_claim": "This run had one core, so no point past it was planned."}
    past = (f"Past the {ranks.units} {ranks.device}s the efficiency falls further (asserted), for the "
            "reason above." if ranks.over else
            f"This run planned no point past its {ranks.units} {ranks.device}s.")
    if ranks.threads:
        past += (f" Its {ranks.threads} logical CPUs are {ranks.units} cores with {ranks.threads // ranks.units} "
                 "hardware threads each; ranks on a core's second thread would share its arithmetic units, "
                 "so the sweep counts one rank per core.")
    return {"shrink_claim": "(asserted between 0.4 and 0.8; not quite 0.5, because two busy cores share "
                            "one memory system)" if ranks.backend == "gloo" else "(asserted between 0.4 and 0.8)",
            "weak_claim": "(asserted higher)", "past_claim": past}


def communication(m: Machine) -> dict[str, str]:
    """4.2: its sweep's ranks are GPUs over NCCL where there are two, else CPU cores over gloo; the copy
    ceiling is measured on rank 0's device, and the ring model is gloo's algorithm, not NCCL's."""
    ranks, sizes = plans.communication_ranks(m), plans.allreduce_sizes(m)
    largest = f"{sizes[-1] / 2**30:.0f} GB" if sizes[-1] >= 2**30 else f"{sizes[-1] >> 20} MB"
    bound = f"{plans.ring_model_bound(ranks.backend):.0%}"
    r2, held = plans.allreduce_fit_bounds(m)
    fit = (f"at least {r2}, and every held-out size within {held:.0%}: the two ranks took turns on this "
           "machine's one core, in the kernel's time slices of a few ms, and a call that outlasts one waits "
           "for the next, so the line bends at the large sizes" if ranks.shared and not ranks.hyperthreads
           else f"at least {r2}, and every held-out size within {held:.0%}")
    if ranks.backend == "nccl":
        return {"cm_sizes": f"up to {largest} here, where the ranks are GPUs: over NVLink a message is "
                            "bandwidth-bound only from some hundreds of MB",
                "cm_copier": "This machine's first GPU copies its own memory",
                "cm_transport": ("NCCL moves the bytes between the GPUs' memories over NVLink or PCIe, "
                                 "with kernels that reduce as they go, so the bound is the links' speed"),
                "cm_fit_bounds": fit,
                "cm_ring_bound": (f"within {bound}: NCCL picks a ring, a tree or NVLink SHARP by size "
                                  "and topology, so the ring is a model of its all_reduce, not its algorithm")}
    return {"cm_sizes": f"up to {largest} here, where the ranks are CPU cores: far past where gloo's "
                        "loopback turns bandwidth-bound",
            "cm_copier": "One core copies memory",
            "cm_transport": ("gloo sends through the kernel's TCP loopback: every byte is copied into a "
                             "socket buffer and out again, the reduction reads two buffers and writes one, "
                             "and both ranks' copies share one memory system"),
            "cm_fit_bounds": fit, "cm_ring_bound": f"within {bound}: gloo's all_reduce is this ring"}


def ddp_training(m: Machine) -> dict[str, str]:
    return _runs(m, "05_1_ddp_training")


def prediction(m: Machine) -> dict[str, str]:
    """4.3 runs 2 ranks on CPU cores over gloo on every machine; its claim of a good regime holds only
    where each of them has a physical core of its own."""
    if plans.good_regime_claim(m):
        claim = "(asserted above 1.5: each rank has a core of its own here)"
    elif m.cores > 1:
        claim = ("(not asserted here: the two ranks share this machine's one core, through its two "
                 "hardware threads)")
    else:
        claim = "(not asserted here: the two ranks take turns on this machine's one core)"
    gpus = (f"This machine has {_plural_gpus(m)}, but this chapter's ranks run on CPU cores over gloo, as on "
            "every machine" if m.gpus else "This chapter's ranks run on CPU cores over gloo, as on every machine")
    why = (f"{gpus}: it studies CPU ranks (one thread each, two of them computing side by side on one "
           "memory system, and gloo's calls waking between steps), and chapter 5.1 predicts its own gloo "
           "run from the fits this chapter keeps")
    return {"good_claim": claim, "pred_where_why": why, **_runs(m, "04_3_prediction")}


def _plural_gpus(m: Machine) -> str:
    return f"{m.n_gpus} GPU{'s' if m.n_gpus != 1 else ''}"


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


def elastic(m: Machine) -> dict[str, str]:
    """7.1: its two loopback "nodes" share this machine, so they run gloo even where GPUs are."""
    if m.n_gpus:
        nodes = (f"This machine has {m.n_gpus} GPU{'s' if m.n_gpus > 1 else ''}, but the two nodes below "
                 "share them, so they run gloo on the CPU: NCCL refuses two ranks on one GPU")
    else:
        nodes = "The two nodes below run gloo on the CPU, as every job on this machine does"
    return {"el_nodes_backend": nodes, **_runs(m, "07_1_elastic")}


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
    "04_2_communication": communication,
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

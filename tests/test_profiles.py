"""Every chapter's plan, taken through every machine a reader brings (the real runs see only this one)."""
import json
import re

import chapter_cells
import pytest

from helpers import plans, sentences
from helpers.machine import Machine

PROFILES = list(plans.PROFILES.items())


def test_the_profiles_are_the_books_table():
    assert len(PROFILES) == 9
    assert {m.n_gpus for _, m in PROFILES} == {0, 1, 2, 8} and {m.cores for _, m in PROFILES} >= {1, 2, 16, 64, 96}
    assert {m.system for _, m in PROFILES} == {"Linux", "Darwin"}


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_speedup_plan_is_valid_on_every_profile(name, m):
    r = plans.speedup_ranks(m)
    assert r.ok[0] == 1 and any(p > 1 for p in r.ok), "Amdahl's fit needs p = 1 and a p > 1"
    assert list(r.ok) == sorted(set(r.ok)) and max(r.ps) <= 32, r  # bounded: at most 32 processes
    if r.backend == "gloo":  # a core's second hardware thread is not a core: one rank per physical core
        assert r.units == m.whole_cores and max(r.ok) <= max(2, m.whole_cores), r
    if r.shared:
        assert m.whole_cores == 1 and r.ok == (1, 2) and r.over is None and r.hyperthreads == (m.cores > 1)
    else:
        assert max(r.ok) <= r.units, r  # one device per rank
    if r.over:  # past the logical CPUs (ranks take turns), not onto hardware threads; only where it is quick
        assert r.backend == "gloo" and r.over == 2 * m.cores <= 16, r
    # NCCL only where every rank of the largest job owns a GPU; a single GPU runs the sweep on CPUs
    assert (r.backend == "nccl") == (m.n_gpus >= 2) and (r.backend != "nccl" or max(r.ps) <= m.n_gpus)
    assert r.describe().startswith("p = 1, 2")


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_communication_plan_is_valid_on_every_profile(name, m):
    r = plans.communication_ranks(m)
    assert r.ok[0] == 2, "the chapter fits its model on the p = 2 sweep"
    assert r.shared == (m.whole_cores == 1 and m.n_gpus < 2) and (r.shared or max(r.ok) <= r.units), r
    assert r.backend != "gloo" or r.units == m.whole_cores, r  # one rank per physical core
    assert r.over is None or (r.backend == "gloo" and r.over == 2 * m.cores <= 8), r
    assert (r.backend == "nccl") == (m.n_gpus >= 2) and (r.backend != "nccl" or max(r.ps) <= m.n_gpus)


@pytest.mark.parametrize("m, ok, over", [
    (Machine(cores=2), (1, 2), 4),                       # this book's own machine: as before
    (Machine(cores=2, gpus=("Tesla T4",)), (1, 2), 4),   # Colab: one GPU cannot hold 2 ranks; CPUs
    (Machine(cores=64), (1, 2, 4, 8, 16), None),
    (Machine(cores=96, gpus=("H100",) * 8), (1, 2, 4, 8), None),
    (Machine(cores=16, physical_cores=8), (1, 2, 4, 8), None),  # 16 vCPUs: p = 8 is the held-out one
    (Machine(cores=4, physical_cores=2), (1, 2), 8),             # past the 4 threads, not onto them
    (Machine(cores=2, physical_cores=1), (1, 2), None),          # Colab's CPU: one core, two threads
])
def test_speedup_plans_by_hand(m, ok, over):
    r = plans.speedup_ranks(m)
    assert (r.ok, r.over) == (ok, over)


# --- Every chapter's fixed launches and its sentences about the machine, on every profile ------------

CHAPTERS = {p.stem: p for p in chapter_cells.NOTEBOOKS}
PLANNED = {"04_1_speedup", "04_2_communication"}  # their sweeps come from plans.*_ranks
CLAIMS_A_GPU = re.compile(r"\bran\b[^.;:]*\bGPUs?\b|\bNCCL\b|cuda:\d")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_job_table_is_what_each_chapter_launches(chapter):
    fixed, planned = chapter_cells.launches(CHAPTERS[chapter])
    assert fixed == set(plans.CHAPTER_JOBS.get(chapter, ())), (chapter, fixed)
    assert not planned or chapter in PLANNED, f"{chapter} launches nprocs={planned}: plan it in helpers.plans"
    assert chapter_cells.gloo_launches(CHAPTERS[chapter]) == set(plans.GLOO_JOBS.get(chapter, ())), chapter
    assert chapter_cells.paired_launches(CHAPTERS[chapter]) == set(plans.PAIRED_JOBS.get(chapter, ())), chapter


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_every_fixed_job_runs_on_every_profile(name, m):
    for chapter, counts in plans.CHAPTER_JOBS.items():
        for n in counts:
            job = plans.job(m, n)
            # bounded: a fixed job never grows with the machine; a mesh's job is the mesh's size
            assert n <= (8 if n in plans.MESH_JOBS.get(chapter, ()) else 4), (chapter, n)
            assert job.backend == "gloo" or n <= m.n_gpus, (chapter, job)  # NCCL only with a GPU per rank
            # More ranks than cores is the stated fallback: the job runs, with a warning saying so.
            assert job.shared == (job.backend == "gloo" and n > m.cores) == bool(job.warning())
            assert job.describe().startswith(f"{n} rank")
        assert plans.chapter_jobs(m, chapter).startswith(f"On this machine ({m.describe()})")


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_sentences_fit_every_profile(name, m):
    for chapter, make in sentences.CHAPTERS.items():
        said = make(m)
        assert said.keys() == make(plans.PROFILES["CPU only, 2 cores"]).keys(), chapter  # same names everywhere
        assert all(isinstance(v, str) and v for v in said.values()), (chapter, said)
        for key, text in said.items():
            if m.n_gpus:
                assert "no GPU" not in text, (name, chapter, key, text)
            else:
                assert not CLAIMS_A_GPU.search(text), (name, chapter, key, text)


def test_sentences_change_with_the_machine():
    cpu, colab, node = (plans.PROFILES[k] for k in ("CPU only, 2 cores", "Colab: 1 GPU + 2 cores", "8 GPUs + 96 cores"))
    assert sentences.mixed_precision(colab)["gpu_case"] == "It ran on this machine's GPU, a Tesla T4"
    assert "one GPU cannot give two ranks" in sentences.amp_training(colab)["gpu_case"]
    assert sentences.checkpointing(node)["map_location_here"].startswith("Here each rank loaded onto its own GPU")
    assert sentences.checkpointing(cpu)["map_location_here"].startswith("Here the ranks ran on the CPU")
    assert "sharing its 1 core" in sentences.background(plans.PROFILES["CPU only, 1 core"])["runs_where"]
    assert "2 ranks on 2 GPUs, one each, over NCCL" in sentences.background(node)["runs_where"]
    assert "sharing its 2 cores" in sentences.pipeline_schedules(cpu)["p4_note"]
    assert "4 ranks on 4 GPUs" in sentences.pipeline_schedules(node)["p4_note"]
    assert "was not run here" in sentences.sequence_context(colab)["sc_torch_cp"]  # one GPU, 2 ranks: no
    assert "ran below" in sentences.sequence_context(node)["sc_torch_cp"] and plans.torch_cp_runs(node)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_name_the_prose_uses_is_produced_on_every_profile(chapter):
    path = CHAPTERS[chapter]
    calls = chapter_cells.glue_calls(path)
    # A glue inside an if or a loop would make a name exist on some machines only.
    assert all(top for _, top in calls), f"{chapter}: call book.glue at the top level of its cell"
    for name, m in PROFILES:
        said = set(sentences.CHAPTERS[chapter](m)) if chapter in sentences.CHAPTERS else set()
        names, patterns = chapter_cells.glued_names(path, said)
        missing = {r for r in chapter_cells.glue_refs(path) if r not in names and not any(p.fullmatch(r) for p in patterns)}
        assert not missing, (chapter, name, missing)


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_every_planned_launch_is_one_the_machine_can_hold(name, m):
    """launch() refuses more than plans.most_ranks; no chapter may plan a launch it would refuse."""
    planned = {*plans.speedup_ranks(m).ps, *plans.communication_ranks(m).ps,
               *(n for ns in plans.CHAPTER_JOBS.values() for n in ns)}
    assert max(planned) <= plans.most_ranks(m), (sorted(planned), plans.most_ranks_why(m))


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_good_regime_is_claimed_only_where_each_rank_has_a_device(name, m):
    # 4.3 runs over gloo on every machine (plans.GLOO_JOBS): its ranks' devices are physical cores
    claimed = plans.good_regime_claim(m)
    assert claimed == (m.whole_cores >= 2), name
    said = sentences.prediction(m)
    assert said["good_claim"].startswith("Each rank had a physical core") == claimed, said
    assert "asserted" not in said["good_claim"], said  # 4.3 asserts no bound on one S(2); bench/ records it
    assert "over gloo" in said["pred_where_why"] and ("NCCL" not in said["runs_where"]), said
    assert plans.contention_ceiling(m) == (2.0 if claimed else 3.0)
    # a busy process beside the ranks: the ceiling widens only where the ranks then share cores
    crowded = plans.contention_ceiling(m, others=1.0) / plans.contention_ceiling(m)
    # (on one core the ranks took turns already; on three or more, a third core is free for it)
    assert crowded == (pytest.approx(1.5) if m.cores == 2 else 1.0), (name, crowded)


# --- torchrun jobs started as subprocesses (5.1, 7.1, 7.3): where every node's ranks run ----------

class _Recorded(Exception):
    pass


def helper_jobs(name: str) -> list[plans.HostJob]:
    """The jobs a helper that runs torchrun itself (``restarts.lose_a_node``) would start: its
    ``cluster.run_nodes`` call is recorded, and stopped before anything starts."""
    from helpers import cluster, restarts
    jobs = []

    def record(argvs, env=None, **_):
        jobs.append(cluster.host_job(argvs, env or {}))
        raise _Recorded
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cluster, "run_nodes", record)
        with pytest.raises(_Recorded):
            getattr(restarts, name.rpartition(".")[2])("/nonexistent-folder")
    return jobs


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_torchrun_table_is_what_each_chapter_starts(chapter):
    jobs = chapter_cells.torchrun_jobs(CHAPTERS[chapter], helper_jobs)
    assert tuple(jobs) == plans.TORCHRUN_JOBS.get(chapter, ()), (chapter, jobs)


def nccl_clash(m: Machine, job: plans.HostJob) -> str:
    """Why ``job``'s ranks cannot all run on ``m``, or "": every rank's device from devices.for_rank."""
    from helpers import devices
    try:
        placed = [(node, local, devices.for_rank(backend, local, m))
                  for node, local, backend in plans.host_ranks(m, job)]
    except RuntimeError as e:  # a LOCAL_RANK with no GPU of its own
        return str(e)
    gpus = [str(device) for _, _, device in placed if device.type == "cuda"]
    return f"two NCCL ranks on one GPU: {placed}" if len(gpus) != len(set(gpus)) else ""


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_no_two_nccl_ranks_share_a_gpu_in_any_torchrun_job(name, m):
    for chapter, jobs in plans.TORCHRUN_JOBS.items():
        for job in jobs:
            assert not nccl_clash(m, job), (chapter, job, nccl_clash(m, job))
            assert len(plans.place_ranks(m, job)) == job.nodes * job.nproc  # run_nodes' own check agrees


def test_two_loopback_nodes_without_gloo_are_refused_wherever_there_is_a_gpu():
    """What 5.1 once did: two agents of one rank each, the backend left to the ranks."""
    bare = plans.HostJob(2, 1)
    for name, m in PROFILES:
        assert bool(nccl_clash(m, bare)) == (m.n_gpus > 0), name
        if m.n_gpus:
            with pytest.raises(RuntimeError, match="two NCCL ranks on one GPU"):
                plans.place_ranks(m, bare)


def test_a_torchrun_command_written_out_in_a_cell_is_read(tmp_path):
    """5.1's old cell: two agents started with Popen, on a command line it wrote itself."""
    cell = ("commands = [f'{sys.executable} -m torch.distributed.run --nnodes 2 --node-rank {r} '\n"
            "            f'--nproc-per-node 1 -m helpers.run ddp_mnist.train' for r in (0, 1)]\n"
            "env = {**os.environ, 'HELPERS_THREADS': '1'}\n"
            "nodes = [subprocess.Popen(shlex.split(c), env=env) for c in commands]\n")
    nb = tmp_path / "old.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": cell}]}))
    assert chapter_cells.torchrun_jobs(nb) == [plans.HostJob(2, 1, None)]
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": cell.replace(
        "'HELPERS_THREADS': '1'", "protocol.BACKEND: 'gloo'")}]}))
    assert chapter_cells.torchrun_jobs(nb) == [plans.HostJob(2, 1, "gloo")]


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_throughput_pairs_compare_rank_counts_on_one_kind_of_device(name, m):
    backends = plans.throughput_backends(m)
    assert backends[-1] == "gloo", "4.3's fits are gloo's: the prediction needs a gloo pair"
    assert backends[0] == plans.job(m, 2).backend == plans.chapter_job(m, "05_1_ddp_training", 1).backend
    assert len(backends) == len(set(backends)) == (2 if m.n_gpus >= 2 else 1), backends
    said = sentences.ddp_training(m)
    assert ("over NCCL" in said["tp_where"]) == (m.n_gpus >= 2), said["tp_where"]



# --- Physical cores, and 4.2's sizes and ring bound, per profile ------------------------------------

CPUINFO_4_THREADS_2_CORES = "\n\n".join(
    f"processor\t: {i}\nphysical id\t: 0\ncore id\t\t: {i % 2}\nsiblings\t: 4" for i in range(4))


def test_physical_cores_are_read_from_cpuinfo_and_psutil(monkeypatch):
    from helpers import machine
    assert machine.physical_cores_in(CPUINFO_4_THREADS_2_CORES, {0, 1, 2, 3}) == 2  # siblings 0/2, 1/3
    assert machine.physical_cores_in(CPUINFO_4_THREADS_2_CORES, {0, 2}) == 1  # affinity: one core's threads
    assert machine.physical_cores_in("processor\t: 0\nBogoMIPS\t: 50", {0}) == 0  # no core id: unknown
    import builtins
    import psutil
    real_open = builtins.open

    def no_proc(path, *a, **k):  # macOS: no /proc/cpuinfo
        if str(path) == "/proc/cpuinfo":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 10 if logical else 8)
    assert machine._physical_cores(set(range(10))) == 8
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: None if not logical else 4)
    assert machine._physical_cores(set(range(4))) == 0
    assert Machine(cores=4).whole_cores == 4 and Machine(cores=4, physical_cores=2).whole_cores == 2
    with pytest.raises(ValueError):
        Machine(cores=2, physical_cores=3)


@pytest.mark.parametrize("flags, family, per_cycle", [
    ("sse2 avx avx2 fma", "GenuineIntel 6", 32),  # Haswell: 8 lanes x FMA x 2 pipes
    ("sse2 avx avx2 fma avx512f", "GenuineIntel 6", 64),  # Skylake-SP's two 512-bit FMA pipes
    ("sse2 avx avx2 fma avx512f avx512_bf16", "AuthenticAMD 25", 32),  # Zen 4: 512 bits as two halves
    ("sse2 avx avx2 fma", "AuthenticAMD 25", 32),  # Zen 3
    ("sse2 avx", "GenuineIntel 6", 16),  # Sandy Bridge: no FMA
    ("", "", 0),  # macOS: no flags, no count
])
def test_a_cores_flops_a_cycle_follow_its_vector_flags(flags, family, per_cycle):
    from helpers.theory import utilization
    m = Machine(cores=2, cpu_flags=frozenset(flags.split()), cpu_family=family, clock_ghz=2.5)
    assert m.fp32_flops_per_cycle == per_cycle
    if per_cycle:
        assert utilization.peak_flops(2, 2.5e9, per_cycle) == 2 * 2.5e9 * per_cycle


def test_the_data_sheet_peak_is_said_beside_the_measured_one():
    import dataclasses
    zen4 = Machine(cores=2, cpu_flags=frozenset({"avx2", "fma", "avx512f"}), cpu_family="AuthenticAMD 25",
                   clock_ghz=2.6)
    said = sentences.peak_said(zen4, 93e9, 1, "cpu", 41.6e9)  # a VM's nominal clock, beaten by a boost
    assert "1 core x 2.60 GHz" in said and "83.2 GFLOP/s" in said and "50%" in said and "about 2.91 GHz" in said
    said = sentences.peak_said(dataclasses.replace(zen4, clock_ghz=3.7, clock_is_max=True), 93e9, 1, "cpu", 41.6e9)
    assert "118.4 GFLOP/s" in said and "35%" in said and "reached 79% of it" in said
    assert "no vector flags" in sentences.peak_said(Machine(cores=8, system="Darwin"), 93e9, 8, "cpu", 41.6e9)
    assert "data sheet" in sentences.peak_said(zen4, 93e12, 1, "cuda", 41.6e12)


def test_this_machines_clock_and_family_are_read():
    from helpers import machine
    here = machine._cpuinfo()
    assert here["clock_ghz"] >= 0 and isinstance(here["clock_is_max"], bool)
    if machine.platform.system() == "Linux":
        assert here["clock_ghz"] > 0 and here["cpu_flags"] and here["cpu_family"], here


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_profiles_know_their_physical_cores(name, m):
    assert 1 <= m.whole_cores <= m.cores and m.physical_cores, name  # every profile says
    assert (m.whole_cores < m.cores) == ("threads on" in m.describe()), m.describe()
    assert not m.gpus or m.gpu_memory >= 8 * plans.GIB, name


LINKS = {"gloo": (460e-6, 1.1e9), "nccl": (50e-6, 350e9)}  # the loopback measured here; NVLink, as the issue puts it


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_sweep_reaches_the_bandwidth_bound_on_every_profile(name, m):
    from helpers import analysis
    backend, sizes = plans.communication_ranks(m).backend, plans.allreduce_sizes(m)
    assert sizes[0] == 4096 and all(b == 2 * a for a, b in zip(sizes, sizes[1:])), sizes
    if backend == "nccl":  # the sweep holds every size at once: about twice the largest, an eighth of a GPU
        assert 2 * sizes[-1] <= m.gpu_memory // 8, (sizes[-1], m.gpu_memory)
    L, B = LINKS[backend]
    t = [L + s / B for s in sizes]
    fit = analysis.fit_allreduce(sizes, t)  # 4.2's selection, on the line its link would draw
    assert fit.latency_bound.sum() >= 2 and fit.bandwidth_bound.sum() >= 3, (name, sizes[-1])
    assert plans.ring_model_bound(backend) == (0.20 if backend == "gloo" else 0.50)
    # looser only where the 2 ranks take turns on one logical CPU (measured: R^2 0.90-0.93 there)
    assert plans.allreduce_fit_bounds(m) == ((0.85, 0.35) if m.cores == 1 else (0.98, 0.20)), name
    # beside a busy process the 2 gloo ranks take turns with it where it crowds their cores: 2 cores, not 4
    busy = plans.allreduce_fit_bounds(m, others=1.0)
    assert busy == ((0.85, 0.35) if backend == "gloo" and m.cores <= 2 else plans.allreduce_fit_bounds(m)), name
    assert ("took turns" in sentences.fit_bounds(m, 1.0)) == (busy == (0.85, 0.35)), name
    assert sentences.fit_bounds(m).startswith(f"at least {plans.allreduce_fit_bounds(m)[0]}"), name
    said = sentences.communication(m)
    assert ("NCCL" in said["cm_ring_bound"]) == (backend == "nccl"), said
    assert ("GPU" in said["cm_copier"]) == (backend == "nccl"), said


# --- Chapter 8.1: where the peak is measured in bfloat16, and what the profiler sees ------------

@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_transformer_bill_says_what_ran_where(name, m):
    import torch
    from helpers import devices
    from helpers.probes import transformer as probe
    said = sentences.transformer_bill(m)
    device = devices.for_rank(plans.job(m, 2).backend, 0, m)  # where the 2 ranks whose MFU it is ran
    measured_bf16 = torch.bfloat16 in probe.peak_dtypes(m, device)
    assert ("float32 only" not in said["tb_bf16"]) == measured_bf16, said["tb_bf16"]
    assert ("GPU" in said["tb_bf16"]) == (device.type == "cuda"), said["tb_bf16"]
    assert ("NCCL" in said["tb_profiled"]) == (plans.job(m, 2).backend == "nccl"), said["tb_profiled"]
    flagged = Machine(cores=2, cpu_flags=frozenset({"amx_bf16"}))
    assert "amx_bf16" in sentences.transformer_bill(flagged)["tb_bf16"]


def test_the_attention_sentence_follows_the_kernel_that_ran():
    assert "no s × s scores" in sentences.attention_kernel("ScaledDotProductFlashAttentionForCpu")
    assert "materializes" in sentences.attention_kernel("none found")


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_experts_chapter_says_where_its_ranks_ran_on_every_profile(name, m):
    """8.3: its 4-rank mesh says when the ranks take turns on the cores; its all_to_all timing says whose
    links it timed; its sweep reaches both ends of the fit on the links each profile would have."""
    said, four, two = sentences.experts(m), plans.job(m, 4), plans.job(m, 2)
    assert said["ep_four_ranks"].startswith("4 ranks share") == four.shared, said
    assert ("gloo's loopback" in said["ep_links"]) == (two.backend == "gloo"), said
    from helpers import analysis
    L, B, sizes = *LINKS[two.backend], plans.alltoall_sizes(m)
    fit = analysis.fit_allreduce(sizes, [L + s / B for s in sizes])
    assert fit.latency_bound.sum() >= 2 and fit.bandwidth_bound.sum() >= 4, name  # the chapter asserts 3


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_8_rank_mesh_runs_on_every_profile_and_its_time_is_never_called_representative(name, m):
    for chapter, counts in plans.MESH_JOBS.items():
        for n in counts:
            assert n <= plans.most_ranks(m), (name, n)  # launch will start it here
            job = plans.chapter_job(m, chapter, n)
            # NCCL only with a GPU for every rank: 1 or 2 GPUs cannot hold 8 ranks, so they run on the CPU
            assert (job.backend == "nccl") == (m.n_gpus >= n), (name, job)
            assert job.shared == (job.backend == "gloo" and m.cores < n), (name, job)
    said = sentences.four_d(m)
    assert "not representative" in said["fd_time_note"], (name, said)
    assert ("take turns" in said["fd_time_note"]) == plans.job(m, 8).shared, (name, said)
    cp = sentences.four_d_cp(m, False, {"default kernel": "NotImplementedError: x", "math kernel": "RuntimeError: y"}, 0.0)
    assert "does not join the mesh" in cp and plans.job(m, 2).describe() in cp
    assert "not the wire's" in sentences.four_d_wire(m, None) and "1.020 times" in sentences.four_d_wire(m, 1.02)
    if plans.job(m, 8).backend == "nccl":
        assert "NCCL" in sentences.four_d_wire(m, None)


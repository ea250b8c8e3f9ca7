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
    if r.shared:
        assert m.cores == 1 and r.ok == (1, 2) and r.over is None
    else:
        assert max(r.ok) <= r.units, r  # one device per rank
    if r.over:
        assert r.backend == "gloo" and r.over == 2 * r.units <= 16, r  # only where it is quick
    # NCCL only where every rank of the largest job owns a GPU; a single GPU runs the sweep on CPUs
    assert (r.backend == "nccl") == (m.n_gpus >= 2) and (r.backend != "nccl" or max(r.ps) <= m.n_gpus)
    assert r.describe().startswith("p = 1, 2")


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_communication_plan_is_valid_on_every_profile(name, m):
    r = plans.communication_ranks(m)
    assert r.ok[0] == 2, "the chapter fits its model on the p = 2 sweep"
    assert r.shared == (m.cores == 1 and m.n_gpus < 2) and (r.shared or max(r.ok) <= r.units), r
    assert r.over is None or (r.backend == "gloo" and r.over == 2 * r.units <= 8), r
    assert (r.backend == "nccl") == (m.n_gpus >= 2) and (r.backend != "nccl" or max(r.ps) <= m.n_gpus)


@pytest.mark.parametrize("m, ok, over", [
    (Machine(cores=2), (1, 2), 4),                       # this book's own machine: as before
    (Machine(cores=2, gpus=("Tesla T4",)), (1, 2), 4),   # Colab: one GPU cannot hold 2 ranks; CPUs
    (Machine(cores=64), (1, 2, 4, 8, 16), None),
    (Machine(cores=96, gpus=("H100",) * 8), (1, 2, 4, 8), None),
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
            assert n <= 4, (chapter, n)  # bounded: a fixed job never grows with the machine
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
    claimed = plans.good_regime_claim(m)
    assert claimed == (m.cores >= 2 or m.n_gpus >= 2), name
    said = sentences.prediction(m)["good_claim"]
    assert said.startswith("(asserted above 1.5") == claimed, said


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

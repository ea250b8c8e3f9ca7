"""helpers.devices: the one decision of where a rank's tensors live, per machine profile."""
import ast
import os
import random
from pathlib import Path
from unittest import mock

import pytest
import torch

import helpers
from helpers import devices, plans
from helpers.machine import Machine
from helpers.training import DeviceClock

PROFILES = list(plans.PROFILES.items())


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_no_two_nccl_ranks_of_a_host_share_a_gpu(name, m):
    for nprocs in range(1, 17):
        backend = m.backend(nprocs)
        placed = [devices.for_rank(backend, r, m) for r in range(nprocs)]
        if backend == "nccl":
            assert len({str(d) for d in placed}) == nprocs and all(d.type == "cuda" for d in placed)
            assert nprocs <= m.n_gpus
        else:
            assert all(d == torch.device("cpu") for d in placed)


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_a_rank_without_a_gpu_of_its_own_is_refused_with_the_way_out(gpus):
    m = Machine(cores=4, gpus=("T4",) * gpus)
    with pytest.raises(RuntimeError, match=f"LOCAL_RANK {gpus} has none .*HELPERS_BACKEND=gloo"):
        devices.for_rank("nccl", gpus, m)
    assert devices.for_rank("gloo", gpus, m) == torch.device("cpu")  # gloo runs anywhere


def test_two_loopback_nodes_would_collide_on_cuda_0():
    """Two torchrun agents on one host each start at LOCAL_RANK 0: under NCCL both get cuda:0."""
    m = Machine(cores=16, gpus=("A100",) * 2)
    per_node = [devices.for_rank(m.backend(1), local_rank=0, m=m) for _node in range(2)]
    assert per_node[0] == per_node[1] == torch.device("cuda", 0)  # why such nodes must run gloo


def test_rng_state_round_trip_restores_the_same_draws():
    state = devices.rng_state(torch.device("cpu"))
    assert "cuda" not in state  # a CPU rank touches no GPU's generator
    first = (torch.rand(3), random.random())
    devices.set_rng_state(state, torch.device("cpu"))
    assert torch.equal(torch.rand(3), first[0]) and random.random() == first[1]


def test_set_rng_state_moves_the_saved_state_to_the_cpu_first():
    """A checkpoint loaded with map_location=cuda:N hands back its RNG state on that GPU, and
    torch.set_rng_state refuses anything but a CPU ByteTensor: the state must come back via .cpu()."""
    state = devices.rng_state(torch.device("cpu"))
    on_gpu = mock.Mock(spec=torch.Tensor)
    on_gpu.cpu.return_value = state["torch"]
    devices.set_rng_state({**state, "torch": on_gpu}, torch.device("cpu"))
    on_gpu.cpu.assert_called_once_with()


def test_the_cpu_clock_is_the_hosts_and_sync_waits_for_nothing():
    clock = DeviceClock(torch.device("cpu"))
    moment = clock.now()
    assert isinstance(moment, float) and clock.seconds(moment) == moment
    devices.sync(torch.device("cpu"))
    devices.sync(None)


def test_a_gpu_clock_refuses_to_read_before_it_is_started():
    clock = DeviceClock(torch.device("cuda", 0))
    with pytest.raises(RuntimeError, match="before start"):
        clock.seconds(object())


def test_peak_memory_names_the_host_and_the_gpu_apart():
    peak = devices.peak_memory(torch.device("cpu"))
    assert set(peak) == {"host_peak_rss_bytes"} and peak["host_peak_rss_bytes"] > 10 * 2**20


def test_of_group_is_the_cpu_without_a_group():
    assert devices.of_group() == torch.device("cpu")


# --- Every recipe hands its collectives tensors on the rank's device ---------------------------------

RECIPES = sorted((Path(helpers.__file__).parent / "recipes").glob("*.py"))
FACTORIES = {"tensor", "ones", "zeros", "empty", "randn", "rand", "randint", "arange", "full"}
COLLECTIVES = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all_single", "send", "recv", "isend", "irecv"}


def _cpu_factory(node: ast.AST) -> bool:
    """``torch.ones(4)``: a tensor made on the CPU whatever the rank's device (no ``device=``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
            and ast.unparse(node.func.value) == "torch" and not any(k.arg == "device" for k in node.keywords))


def _gloo_by_construction(fn: ast.FunctionDef) -> bool:
    """A function that makes its own gloo group: its tensors belong on the CPU."""
    return any(isinstance(n, ast.Call) and ast.unparse(n.func).endswith("init_process_group")
               and n.args and ast.unparse(n.args[0]) == "'gloo'" for n in ast.walk(fn))


def _pins_gloo(tree: ast.Module) -> bool:
    """A module that says ``BACKEND = "gloo"`` runs over gloo wherever it is launched from."""
    return any(isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["BACKEND"]
               and ast.unparse(n.value) == "'gloo'" for n in tree.body)


def cpu_tensors_into_collectives(source: str) -> list[str]:
    """Calls ``dist.<collective>(x)`` on the default group where ``x`` was made on the CPU."""
    found, tree = [], ast.parse(source)
    if _pins_gloo(tree):
        return []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if _gloo_by_construction(fn):
            continue
        on_cpu = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _cpu_factory(n.value)
                  for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Call) and ast.unparse(n.func) in {f"dist.{c}" for c in COLLECTIVES}):
                continue
            if any(k.arg == "group" for k in n.keywords) or not n.args:
                continue  # a group of its own may be gloo: the function says which
            arg = n.args[0]
            if _cpu_factory(arg) or (isinstance(arg, ast.Name) and arg.id in on_cpu):
                found.append(f"{fn.name}: {ast.unparse(n)}")
    return found


def test_the_check_finds_a_cpu_tensor_in_a_collective():
    bad = "def f(ctx):\n    t = torch.ones(4)\n    dist.all_reduce(t)\n    dist.broadcast(torch.zeros(1), 0)\n"
    good = "def f(ctx):\n    t = torch.ones(4, device=ctx.device)\n    dist.all_reduce(t)\n"
    gloo = "def f():\n    dist.init_process_group('gloo')\n    t = torch.ones(1)\n    dist.all_reduce(t)\n"
    assert cpu_tensors_into_collectives(bad) == ["f: dist.all_reduce(t)", "f: dist.broadcast(torch.zeros(1), 0)"]
    pinned = 'BACKEND = "gloo"\n' + bad
    assert cpu_tensors_into_collectives(good) == cpu_tensors_into_collectives(gloo) == []
    assert cpu_tensors_into_collectives(pinned) == []


def test_a_pinned_recipe_runs_on_gloo_under_launch_and_the_cli():
    from helpers.recipes import hangs, smoke
    assert devices.pinned_backend(hangs.hang) == "gloo" and devices.pinned_backend(smoke.allreduce_rank) is None


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipes_hand_collectives_tensors_on_the_ranks_device(path):
    """Under NCCL a collective takes GPU tensors only: a CPU tensor here fails on every GPU machine."""
    assert cpu_tensors_into_collectives(path.read_text()) == [], path.name


def test_the_cli_runs_a_pinned_recipe_on_its_backend(monkeypatch, capsys):
    from helpers import protocol, run
    monkeypatch.setenv(protocol.BACKEND, "")  # unset for main(); restored after the test
    seen = {}

    def recipe():
        seen["backend"] = os.environ[protocol.BACKEND]
        return {}

    recipe.__module__ = "helpers.recipes.hangs"  # a module that pins gloo
    monkeypatch.setattr(run, "resolve", lambda name: recipe)
    run.main(["hangs.anything"])
    assert seen == {"backend": "gloo"}


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_a_machine_survives_its_trip_to_the_ranks(name, m):
    from helpers import machine
    assert machine.from_json(machine.to_json(m)) == m


def test_ranks_are_handed_the_launchers_machine_instead_of_asking_the_gpus(monkeypatch):
    """Asking for the GPUs starts CUDA in every rank, gloo ranks too: seconds on an 8-GPU node."""
    import dataclasses
    import sys
    from helpers import machine
    from helpers.recipes import smoke
    told = dataclasses.replace(machine.this(), cpu="what the launcher said")  # no rank would find this
    monkeypatch.setattr(sys.modules["helpers.launch"], "this_machine", lambda: told)
    ranks = helpers.launch(smoke.allreduce_rank, nprocs=2, show=None)
    assert {r["machine"] for r in ranks} == {machine.to_json(told)}


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_the_loopback_interface_is_named_as_the_system_names_it(name, m):
    """gloo refuses GLOO_SOCKET_IFNAME=lo on macOS, whose loopback is lo0."""
    assert m.loopback == ("lo0" if m.system == "Darwin" else "lo")


def test_launch_pins_gloo_to_this_systems_loopback():
    import psutil
    from helpers import machine
    assert machine.this().loopback in psutil.net_if_addrs()


@pytest.mark.parametrize("name, m", PROFILES, ids=[n for n, _ in PROFILES])
def test_a_single_process_probe_runs_where_a_one_rank_job_would(name, m):
    assert devices.of_process(m) == (torch.device("cuda", 0) if m.n_gpus else torch.device("cpu"))

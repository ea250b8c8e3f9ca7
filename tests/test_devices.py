"""helpers.devices: the one decision of where a rank's tensors live, per machine profile."""
import random
from unittest import mock

import pytest
import torch

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

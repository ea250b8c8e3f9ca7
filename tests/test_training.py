"""The training kit and the machine facts every recipe and chapter reads."""
import time

import pytest
import torch

from helpers import models
from helpers.machine import Machine
from helpers.training import Timeline, median, snapshot, train_step, turns


def test_median_is_the_middle_of_an_even_count():
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_turns_rotate_so_no_variant_always_goes_first():
    names = ["a", "b", "c"]
    firsts = [turns(names, r)[0] for r in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    assert all(sorted(turns(names, r)) == names for r in range(6))


def test_timeline_spans_and_laps():
    tl = Timeline(phases=("x", "y"))
    with tl.span("F", 3):
        time.sleep(0.01)
    assert tl.spans[0][:2] == ("F", 3) and tl.spans[0][3] - tl.spans[0][2] >= 0.01
    tl.start()
    time.sleep(0.01)
    tl.lap("x")
    tl.lap("y")
    assert tl.phases["x"] >= 0.01 and 0 <= tl.phases["y"] < tl.phases["x"]


def test_train_step_learns_and_snapshot_is_a_copy():
    torch.manual_seed(0)
    model = models.build("simple")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    before = snapshot(model)
    losses = [train_step(model, opt, x, y) for _ in range(20)]
    assert losses[-1] < losses[0] / 2
    assert not torch.equal(before["fc.0.weight"], model.fc[0].weight)


def test_model_registry_names_one_model_each():
    assert models.n_params(models.build("wide-512x4")) != models.n_params(models.build("wide-1024x4"))
    with pytest.raises(ValueError, match="registry has"):
        models.build("wide")


@pytest.mark.parametrize("cores, gpus, nprocs, backend, threads", [
    (1, (), 1, "gloo", 1), (2, (), 2, "gloo", 1), (64, (), 4, "gloo", 16),
    (2, ("Tesla T4",), 1, "nccl", 2), (2, ("Tesla T4",), 2, "gloo", 1),
    (96, ("H100",) * 8, 8, "nccl", 12)])
def test_machine_plans_backend_and_threads(cores, gpus, nprocs, backend, threads):
    m = Machine(cores=cores, gpus=gpus)
    assert m.backend(nprocs) == backend and m.threads_per_rank(nprocs) == threads


def test_machine_describes_itself_and_refuses_nonsense():
    assert Machine(cores=1).describe() == "1 CPU core and no GPU"
    assert Machine(cores=16, gpus=("A", "A")).describe() == "16 CPU cores and 2 GPUs (A)"
    assert Machine(cores=2, cpu_flags=frozenset({"avx512_bf16"})).native_bf16
    with pytest.raises(ValueError):
        Machine(cores=0)

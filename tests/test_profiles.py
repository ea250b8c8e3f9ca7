"""Every chapter's plan, taken through every machine a reader brings (the real runs see only this one)."""
import pytest

from helpers import plans
from helpers.machine import Machine

PROFILES = list(plans.PROFILES.items())


def test_the_profiles_are_the_books_table():
    assert len(PROFILES) == 8
    assert {m.n_gpus for _, m in PROFILES} == {0, 1, 2, 8} and {m.cores for _, m in PROFILES} >= {1, 2, 16, 64, 96}


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

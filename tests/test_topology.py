"""Topology's coordinates: every method refuses a coordinate outside the layout instead of
returning another rank's number (dp=2, pp=2: rank(dp_rank=2, pp_rank=0) used to be rank 2,
which is replica 0 of stage 1)."""
import pytest

from helpers.topology import Topology

TOPO = Topology(dp=2, pp=3, tp=2)


def test_rank_and_coords_are_inverses_over_the_whole_layout():
    seen = set()
    for r in range(TOPO.world_size):
        dp_rank, pp_rank = TOPO.coords(r)
        assert TOPO.rank(dp_rank, pp_rank, TOPO.tp_rank(r)) == r
        seen.add((dp_rank, pp_rank, TOPO.tp_rank(r)))
    assert len(seen) == TOPO.world_size


@pytest.mark.parametrize("call, message", [
    (lambda t: t.rank(2, 0), "dp_rank must be an integer in 0..1"),   # was 4: replica 0, stage 1
    (lambda t: t.rank(0, 3), "pp_rank must be an integer in 0..2"),   # was 12: past the world
    (lambda t: t.rank(0, 0, 2), "tp_rank must be an integer in 0..1"),  # was 2: replica 1's shard 0
    (lambda t: t.rank(-1, 0), "dp_rank must be an integer in 0..1"),  # was -2
    (lambda t: t.rank(0.5, 0), "dp_rank must be an integer in 0..1"),
    (lambda t: t.rank(True, 0), "dp_rank must be an integer in 0..1"),
    (lambda t: t.stage_ranks(2), "dp_rank must be an integer in 0..1"),
    (lambda t: t.stage_ranks(0, tp_rank=5), "tp_rank must be an integer in 0..1"),
    (lambda t: t.replica_ranks(3), "pp_rank must be an integer in 0..2"),
    (lambda t: t.replica_ranks(0, tp_rank=-1), "tp_rank must be an integer in 0..1"),
    (lambda t: t.shard_ranks(2), "dp_rank must be an integer in 0..1"),
    (lambda t: t.shard_ranks(0, pp_rank=-1), "pp_rank must be an integer in 0..2"),
    (lambda t: t.coords(12), "rank must be an integer in 0..11"),
    (lambda t: t.coords(-1), "rank must be an integer in 0..11"),
    (lambda t: t.coords(1.0), "rank must be an integer in 0..11"),
    (lambda t: t.tp_rank(12), "rank must be an integer in 0..11"),
])
def test_a_coordinate_outside_the_layout_is_refused(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call(TOPO)
    assert "Topology(dp=2, pp=3, tp=2)" in str(info.value)


def test_the_groups_cover_every_rank_once():
    stages = [TOPO.stage_ranks(d, t) for d in range(TOPO.dp) for t in range(TOPO.tp)]
    replicas = [TOPO.replica_ranks(p, t) for p in range(TOPO.pp) for t in range(TOPO.tp)]
    shards = [TOPO.shard_ranks(d, p) for d in range(TOPO.dp) for p in range(TOPO.pp)]
    for groups in (stages, replicas, shards):
        assert sorted(r for g in groups for r in g) == list(range(TOPO.world_size))

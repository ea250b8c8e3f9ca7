"""Sharding (chapter 6.2): ZeRO's formulas, the byte counters, and real runs of the three stages
and FSDP2 checked against DDP and against the formulas."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

import helpers
import helpers.dist
from helpers import analysis, compat, devices, plans, sentences, theory
from helpers.measure import held_bytes
from helpers.recipes import fsdp, sharding, zero
from helpers.recipes.traffic import Traffic, written_bytes


def sockets_carry(backend: str) -> bool:
    """Whether a run's collectives are writes to its sockets that Linux counts: gloo's, on Linux."""
    return backend == "gloo" and sys.platform == "linux"


# --- Formulas -------------------------------------------------------------------------------

def test_each_stage_divides_one_more_kind_of_state():
    n, p = 1000, 4
    ddp = theory.sharded_state_bytes(n, p, "DDP")
    assert ddp == {"parameters": 4000, "gradients": 4000, "optimizer states": 8000}
    assert theory.sharded_state_bytes(n, p, "ZeRO-1") == {**ddp, "optimizer states": 2000}
    assert theory.sharded_state_bytes(n, p, "ZeRO-2") == {**ddp, "gradients": 1000, "optimizer states": 2000}
    assert theory.sharded_state_bytes(n, p, "ZeRO-3") == {k: v / p for k, v in ddp.items()}
    # Adam's step counters are not divided: each rank keeps one per shard it updates
    assert theory.sharded_state_bytes(n, p, "ZeRO-1", n_tensors=3)["optimizer states"] == 2000 + 12
    with pytest.raises(ValueError, match="stage"):
        theory.sharded_state_bytes(n, p, "ZeRO-4")


def test_gloo_reduce_scatter_sends_an_all_reduce():
    # Worked by hand, per message byte: a ring all-reduce sends 2 (p - 1) / p, an all-gather or a
    # reduce-scatter (p - 1) / p; gloo's reduce-scatter is an all-reduce.
    assert theory.bytes_sent("all_reduce", 8.0, 4) == 12.0
    assert theory.bytes_sent("reduce_scatter", 8.0, 4) == theory.bytes_sent("all_gather", 8.0, 4) == 6.0
    assert theory.bytes_sent("reduce_scatter", 8.0, 4, "gloo") == 12.0
    assert theory.bytes_sent("all_gather", 8.0, 4, "gloo") == 6.0
    per_step = {(stage, backend): sum(theory.step_traffic(1.0, 4, stage, backend).values())
                for stage in theory.STAGES for backend in ("nccl", "gloo")}
    assert per_step == {("DDP", "nccl"): 1.5, ("DDP", "gloo"): 1.5,
                        ("ZeRO-1", "nccl"): 1.5, ("ZeRO-1", "gloo"): 2.25,     # 0.75 + 0.75; 1.5 + 0.75
                        ("ZeRO-2", "nccl"): 1.5, ("ZeRO-2", "gloo"): 2.25,
                        ("ZeRO-3", "nccl"): 2.25, ("ZeRO-3", "gloo"): 3.0}     # 3 x 0.75; 1.5 + 2 x 0.75
    assert sum(theory.step_traffic(1.0, 4, "ZeRO-3", reshard_after_forward=False).values()) == 1.5
    assert sum(theory.step_traffic(1.0, 4, "ZeRO-3", "gloo", reshard_after_forward=False).values()) == 2.25


def test_collective_times_follow_the_ring_and_zero3_is_free_once_overlap_covers_it():
    # Worked by hand at p = 4, a step latency of 0.1 ms and 1 ns a byte over a 1 MB message:
    # an all-gather or a reduce-scatter is 3 steps and 0.75 MB, 0.3 + 0.75 = 1.05 ms; an
    # all-reduce 6 steps and 1.5 MB, 0.6 + 1.5 = 2.1 ms.
    ell, beta, m, p = 1e-4, 1e-9, 1e6, 4
    assert theory.collective_time("all_reduce", m, p, ell, beta) == pytest.approx(2.1e-3)
    assert theory.collective_time("all_gather", m, p, ell, beta) == pytest.approx(1.05e-3)
    assert theory.collective_time("reduce_scatter", m, p, ell, beta) == pytest.approx(1.05e-3)
    assert theory.collective_time("reduce_scatter", m, p, ell, beta, "gloo") == pytest.approx(2.1e-3)
    # cut into 2 calls, a collective pays its 3 steps' latency twice: 0.6 + 0.75 ms
    assert theory.collective_time("all_gather", m, p, ell, beta, messages=2) == pytest.approx(1.35e-3)
    # ZeRO-3: two all-gathers and a reduce-scatter; on gloo the reduce-scatter is an all-reduce
    hidden = theory.zero3_hidden_from(m, p, ell, beta)
    assert hidden == pytest.approx(3 * 1.05e-3)
    assert theory.zero3_hidden_from(m, p, ell, beta, "gloo") == pytest.approx(2 * 1.05e-3 + 2.1e-3)
    assert theory.zero3_hidden_from(m, p, ell, beta, messages=2) == pytest.approx(3 * 1.35e-3)
    assert theory.sharded_step_time(0.01, m, p, "ZeRO-3", ell, beta, overlappable=3.15e-3) == pytest.approx(0.01)
    assert theory.sharded_step_time(0.01, m, p, "ZeRO-3", ell, beta, overlappable=3.0e-3) == pytest.approx(0.01015)
    assert theory.sharded_step_time(0.01, m, p, "ZeRO-3", ell, beta) == pytest.approx(0.01315)
    assert theory.sharded_step_time(0.01, m, p, "ZeRO-3", ell, beta, reshard_after_forward=False) == \
        pytest.approx(0.0121)
    assert theory.sharded_step_time(0.01, m, p, "ZeRO-1", ell, beta) == pytest.approx(0.0121)
    assert theory.sharded_step_time(0.01, m, p, "DDP", ell, beta) == pytest.approx(0.0121)


def test_checkpointing_keeps_each_runs_input():
    assert theory.segment_bounds(5, 2) == [(0, 3), (3, 5)]
    assert theory.segment_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError):
        theory.segment_bounds(3, 4)
    b = theory.checkpointed_mlp_bytes(2, [10, 20, 30, 40, 5], segments=2)  # blocks take 10, 20, 30
    assert b == {"without": 2 * 4 * (10 + 20 + 30 + 40), "kept": 2 * 4 * (10 + 30 + 40),
                 "recompute_peak": 2 * 4 * (10 + 20)}
    assert theory.checkpoint_step_time(1.0, 2.0) == 4.0


# --- Counters -------------------------------------------------------------------------------

def test_held_bytes_counts_each_storage_once_and_freed_storage_not_at_all():
    w = torch.zeros(10)
    assert held_bytes([w, w[:5], w.view(2, 5), None]) == 40
    v = torch.zeros(4)
    v.untyped_storage().resize_(0)
    assert held_bytes([v, w]) == 40


def test_traffic_notes_each_collective_and_puts_the_real_ones_back():
    import torch.distributed as dist
    real = dist.all_reduce
    with helpers.dist.distributed() as ctx:  # a plain process: a group of one (NCCL where a GPU is)
        on = devices.of_group()
        with Traffic() as t:
            dist.all_reduce(torch.ones(8, device=on))
            compat.all_gather_single(torch.empty(4, device=on), torch.ones(4, device=on))
            compat.reduce_scatter_single(torch.empty(2, device=on), torch.ones(2, device=on))
    assert t.calls == [("all_reduce", 32), ("all_gather", 16), ("reduce_scatter", 8)]
    assert t.totals() == {"all_reduce": 32, "all_gather": 16, "reduce_scatter": 8}
    assert dist.all_reduce is real and t.backends == {ctx.backend}
    assert (written_bytes() is None) == (sys.platform != "linux")
    assert (t.wire_bytes is None) == (not sockets_carry(ctx.backend))


def test_traffic_reads_no_socket_bytes_for_collectives_that_do_not_cross_the_sockets(monkeypatch):
    """Under NCCL the bytes go over NVLink or shared memory: the process writes about 0, which is
    not what it sent, so the count is None rather than a 0 to be compared with gloo's figure."""
    import torch.distributed as dist
    with helpers.dist.distributed():
        on = devices.of_group()
        monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
        with Traffic() as t:
            dist.all_reduce(torch.ones(8, device=on))
        monkeypatch.undo()
    assert t.backends == {"nccl"} and t.calls == [("all_reduce", 32)] and t.wire_bytes is None


def test_shard_ranges_cover_a_tensor_once():
    for numel, p in ((10, 3), (7, 4), (8, 2), (1, 2)):
        ranges = [zero.shard_range(numel, r, p) for r in range(p)]
        assert ranges[0][0] == 0 and ranges[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_the_chapter_says_where_the_bytes_on_the_sockets_come_from():
    cpu = sentences.sharding(plans.PROFILES["CPU only, 2 cores"])["sh_wire_where"]
    assert "gloo too" in cpu
    assert "NCCL" in sentences.sharding(plans.PROFILES["8 GPUs + 96 cores"])["sh_wire_where"]
    mac = next(m for m in plans.PROFILES.values() if m.system != "Linux")
    assert "/proc/self/io" in sentences.sharding(mac)["sh_wire_where"]


# --- Real runs ------------------------------------------------------------------------------

def test_three_stages_and_fsdp2_end_with_ddps_weights_and_hold_what_the_formulas_say():
    ranks = helpers.launch(sharding.compare, nprocs=2, steps=2, batch_size=8, model="wide-64x3", show=None)
    for r in ranks:
        assert max(analysis.weight_differences(r).values()) < 1e-6
        assert analysis.worst_relative_error(analysis.memory_table(r)) < 1e-3
        sent = analysis.traffic_table(r)
        assert [sent[v]["textbook"] for v in sharding.VARIANTS] == [1.0, 1.0, 1.0, 1.5, 1.5]
        assert [sent[v]["gloo"] for v in sharding.VARIANTS] == [1.0, 1.5, 1.5, 2.0, 2.0]
        assert all((t["wire"] is None) != sockets_carry(r["backend"]) for t in sent.values()), sent
        if sockets_carry(r["backend"]):  # the sockets: headers on top of gloo's bytes
            assert all(sent[v]["gloo"] <= sent[v]["wire"] < 1.05 * sent[v]["gloo"] for v in sent), sent
        assert r["runs"]["ZeRO-3"]["peak_gathered"] == r["largest_layer_bytes"]


def test_resharding_after_forward_costs_one_more_all_gather_and_no_memory_between():
    r = helpers.launch(fsdp.reshard, nprocs=2, steps=1, width=64, depth=3, show=None)[0]
    on, off = analysis.reshard_rows(r)
    assert on["states"] == off["states"] == sum(theory.sharded_state_bytes(
        r["n_params"], 2, "ZeRO-3", n_tensors=r["n_tensors"]).values())
    assert (on["between"], off["between"]) == (0, 4 * r["n_params"])
    assert (on["gathered"], off["gathered"]) == (2.0, 1.0)
    for row in (on, off):
        assert (row["wire"] is None) != sockets_carry(r["backend"])
        assert row["wire"] is None or row["gloo"] <= row["wire"] < 1.05 * row["gloo"], row


def test_checkpointing_keeps_what_the_formula_says():
    r = helpers.launch(fsdp.checkpointing, nprocs=1, rounds=1, batch_size=256, width=256, depth=4, show=None)[0]
    formula = theory.checkpointed_mlp_bytes(r["batch_size"], r["widths"], r["segments"])
    assert abs(r["kept"]["plain"] - formula["without"]) < 0.02 * formula["without"]
    assert abs(r["kept"]["checkpointed"] - formula["kept"]) < 0.02 * formula["kept"]


def test_the_collectives_probe_sees_gloos_reduce_scatter_send_an_all_reduce():
    r = helpers.launch(sharding.collectives, nprocs=2, sizes=(2**16, 2**18, 2**20), repeats=1, show=None)[0]
    rows = r["rows"]
    f = analysis.collective_factors(rows, 2)
    assert {op: v["gloo"] for op, v in f.items()} == {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 1.0}
    assert r["backend"] == "gloo"  # whatever the job's backend: the probe's group is gloo's
    if sockets_carry(r["backend"]):
        assert np.allclose([v["wire"] for v in f.values()], [1.0, 0.5, 1.0], rtol=0.01)
    assert [r["bytes"] for r in rows if r["op"] == "all_reduce"] == [2**16, 2**18, 2**20]


def test_the_comparison_runs_under_the_real_torchrun_cli():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "helpers.run", "sharding.compare",
         "--steps", "1", "--model", "wide-32x2", "--batch-size", "4"],
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary["p"] == 2 and summary["n_params"] == sum(p.numel() for p in helpers.models.build("wide-32x2").parameters())



# --- Clocks ---------------------------------------------------------------------------------

def test_every_step_time_waits_for_the_ranks_device(monkeypatch):
    """A GPU runs its kernels after the host has queued them: each clock read must wait for the
    rank's device first (``Timeline`` calls ``devices.sync``), or it times the queueing."""
    waited = []
    monkeypatch.setattr(devices, "sync", lambda device: waited.append(device))
    r = fsdp.checkpointing(rounds=1, batch_size=8, width=32, depth=4)  # a plain process: a group of one
    assert len(waited) == 2 * 2 * 3  # rounds (a warm-up, then 1) x modes x (start, mid, end)
    assert set(waited) == {torch.device("cpu") if r["backend"] == "gloo" else torch.device("cuda", 0)}
    waited.clear()
    fsdp.reshard(steps=2, batch_size=4, width=32, depth=2)
    assert len(waited) == 2 * 2 * 2  # settings x steps x (start, end)


def test_the_chapters_recipes_read_the_clock_only_on_a_timeline():
    import ast
    from pathlib import Path
    recipes = Path(fsdp.__file__).parent
    names = ("fsdp", "sharding", "zero", "traffic", "model_parallel_training", "tensor_parallel", "tensor_parallel_2d")
    for name in names:
        tree = ast.parse((recipes / f"{name}.py").read_text())
        clocks = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and n.attr in ("perf_counter", "time", "monotonic") and ast.unparse(n.value) == "time"]
        assert not clocks, f"{name}.py reads time.* at lines {clocks}: use training.Timeline(ctx.device).now()"

"""Chapter 8.1 (the transformer's bill): the saved-tensor accounting, the FLOP count and the parameters
of a tiny GPT against theory.transformer; the profiler's traces merged from a real 2-rank run; kineto's
stray lines silenced; the matmul-peak probe and the trace merge's interval arithmetic."""
import gzip
import json
import subprocess
import sys

import pytest
import torch

import helpers
from helpers import gpt
from helpers.analysis import timelines, traces
from helpers.analysis import transformer as bill
from helpers.machine import Machine
from helpers.probes import transformer as probe
from helpers.recipes import transformer as tr
from helpers.theory import transformer as theory


def _tiny(batch=2, seed=0):
    torch.manual_seed(seed)
    model = gpt.build("gpt-tiny")
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, model.cfg.vocab, (batch, model.cfg.seq), generator=g)
    y = torch.randint(0, model.cfg.vocab, (batch, model.cfg.seq), generator=g)
    return model, x, y


# --- What the GPT saves, term by term --------------------------------------------------------

def test_every_saved_term_of_a_layer_is_the_flash_formula_exactly():
    model, x, y = _tiny(batch=3)
    saved = bill.saved_terms(model, x, y)
    assert set(saved) == {str(i) for i in range(model.cfg.layers)} | {"outside"}
    measured = bill.layer_terms(saved)
    formula = theory.activation_terms(bill.shape_of(model.cfg), 3, bytes_per_value=4, dropout=False,
                                      attention="flash", norm_stats=True)
    assert measured == formula, bill.term_rows(measured, formula)
    assert bill.attention_kernel(model, x) == "ScaledDotProductFlashAttentionForCpu"


def test_saved_terms_count_each_storage_once_and_no_parameter():
    model, x, y = _tiny()
    saved = bill.saved_terms(model, x, y)
    total = sum(sum(v.values()) for v in saved.values())
    # the same forward through measure's plain count (each storage once, parameters left out)
    from helpers.measure import saved_activation_bytes
    plain = saved_activation_bytes(model, lambda: model(x, y))["activations"]
    assert total == plain
    sbh = x.numel() * model.cfg.hidden
    assert bill.layer_terms(saved)["QKV input"] == 4 * sbh  # read by wq, wk and wv: one storage


def test_layer_terms_refuses_layers_that_differ():
    with pytest.raises(ValueError, match="different terms"):
        bill.layer_terms({"0": {"V": 1}, "1": {"V": 2}, "outside": {}})


def test_a_materialized_attention_is_seen_as_s_by_s_scores():
    """With dropout the CPU runs SDPA's math path: the s x s softmax output appears, and is named so."""
    import dataclasses
    torch.manual_seed(0)
    cfg = dataclasses.replace(gpt.CONFIGS["gpt-tiny"], dropout=0.1)
    model, b = gpt.build(cfg), 2
    x = torch.randint(0, cfg.vocab, (b, cfg.seq))
    layer = bill.saved_terms(model, x, x)["0"]
    assert layer["softmax output"] >= 4 * cfg.heads * cfg.seq**2 * b and "Q and K" not in layer


# --- FLOPs and parameters ------------------------------------------------------------------

def test_counted_flops_are_the_formula_with_the_kernels_recompute():
    model, x, y = _tiny(batch=2)
    counted = bill.count_flops(model, x, y)
    shape = bill.shape_of(model.cfg)
    plain, hardware = theory.flops_terms(shape, 2), bill.hardware_flops(shape, 2)
    assert counted["forward"] == plain["forward"] == hardware["forward"]
    assert counted["backward"] == hardware["backward"] > plain["backward"]
    # the recompute is q kᵀ once more: 2 b s² h per layer
    c = model.cfg
    assert hardware["backward"] - plain["backward"] == 2 * 2 * c.seq**2 * c.hidden * c.layers
    assert "_scaled_dot_product_flash_attention_for_cpu_backward" in counted["ops"]


def test_without_the_cpu_kernels_formula_torch_counts_no_attention():
    """Why count_flops registers the CPU's kernel: torch 2.14's counter knows only the GPU's."""
    from torch.utils.flop_counter import FlopCounterMode
    model, x, y = _tiny()
    with FlopCounterMode(display=False) as plain:
        model(x, y)
    assert plain.get_total_flops() < bill.count_flops(model, x, y)["forward"]


@pytest.mark.parametrize("name", sorted(gpt.CONFIGS))
def test_parameters_are_the_closed_form_exactly(name):
    model = gpt.build(name)
    c = model.cfg
    assert bill.parameters(model) == theory.parameter_count(bill.shape_of(c))
    assert bill.parameters(model) == round(theory.narayanan_parameters(c.layers, c.hidden, c.vocab, c.seq)) + 2 * c.hidden


# --- The profiler ------------------------------------------------------------------------

PROFILE = """
import os, sys, torch
from torch.profiler import profile, ProfilerActivity
from helpers.recipes import transformer as tr
if sys.argv[1] == "quiet":
    tr.quiet_kineto(torch.device("cpu"))
print("level", os.environ.get("KINETO_LOG_LEVEL"), flush=True)
with profile(activities=[ProfilerActivity.CPU]):
    torch.ones(4) @ torch.ones(4)
"""


def _profile_stderr(mode: str, env_level: str | None = None) -> tuple[str, str]:
    import os
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    if env_level:
        env["KINETO_LOG_LEVEL"] = env_level
    done = subprocess.run([sys.executable, "-c", PROFILE, mode], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_kineto_says_nothing_on_a_cpu_rank_once_quieted():
    out, quiet = _profile_stderr("quiet")
    assert "level 6" in out and quiet.strip() == "", quiet
    _, loud = _profile_stderr("loud")
    # where kineto does speak (this machine: a CUDA build with no driver), every line is its own log
    assert all(line.split(":", 1)[0] in ("USDT", "ERROR", "WARNING", "STAGE", "INFO") for line in loud.splitlines()), loud


def test_a_level_the_reader_set_is_kept():
    out, _ = _profile_stderr("quiet", env_level="3")
    assert "level 3" in out


def test_a_real_profile_merges_into_one_timeline_per_rank(tmp_path):
    ranks = helpers.launch(tr.profile_steps, nprocs=2, out_dir=str(tmp_path), config="gpt-tiny", steps=2, warmup=1,
                           batch=2, timeout=300)
    for r in ranks:
        path = tmp_path / f"trace{r['rank']}.json.gz"
        assert r["trace"] == str(path)
        with gzip.open(path, "rt") as f:
            assert json.load(f)["traceEvents"]
        tl = traces.rank_timeline(traces.load(path), r)
        assert [p[0] for p in tl["phases"]] == list(tr.PHASES) * 2
        assert tl["all_reduce"] and r["main_tid"] not in tl["all_reduce_threads"]
        rows = traces.phase_check(r, tl)
        assert len(rows) == 6
        assert all(row["starts_after"] > -1e-3 and row["ends_before"] > -1e-3 for row in rows), rows
        s = traces.summary(tl)
        assert s["compute"] + s["idle"] == pytest.approx(s["window"])
        assert 0 <= s["all_reduce under compute"] <= s["all_reduce"]


def test_clock_marks_map_a_stepped_profiler_clock_onto_perf_counter():
    # the profiler's clock 7 s off perf_counter and 1% fast (a wall-clock step inside its own fit)
    def trace_us(perf_s):
        return (7.0 + 1.01 * perf_s) * 1e6 - 5e6  # after baseTimeNanoseconds, 5 s
    def event(name, a, b, tid=1):
        return {"ph": "X", "name": name, "tid": tid, "ts": trace_us(a), "dur": trace_us(b) - trace_us(a)}
    marks = {"start": [("clock:start0", 0.9, 1.3), ("clock:start1", 1.4, 1.4002)],
             "end": [("clock:end0", 3.0, 3.0002)]}
    trace = {"baseTimeNanoseconds": 5e9, "traceEvents": [
        event("clock:start0", 1.0, 1.2), event("clock:start1", 1.4001, 1.4001),
        event("phase:forward", 2.0, 2.5), event("clock:end0", 3.0001, 3.0001)]}
    result = {"rank": 0, "main_tid": 1, "spans": [("forward", 0, 2.0 - 1e-5, 2.5 + 1e-5)], "clock_marks": marks}
    tl = traces.rank_timeline(trace, result)
    (_, start, end), = tl["phases"]
    assert start == pytest.approx(2.0, abs=1e-9) and end == pytest.approx(2.5, abs=1e-9)
    row, = traces.phase_check(result, tl)
    assert 0 < row["starts_after"] < 2e-5 and 0 < row["ends_before"] < 2e-5


def test_intervals_merge_and_gaps():
    assert timelines.merge([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert traces.gaps([(0, 2), (3, 4)], -1, 5) == [(-1, 0), (2, 3), (4, 5)]
    assert traces.gaps([(0, 10)], 1, 2) == []


def test_phase_check_refuses_mismatched_phases():
    with pytest.raises(ValueError, match="different phases"):
        traces.phase_check({"spans": [("forward", 0, 0.0, 1.0)]}, {"phases": [("backward", 0.1, 0.9)]})


# --- The peak -------------------------------------------------------------------------------

def test_matmul_peak_is_a_rate_and_refuses_bad_sizes():
    assert probe.matmul_peak(torch.float32, n=128, repeats=2, threads=1) > 1e6
    with pytest.raises(ValueError):
        probe.matmul_peak(n=0)


def test_bfloat16_is_measured_only_where_it_runs_natively():
    cpu = torch.device("cpu")
    assert probe.peak_dtypes(Machine(cores=2), cpu) == [torch.float32]
    assert probe.peak_dtypes(Machine(cores=2, cpu_flags=frozenset({"avx512_bf16"})), cpu) == [torch.float32, torch.bfloat16]
    assert probe.peak_dtypes(Machine(cores=2, gpus=("H100",)), torch.device("cuda", 0)) == [torch.float32, torch.bfloat16]

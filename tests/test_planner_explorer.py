"""The planner's explorer (8.5): planner_theory.js against helpers.theory.planner, under node, and the
explorer's readout against Python's.

Every price field (memory by kind, time by part, fits and why not, MFU) must come out equal to the
last bit over a grid of models (GPT and Llama shapes, grouped-query attention, gated and MoE MLPs,
float32 with SGD, dropout, the norms' statistics), clusters and layouts (every ZeRO stage and
recomputation, interleaving, context and expert parallelism, overlap or not, inputs kept whole);
every refusal in the same words; every plan in the same order, ties included. The explorer's page
and controls are tests/test_explorers.py's (EXPLORERS["planner"]).
"""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict, replace

import pytest
from test_explorers import node

from helpers import widgets
from helpers.theory import planner
from helpers.theory.planner import Layout, published
from helpers.widgets import planner as explorer_py, shell

JS = shell.script("theory.js") + "\n" + shell.script("planner_theory.js")
GIB = 2**30

MODELS = {
    "GPT 1.7B (Table 1)": published.model_of(published.TABLE_1[0]),
    "GPT, no dropout": planner.Model(layers=12, hidden=1024, heads=16, seq=1024, vocab=50304),
    "Llama-like, GQA, SwiGLU": planner.Model(layers=16, hidden=2048, heads=32, kv_heads=8, mlp_hidden=5632, gated=True,
                                             seq=2048, vocab=32000, tied_embeddings=False, learned_positions=False,
                                             biases=False),
    "MoE 8 x top-2": planner.Model(layers=8, hidden=1024, heads=16, kv_heads=4, mlp_hidden=2816, gated=True, experts=8,
                                   top_k=2, seq=1024, vocab=32000, biases=False),
    "8.4's run": planner.Model(layers=4, hidden=64, heads=4, seq=64, vocab=256, tied_embeddings=False, value_bytes=4,
                               optimizer="sgd-momentum", mixed=False, norm_stats=True),
}
CLUSTERS = {
    "Selene, 16": published.selene(16),
    "one node of 8, slow links": planner.Cluster(8, 8, 24 * GIB, 100e12, 50e9, 12.5e9, 2e-6, 20e-6, 0.4, 1 * GIB),
    "4 GPUs a node, 32": planner.Cluster(32, 4, 40 * GIB, 312e12, 150e9, 25e9, 5e-6, 10e-6, 0.55),
}
MAKE_JS = "const m = theory.plannerModel(c.model), cl = theory.plannerCluster(c.cluster);"


def _case(model, cluster, **extra):
    return {"model": asdict(model), "cluster": asdict(cluster), **extra}


def _priced(p: planner.Priced) -> dict:
    return {"layout": asdict(p.layout), **{k: getattr(p, k) for k in (
        "fits", "why_not", "memory_bytes", "memory", "step_s", "time", "micro_batches", "tokens_per_s",
        "hardware_flops", "mfu")}}


def _layouts(gpus: int) -> list[Layout]:
    """Every mesh of ``gpus`` from small degrees, at every setting; (sp, flash, overlap, whole_inputs,
    end_chunks, cp_ring) three ways."""
    out = []
    for dp, tp, pp, cp, ep in itertools.product((1, 2, 4), (1, 2), (1, 2, 3), (1, 2), (1, 2)):
        if dp * tp * pp * cp != gpus:
            continue
        for zero, recompute, b, v, (sp, flash, overlap, whole, ends, ring) in itertools.product(
                (0, 1, 2, 3), planner.RECOMPUTE, (1, 2), (1, 2),
                ((True, True, True, True, False, True), (True, False, False, False, True, True),
                 (False, True, False, False, False, False))):
            out.append(Layout(dp, tp, pp, cp, ep, zero, recompute, b, v, sp and tp > 1, flash, overlap, whole, ends,
                              ring))
    return out


def _python_price(model, cluster, layout, tokens):
    try:
        return _priced(planner.price(model, cluster, layout, tokens))
    except ValueError as e:
        return {"error": str(e)}


@pytest.mark.parametrize("gpus", [8, 12])
@pytest.mark.parametrize("model", MODELS, ids=str)
def test_price_and_check_equal_pythons_to_the_last_bit(model, gpus):
    m = MODELS[model]
    # 2 or 3 nodes; the attention core at its own fractions of peak, materialized and fused
    cluster = planner.Cluster(gpus, 4, 24 * GIB, 100e12, 150e9, 25e9, 5e-6, 10e-6, 0.45, GIB, 0.2, 0.3)
    tokens = 16 * m.seq
    layouts = _layouts(gpus)
    cases = [_case(m, cluster, layout=asdict(ly), tokens=tokens) for ly in layouts]
    js = node(f"c => {{ {MAKE_JS} const ly = theory.plannerLayout(c.layout);"
              " return {check: theory.plannerCheck(m, cl, ly, c.tokens),"
              " price: theory.plannerPrice(m, cl, ly, c.tokens)}; }",
              cases, JS)
    assert len(layouts) > 500
    priced = 0
    for ly, out in zip(layouts, js):
        py = _python_price(m, cluster, ly, tokens)
        if "error" in py:  # the layout does not divide: the same words, from check
            assert out == py and py["error"].endswith(planner.check(m, cluster, ly, tokens)), ly
        else:
            assert out == {"check": "", "price": py}, ly
            priced += 1
    assert priced > 100


@pytest.mark.parametrize("cluster", CLUSTERS, ids=str)
def test_plan_equals_pythons_order_ties_included(cluster):
    c = CLUSTERS[cluster]
    cases, expected = [], []
    for name in ("GPT 1.7B (Table 1)", "Llama-like, GQA, SwiGLU", "MoE 8 x top-2"):
        m = MODELS[name]
        tokens = 64 * m.seq
        cases.append(_case(m, c, tokens=tokens))
        expected.append([_priced(p) for p in planner.plan(m, c, tokens)])
    js = node(f"c => {{ {MAKE_JS} return theory.plannerPlan(m, cl, c.tokens); }}", cases, JS)
    assert all(expected), "each case must fit somewhere, or the order is not tested"
    assert js == expected


def test_a_published_plan_and_a_plan_where_nothing_fits():
    row = published.TABLE_1[6]  # the chapter's example: 145.6B on 1,536 GPUs
    m, c, tokens = published.model_of(row), published.selene(row[6]), row[7] * published.SEQ
    tiny = replace(published.selene(8), memory_bytes=8 * GIB)
    js = node(f"c => {{ {MAKE_JS} return theory.plannerPlan(m, cl, c.tokens, {{top: 10}}); }}",
              [_case(m, c, tokens=tokens), _case(m, tiny, tokens=64 * published.SEQ)], JS)
    assert js == [[_priced(p) for p in planner.plan(m, c, tokens, top=10)], []]
    assert planner.plan(m, tiny, 64 * published.SEQ) == []


def test_models_and_clusters_are_refused_in_pythons_words():
    bad = [({"layers": 2, "hidden": 100, "heads": 3, "seq": 8, "vocab": 16}, None),
           ({"layers": 2, "hidden": 96, "heads": 12, "kv_heads": 5, "seq": 8, "vocab": 16}, None),
           ({"layers": 2, "hidden": 96, "heads": 12, "experts": 2, "top_k": 4, "seq": 8, "vocab": 16}, None),
           (None, {"gpus": 12, "gpus_per_node": 8})]
    said = node("c => { if (c.model) theory.plannerModel(c.model); else theory.plannerCluster(c.cluster); "
                "return 'no'; }",
                [{"model": m, "cluster": cl} for m, cl in bad], JS)
    for (m, cl), js in zip(bad, said):
        with pytest.raises(ValueError) as e:
            planner.Model(**m) if m else planner.Cluster(**{**asdict(published.selene(8)), **cl})
        assert js == {"error": str(e.value)}


# --- the explorer ------------------------------------------------------------------------------

SETTINGS = [{}, {"gpus": 64, "layers": 24, "hidden": 2048, "batch": 512},
            {"gpus": 32, "hidden": 4096, "layers": 32, "q_per_kv": 4, "mlp_ratio": 3.5, "gated": True,
             "llama_style": True, "seq": 8192, "vocab": 128256, "batch": 256, "memory_gib": 141, "peak_tflops": 989},
            {"gpus": 16, "layers": 16, "hidden": 2048, "moe": "8 experts, top-2", "batch": 256, "inter_gbps": 12.5},
            {"gpus": 8, "memory_gib": 16},  # nothing fits
            {"gpus": 8, "layers": 2, "hidden": 512, "head_dim": 64, "batch": 128}]  # dp 8 ties with dp 4 x cp 2


def test_the_readout_is_pythons_for_every_setting():
    values = [{**explorer_py.PLANNER_DEFAULTS, **s} for s in SETTINGS]
    data = widgets.planner_explorer().page().data
    script = shell.script("shell.js") + shell.script("planner.js") + f"\nconst DATA = {json.dumps(data)};\n"
    js = node(script + "v => { const [m, c, t] = setting(v, DATA); "
                       "return readout(v, DATA, theory.plannerPlan(m, c, t)); }",
              values, JS)
    assert js == [explorer_py.readout_html(v) for v in values]
    assert "No mesh of 8 GPUs fits" in js[4] and "takes as long" in js[5]


def test_the_explorer_opens_on_the_chapters_example_and_refuses_bad_input():
    e = widgets.planner_explorer()
    row = published.TABLE_1[6]
    model, cluster, tokens = explorer_py.setting(e.values)
    assert (model.layers, model.hidden, model.heads, cluster.gpus, tokens) == (row[3], row[2], row[1], row[6],
                                                                               row[7] * published.SEQ)
    assert cluster == published.selene(row[6])
    with pytest.raises(TypeError, match="planner_explorer takes"):
        widgets.planner_explorer(gpu=8)
    with pytest.raises(ValueError, match="is not one of"):
        widgets.planner_explorer(gpus=7)
    with pytest.raises(ValueError, match="outside the slider's 0.2-0.8"):
        widgets.planner_explorer(efficiency=0.95)
    with pytest.raises(ValueError, match="head size \\(96\\) does not divide hidden \\(1024\\)"):
        widgets.planner_explorer(hidden=1024, head_dim=96)
    said = node(shell.script("planner.js") + f"\nv => setting(v, {json.dumps(e.page().data)})",
                [{**e.values, "hidden": 1024, "head_dim": 96}], JS)
    assert said == [{"error": "the head size (96) does not divide hidden (1024)"}]


def test_a_setting_that_cannot_be_planned_says_why_and_still_follows_every_control():
    """A head size that does not divide hidden: the reason, beside the setting, which each control changes."""
    e = widgets.planner_explorer()
    bad = {**e.values, "hidden": 25600, "head_dim": 256, "q_per_kv": 16}  # 100 heads, not in groups of 16
    cases = [bad, {**bad, "moe": "8 experts, top-2"}, {**bad, "gated": True}, {**bad, "llama_style": True}]
    said = node(shell.script("shell.js") + shell.script("planner.js") + f"\nv => answer(v, {json.dumps(e.page().data)})",
                cases, JS)
    with pytest.raises(ValueError) as why:
        explorer_py.setting(bad)
    assert all(s[1] == [] and s[0].startswith("<b>Cannot plan ") and s[0].endswith(f": {why.value}.") for s in said)
    assert len({s[0] for s in said}) == len(cases)

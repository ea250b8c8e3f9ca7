"""The explorers' JavaScript against helpers.theory, under node; and each explorer's HTML.

``helpers/widgets/theory.js`` mirrors the formulas the explorers need (Amdahl and
Gustafson, strategy_memory and advise's search with its verdict, diagnose with its advice
and card, predict_step, theory.transformer's bill). Run over grids of inputs, it must give what helpers.theory and helpers.widgets
give: the same strategy, pp, dp and bytes, the same step, speedup, bound and advice, the
same sentences. Then each explorer's own script runs on a fake page (tests/fake_dom.js):
every control must change the readout.
"""
import base64
import itertools
import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from helpers import theory, widgets
from helpers.widgets import shell

NODE = shell.node()  # the venv's; a check that cannot run is a failure, not a skip
FAKE_DOM = Path(__file__).with_name("fake_dom.js")

# Runs FN over input.cases with theory.js's `theory` in scope; an exception becomes {error}.
RUNNER = r"""
const fs = require("fs"), vm = require("vm");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const theory = vm.runInContext(input.theory + "\ntheory;", vm.createContext({}));
const fn = eval(input.fn);
const out = input.cases.map(c => { try { return fn(c); } catch (e) { return {error: e.message}; } });
process.stdout.write(JSON.stringify(out));
"""


def node(fn: str, cases: list, theory_js: str | None = None) -> list:
    payload = json.dumps({"theory": theory_js or shell.script("theory.js"), "fn": fn, "cases": cases})
    done = subprocess.run([NODE, "-e", RUNNER], input=payload, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- the formulas ----------------------------------------------------------------------------

def test_amdahl_and_gustafson():
    cases = [[p, a] for p in [1, 2, 3, 7, 8, 100, 1024, 1e6] for a in [0.0, 0.001, 0.037, 0.1, 0.25, 0.5, 1.0]]
    js = node("([p, a]) => [theory.amdahl(p, a), theory.gustafson(p, a)]", cases)
    py = [[float(theory.amdahl(p, a)), float(theory.gustafson(p, a))] for p, a in cases]
    assert js == py


def test_python_number_formats():
    """theory.fixed is f"{x:.Nf}" / f"{x:,.Nf}" (ties to even), theory.g is f"{x:g}" on the explorers' values."""
    values = [0.0, -0.0, 0.125, 0.375, 2.5, 3.5, 0.05, 1.005, 999.95, 1234567.25, 1e-7, 2.675, 339.6123,
              -0.004, -1234.5, 1 / 3, 2**40 / 3, 5e15 + 0.5]
    cases = [[v, d, c] for v in values for d in (0, 1, 2, 3) for c in (False, True)]
    js = node("([v, d, c]) => theory.fixed(v, d, c)", cases)
    assert js == [format(v, f"{',' if c else ''}.{d}f") for v, d, c in cases]
    gs = [16, 24, 40, 48, 80, 96, 141, 192, 80.0, 12.5, 0.25]
    assert node("v => theory.g(v)", gs) == [f"{v:g}" for v in gs]


FIT_GRID = list(itertools.product(widgets.GPT3_MODELS, theory.OPTIMIZER_STATES, theory.PRECISIONS,
                                  widgets.fit.BATCHES, widgets.fit.DEVICE_GIB, widgets.fit.DEVICES))


def test_advise_and_verdict():
    """Every setting the fit explorer offers: theory.js's advise and verdict equal Python's, byte for byte."""
    data = widgets.fit_data()
    cases = [[data["models"][m][o][p], b, g * widgets.GIB, d, g] for m, o, p, b, g, d in FIT_GRID]
    js = node("([m, b, bytes, d, g]) => { const a = theory.advise(m.states, m.act, b, bytes, d); "
              "return [a, theory.verdict(a, g)]; }", cases)
    strategies = set()
    for (m, o, p, b, g, d), (advice, text) in zip(FIT_GRID, js):
        want = widgets.fit_advice(m, b, g, d, o, p)
        got = (advice["fits_one_device"], advice["strategy"], advice["pp"], advice["dp"])
        assert got == (want.fits_one_device, want.strategy, want.pp, want.dp), (m, o, p, b, g, d)
        assert list(advice["per_device"]) == list(want.per_device), (m, o, p, b, g, d)
        for name, kinds in want.per_device.items():
            assert list(advice["per_device"][name].items()) == list(kinds.items()), (m, o, p, b, g, d, name)
        assert text == widgets.verdict(want, g), (m, o, p, b, g, d)
        strategies.add(want.strategy)
    assert strategies == {"DDP", "pipeline", "hybrid", "one device", None}  # the grid reaches every branch


DIAGNOSE_GRID = list(itertools.product(
    [1_000, 2_917_386, 10**9],         # parameters
    [1, 8, 128, 1024],                 # per-rank batch
    [1e-6, 3.7e-5],                    # seconds per sample
    [1, 2, 8, 1024],                   # ranks
    [1e-6, 2.5e-4],                    # step latency
    [1e-10, 3e-9],                     # seconds per byte
    [0.0, 0.01],                       # overlappable
    [0.0, 1.3e-3]))                    # t_fixed


def test_diagnose_and_its_card():
    js = node("(a) => { const d = theory.diagnose(...a); return [d, theory.diagnosisHtml(d, a[3])]; }",
              [list(c) for c in DIAGNOSE_GRID])
    bounds, lengths = set(), set()
    for (n, b, t, p, lat, spb, over, fixed), (d, card) in zip(DIAGNOSE_GRID, js):
        want = theory.diagnose(n, b, t, p, lat, spb, overlappable=over, t_fixed=fixed)
        for field in ("t_compute", "t_comm", "t_latency", "step", "speedup", "bound", "advice"):
            assert d[field] == getattr(want, field), (field, n, b, t, p, lat, spb, over, fixed)
        assert card == widgets.diagnosis_html(want, p)
        bounds.add(want.bound)
        lengths.add(len(want.advice))
    assert bounds == {"compute", "communication"} and lengths == {1, 4, 5}  # every branch of the advice


def test_diagnose_refuses_what_python_refuses():
    bad = [[1000, 8, 0.0, 2, 1e-5, 1e-9], [1000, 0, 1e-5, 2, 1e-5, 1e-9], [1000, 8, 1e-5, 0, 1e-5, 1e-9]]
    for case, out in zip(bad, node("(a) => theory.diagnose(...a)", bad)):
        with pytest.raises(ValueError):
            theory.diagnose(*case)
        assert out["error"].startswith("diagnose needs a positive time per sample"), out


def test_a_changed_formula_is_caught():
    """The comparison can fail: theory.js with Amdahl's law slightly wrong does not equal Python's."""
    wrong = shell.script("theory.js").replace("1.0 / (alpha + (1.0 - alpha) / p)", "1.0 / (alpha + (1.0 - alpha) / (p + 1e-9))")
    assert wrong != shell.script("theory.js")
    cases = [[p, 0.1] for p in (2, 8, 64)]
    assert node("([p, a]) => theory.amdahl(p, a)", cases, wrong) != [float(theory.amdahl(p, a)) for p, a in cases]


# theory.transformer's shapes: 8.1's GPTs, an untied odd one, GPT-3 6.7B, 175B (Korthikanti's), the 1T of
# Narayanan's Table 1, and a grouped-query gated one (parameters and FLOPs only).
SHAPES = [dict(layers=2, hidden=64, heads=4, seq=64, vocab=256), dict(layers=4, hidden=128, heads=4, seq=128, vocab=256),
          dict(layers=3, hidden=48, heads=6, seq=33, vocab=97, tied=False),
          dict(layers=32, hidden=4096, heads=32, seq=2048, vocab=50304),
          dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200),
          dict(layers=128, hidden=25600, heads=160, seq=2048, vocab=51200)]
GQA = dict(layers=2, hidden=64, heads=8, seq=16, vocab=100, kv_heads=2, mlp_hidden=96, gated=True)


def test_transformer_parameters_flops_and_states():
    from helpers.theory import transformer as tf
    cases = [[sh, tp, b, r] for sh in SHAPES + [GQA] for tp in (1, 2, 8) for b in (1, 8) for r in tf.RECOMPUTE
             if sh["heads"] % tp == 0 and sh["hidden"] % tp == 0]
    js = node("([sh, tp, b, r]) => [theory.parameters(sh), theory.parametersPerRank(sh, tp), "
              "theory.flopsTerms(sh, b, r), theory.flopsPerToken(sh, r)]", cases)
    for (sh, tp, b, r), got in zip(cases, js):
        shape = tf.Shape(**sh)
        assert got[:2] == [tf.parameters(shape), tf.parameters_per_rank(shape, tp)], (sh, tp)
        assert got[2] == pytest.approx(tf.flops_terms(shape, b, r), rel=1e-15), (sh, b, r)  # 2^53 < some products
        assert got[3] == pytest.approx(tf.flops_per_token(shape, r), rel=1e-15)
    assert [c[0] for c in cases if c[1] == 8 and c[0]["layers"] == 96]  # the grid reaches TP 8 on GPT-3
    states = [[n, st, dp, mixed, acc] for n in (1000, 6.66e9, 3.33e9 + 0.5) for st in theory.STAGES
              for dp in (1, 4, 1024) for mixed in (True, False) for acc in (True, False)]
    js = node("(a) => theory.modelStates(...a)", states)
    assert js == [tf.model_states(n, st, dp, mixed, acc) for n, st, dp, mixed, acc in states]


def test_transformer_activations():
    from helpers.theory import transformer as tf
    grid = itertools.product(SHAPES, (1, 4), (1, 2, 8), (False, True), tf.RECOMPUTE, (2, 4), (False, True),
                             tf.ATTENTION, (False, True), (1, 2))
    cases = [list(c) for c in grid if c[0]["heads"] % c[2] == 0]
    js = node("([sh, b, tp, sp, r, v, d, a, ns, m]) => { const o = {tp, sp, recompute: r, bytesPerValue: v, "
              "dropout: d, attention: a, normStats: ns, maskBytes: m}; return [theory.activationTerms(sh, b, o), "
              "theory.outsideLayersTerms(sh, b, o), theory.modelActivationBytes(sh, b, o)]; }", cases)
    for (sh, b, tp, sp, r, v, d, a, ns, m), (terms, outside, total) in zip(cases, js):
        shape, o = tf.Shape(**sh), dict(tp=tp, sp=sp, bytes_per_value=v, dropout=d)
        want = tf.activation_terms(shape, b, recompute=r, attention=a, norm_stats=ns, mask_bytes=m, **o)
        assert list(terms.items()) == list(want.items()), (sh, b, tp, sp, r, v, d, a, ns, m)
        assert list(outside.items()) == list(tf.outside_layers_terms(shape, b, mask_bytes=m, **o).items())
        assert total == tf.model_activation_bytes(shape, b, recompute=r, attention=a, norm_stats=ns,
                                                  mask_bytes=m, **o)


def test_the_transformer_readout_and_its_refusals():
    from helpers.widgets.transformer import TRANSFORMER_DEFAULTS, readout_html
    script = shell.script("shell.js") + shell.script("transformer.js").replace("function draw", "function _unused_draw")
    settings = [{**TRANSFORMER_DEFAULTS, **sh, "micro_batch": b, "bytes_per_value": v, "stage": st, "dp": dp,
                 "tp": tp, "sp": sp, "recompute": r, "attention": a, "dropout": d, "fp32_grad_accum": acc}
                for sh in SHAPES[1:] for b in (1, 8) for v in (2, 4) for st in ("DDP", "ZeRO-3") for dp in (1, 8)
                for tp in (1, 2) for sp in (False, True) for r in ("none", "full") for a in ("materialized", "flash")
                for d, acc in ((True, False), (False, True)) if sh["heads"] % tp == 0]
    for s in settings:
        s.pop("tied", None)
    got = node(script + "\nv => readout(v)", settings)
    assert got == [readout_html(s) for s in settings]
    verdicts = {g.rsplit(": ", 1)[1] for g in got}
    assert verdicts == {"fits in 80 GB", "fits in 141 GB, not in 80 GB", "does not fit in 141 GB"}
    # a setting theory refuses is refused with theory's words
    bad = [{**TRANSFORMER_DEFAULTS, "heads": 48}, {**TRANSFORMER_DEFAULTS, "heads": 2, "tp": 4}]
    for s, out in zip(bad, node(script + "\nv => readout(v)", bad)):
        with pytest.raises(ValueError) as refused:
            widgets.transformer_explorer(**s)
        assert out == {"error": str(refused.value)}


# --- the explorers' pages --------------------------------------------------------------------

class Elements(HTMLParser):
    """Every element of an explorer's HTML as {tag, attrs, text, options}, in document order."""

    def __init__(self):
        super().__init__()
        self.elements, self.open = [], []

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": {k: ("" if v is None else v) for k, v in attrs}, "text": "", "options": []}
        if tag == "option" and self.open and self.open[-1]["tag"] == "select":
            self.open[-1]["options"].append({"value": el["attrs"]["value"], "selected": "selected" in el["attrs"]})
        self.elements.append(el)
        if tag not in ("input", "img", "br", "option"):
            self.open.append(el)

    def handle_endtag(self, tag):
        if any(el["tag"] == tag for el in self.open):
            while self.open.pop()["tag"] != tag:
                pass

    def handle_data(self, data):
        for el in self.open:
            el["text"] += data


# One machine as from_calibration gives it: this book's 2-core VM's fits, rounded.
MY_MACHINE = {"data": [2e-5, 6e-7], "forward": [1e-4, 1.4e-10], "backward": [2e-4, 2.9e-10],
              "optimizer": [1e-4, 1.2e-9], "contention": 1.15, "step_latency": 2.4e-4,
              "seconds_per_byte": 7.4e-10, "per_call": 1.3e-3, "wait": [0.0, 0.065]}
MACHINES = {"your machine": MY_MACHINE, **widgets.prediction.PRESETS}


def test_predict_step_and_its_readout():
    from helpers.widgets.prediction import machine_step, readout_html
    cases = [[name, n, G, p] for name in MACHINES for n in (10_000, 2_917_386, 10**8, 7 * 10**9)
             for G in (1, 64, 4096) for p in (1, 2, 8, 64)]
    js = node("""([name, n, G, p]) => {
        const m = MACHINES[name], ph = theory.computePhases(m, n, n, G / p);
        return theory.predictStep(ph, theory.ddpBuckets(4 * n), p, m, m.contention); }""".replace(
        "MACHINES", json.dumps(MACHINES)), cases)
    for (name, n, G, p), got in zip(cases, js):
        want = machine_step(MACHINES[name], n, G, p)
        assert got == {"p": p, "compute": want.compute, "comm": want.comm, "exposed": want.exposed,
                       "wait": want.wait, "step": want.step}, (name, n, G, p)
    assert [list(theory.ddp_buckets(b)) for b in (100, 2**20, 3 * 2**20, 60 * 2**20)] == node(
        "b => theory.ddpBuckets(b)", [100, 2**20, 3 * 2**20, 60 * 2**20])
    assert node("c => theory.predictStep({}, [1], 0, {}).p", [0]) == [{"error": "predict_step needs p >= 1 ranks, got 0"}]
    # the explorer's readout: prediction.js's readout() is readout_html()
    script = shell.script("prediction.js").replace("function draw", "function _unused_draw")
    readouts = node(script + "\n([n, G, p]) => readout(MACHINES, n, G, p)".replace("MACHINES", json.dumps(MACHINES)),
                    [[2_917_386, 4096, 2], [10**8, 64, 8]])
    assert readouts == [readout_html(MACHINES, 2_917_386, 4096, 2), readout_html(MACHINES, 10**8, 64, 8)]


EXPLORERS = {
    "amdahl": (lambda: widgets.amdahl_explorer(alpha=0.037, p=4),
               {"alpha": "range", "p": "range"}),
    "fit": (lambda: widgets.fit_explorer(),
            {"model": "select", "batch": "range", "device_gib": "range", "devices": "range",
             "optimizer": "select", "precision": "select"}),
    "slow_run": (lambda: widgets.slow_run_explorer(2_917_386, 128, 3.7e-5, 2.5e-5, 1.2e-9, p=2, t_fixed=1.3e-3),
                 {"n_params": "range", "per_rank_batch": "range", "t_per_sample": "range",
                  "seconds_per_byte": "range", "step_latency": "range", "p": "range", "overlap": "checkbox"}),
    "prediction": (lambda: widgets.PredictionExplorer(MACHINES, 2_917_386, 4096, p=2),
                   {"n_params": "range", "global_batch": "range", "p": "range"}),
    "transformer": (lambda: widgets.transformer_explorer(),
                    {"layers": "range", "hidden": "range", "heads": "range", "seq": "range", "micro_batch": "range",
                     "vocab": "range", "bytes_per_value": "range", "stage": "select", "dp": "range", "tp": "range",
                     "sp": "checkbox", "recompute": "select", "attention": "select", "dropout": "checkbox",
                     "fp32_grad_accum": "checkbox"}),
    "planner": (lambda: widgets.planner_explorer(),
                {"layers": "range", "hidden": "range", "head_dim": "range", "q_per_kv": "range", "mlp_ratio": "range",
                 "moe": "select", "gated": "checkbox", "llama_style": "checkbox", "seq": "range", "vocab": "range",
                 "batch": "range", "gpus": "range", "gpus_per_node": "range", "memory_gib": "range",
                 "peak_tflops": "range", "intra_gbps": "range", "inter_gbps": "range", "efficiency": "range"}),
}


def page_of(name):
    make, controls = EXPLORERS[name]
    explorer = make()
    parser = Elements()
    parser.feed(explorer._repr_html_())
    return explorer, parser.elements, controls


@pytest.mark.parametrize("name", EXPLORERS)
def test_page_has_controls_data_and_a_fallback(name):
    explorer, elements, controls = page_of(name)
    root = elements[0]
    assert root["tag"] == "div" and "explorer" in root["attrs"]["class"].split()
    assert root["attrs"]["data-explorer"] == name
    found = {e["attrs"]["data-key"]: e["attrs"].get("type", e["tag"]) for e in elements
             if e["tag"] in ("input", "select") and "data-key" in e["attrs"]}
    assert found == controls
    assert [e for e in elements if "readout" in e["attrs"].get("class", "").split()]
    data = next(e for e in elements if e["tag"] == "script" and e["attrs"].get("class") == "explorer-data")
    assert json.loads(data["text"]) == json.loads(json.dumps(explorer.page().data))
    imgs = [e for e in elements if e["tag"] == "img"]
    assert len(imgs) == 1 and len(imgs[0]["attrs"]["alt"]) > 20
    assert base64.b64decode(imgs[0]["attrs"]["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    noscript = next(e for e in elements if e["tag"] == "noscript")
    assert elements.index(noscript) + 1 == elements.index(imgs[0])  # the image is the no-JS fallback
    assert explorer._repr_png_()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", EXPLORERS)
def test_every_control_changes_the_readout(name):
    explorer, elements, controls = page_of(name)
    script = [e["text"] for e in elements if e["tag"] == "script" and not e["attrs"]][-1]
    # The timeout only guards against a hang: the planner's moves take 20 s alone here, and CI runs
    # this beside two notebook kernels on 2 cores (60 s was not enough there).
    done = subprocess.run([NODE, str(FAKE_DOM)], input=json.dumps({"elements": elements, "script": script}),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["first"] == explorer.page().readout  # the script's first draw repeats Python's answer
    assert out["svg"] > 500 and all(out["shown"])
    assert [m["key"] for m in out["moves"]] == list(controls)
    for move in out["moves"]:
        assert move["moved"] != out["first"], f"{name}: moving {move['key']} left the readout as it was"
        assert "could not draw" not in move["moved"], move
        assert move["back"] == out["first"] and move["svg"] > 500

"""How long the planner's explorer (chapter 8.5) takes to answer: one plan in node (what the browser
runs on every change) beside the same plan in Python, for a few settings, in one run.

The two must agree (tests/test_planner_explorer.py holds them equal to the last bit); this measures
only their speed, as the ratio Python / node, and the reader's wait: node's milliseconds a plan.

Writes bench/results/planner_explorer.md and prints it.

    python bench/planner_explorer.py
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict

import report
from helpers.theory import planner
from helpers.widgets import planner as explorer, shell

SETTINGS = {"the chapter's 145.6B GPT on 1,536 A100s (the default)": {},
            "1T GPT on 3,072 A100s": {"layers": 128, "hidden": 25600, "head_dim": 160, "gpus": 3072, "batch": 3072},
            "Llama-style 70B, GQA 8:1, SwiGLU, on 1,024 H100s": {
                "layers": 80, "hidden": 8192, "q_per_kv": 8, "mlp_ratio": 3.5, "gated": True, "llama_style": True,
                "seq": 8192, "vocab": 128256, "batch": 1024, "gpus": 1024, "peak_tflops": 989, "intra_gbps": 450,
                "inter_gbps": 50},
            "MoE 64 experts top-8 on 256 H100s": {"layers": 32, "hidden": 4096, "moe": "64 experts, top-8",
                                                  "mlp_ratio": 2, "gpus": 256, "batch": 1024, "peak_tflops": 989}}
REPEATS = 3
# node: the explorer's own scripts, then each setting planned REPEATS times; the best time of each
NODE = r"""
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const theory = require("vm").runInContext(input.js + "\ntheory;", require("vm").createContext({}));
const out = input.cases.map(([m, c, tokens]) => {
  let best = Infinity, n = 0;
  for (let i = 0; i < input.repeats; i++) {
    const t0 = process.hrtime.bigint();
    n = theory.plannerPlan(theory.plannerModel(m), theory.plannerCluster(c), tokens).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return [best, n];
});
process.stdout.write(JSON.stringify(out));
"""


def python_plan(model, cluster, tokens) -> tuple[float, int]:
    best = float("inf")
    for _ in range(REPEATS):
        planner.model._MEMO.clear()  # as the browser starts each plan afresh
        t0 = time.perf_counter()
        n = len(planner.plan(model, cluster, tokens))
        best = min(best, time.perf_counter() - t0)
    return best, n


def main() -> None:
    node = shell.node()
    cases = [explorer.setting({**explorer.PLANNER_DEFAULTS, **s}) for s in SETTINGS.values()]
    payload = {"js": shell.script("theory.js") + shell.script("planner_theory.js"), "repeats": REPEATS,
               "cases": [[asdict(m), asdict(c), t] for m, c, t in cases]}
    done = subprocess.run([node, "-e", NODE], input=json.dumps(payload), capture_output=True, text=True, check=True)
    in_node = json.loads(done.stdout)
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    lines = [f"Machine: {report.machine_line()}; node {version}.",
             f"Best of {REPEATS}, one plan each (every mesh, each at its fastest settings).", "",
             "| setting | meshes that fit | node (ms) | Python (ms) | Python / node |",
             "| --- | --- | --- | --- | --- |"]
    for name, (m, c, t), (js_s, js_n) in zip(SETTINGS, cases, in_node):
        py_s, py_n = python_plan(m, c, t)
        assert js_n == py_n, (name, js_n, py_n)
        lines.append(f"| {name} | {py_n} | {js_s * 1e3:.0f} | {py_s * 1e3:.0f} | {py_s / js_s:.1f} |")
    print(report.write("planner_explorer", lines))


if __name__ == "__main__":
    main()

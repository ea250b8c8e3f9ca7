"""Plan your own run (chapter 8.5): your model and your cluster in, the planner's ranked layouts out.

The model (layers, hidden size, head size, query heads per KV head, MLP width, gated or not, GPT- or
Llama-style, mixture of experts, sequence, vocabulary) and the cluster (GPUs, GPUs a node, memory,
peak FLOP/s, the links in and across nodes, the matmuls' efficiency) and the global batch; out of
``theory.planner.plan``: how many meshes fit, the best with its step, MFU and memory, why it beats
the runner-up, the five best as a table and their steps by part as bars. The browser runs
``planner_theory.js`` (the port of theory.planner) on every change; ``readout_html`` is the same in
Python (tests/test_planner_explorer.py holds them equal). It opens on the chapter's example: the
145.6B GPT of Narayanan et al.'s Table 1 on 1,536 A100s of Selene.
"""
from __future__ import annotations

import html

from . import shell
from ..analysis.planner import RANKED_HEADER
from ..theory.planner import published

PLANNER_DEFAULTS = {"layers": 80, "hidden": 12288, "head_dim": 128, "q_per_kv": 1, "mlp_ratio": 4, "gated": False,
                    "llama_style": False, "moe": "dense", "seq": 2048, "vocab": 51200, "batch": 2304, "gpus": 1536,
                    "gpus_per_node": 8, "memory_gib": 80, "peak_tflops": 312, "intra_gbps": 300, "inter_gbps": 25,
                    "efficiency": published.MATMUL_EFFICIENCY}
OPTIONS = {"layers": [2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128],
           "hidden": [512, 1024, 2048, 2304, 3072, 4096, 5120, 6144, 8192, 12288, 16384, 20480, 25600],
           "head_dim": [64, 96, 128, 160, 256], "q_per_kv": [1, 2, 4, 8, 16], "mlp_ratio": [2, 2.5, 3, 3.5, 4, 8],
           "seq": [512, 1024, 2048, 4096, 8192, 16384, 32768], "vocab": [32000, 50304, 51200, 128256, 256000],
           "batch": [128, 256, 512, 1024, 1536, 2048, 2304, 3072, 4096, 8192],
           "gpus": [8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192],
           "gpus_per_node": [1, 2, 4, 8, 16],
           "memory_gib": [16, 24, 32, 40, 48, 80, 96, 141, 192], "peak_tflops": [125, 312, 400, 989, 1979, 2250],
           "intra_gbps": [25, 50, 150, 300, 450, 900], "inter_gbps": [12.5, 25, 50, 100]}
MOE = {"dense": (1, 1), "8 experts, top-2": (8, 2), "16 experts, top-4": (16, 4), "64 experts, top-8": (64, 8),
       "128 experts, top-8": (128, 8)}
PART_NAMES = {"compute": "compute", "bubble": "pipeline bubble", "tp": "tensor-parallel all-reduces",
              "cp": "context-parallel sends", "ep": "expert all-to-alls", "pp": "pipeline sends",
              "dp": "data-parallel collectives"}
EFFICIENCY = (0.2, 0.8, 0.01)  # the matmuls' efficiency slider: low, high, step
SHOWN = 5  # layouts in the table and the bars
GIB = 2**30


def fixed_cluster() -> dict:
    """What the controls leave as Selene has it (``published.selene``): latencies, reserved bytes, and
    the efficiency of attention that materializes its scores (the plans here use flash attention)."""
    c = published.selene(8)
    return {"intra_latency_s": c.intra_latency_s, "inter_latency_s": c.inter_latency_s,
            "reserved_bytes": c.reserved_bytes, "attention_efficiency": c.attention_efficiency}


def setting(v: dict):
    """(Model, Cluster, global batch in tokens) of one setting of the controls. Mirrored in planner.js."""
    from helpers.theory import planner
    experts, top_k = MOE[v["moe"]]
    if v["hidden"] % v["head_dim"]:
        raise ValueError(f"the head size ({v['head_dim']}) does not divide hidden ({v['hidden']})")
    heads, llama = v["hidden"] // v["head_dim"], v["llama_style"]
    if heads % v["q_per_kv"]:
        raise ValueError(f"{v['q_per_kv']} query heads per KV head do not divide the {heads} heads")
    model = planner.Model(layers=v["layers"], hidden=v["hidden"], heads=heads, seq=v["seq"], vocab=v["vocab"],
                          kv_heads=heads // v["q_per_kv"], mlp_hidden=round(v["hidden"] * v["mlp_ratio"]),
                          gated=v["gated"], experts=experts, top_k=top_k, tied_embeddings=not llama,
                          learned_positions=not llama, biases=not llama)
    cluster = planner.Cluster(gpus=v["gpus"], gpus_per_node=v["gpus_per_node"], memory_bytes=v["memory_gib"] * GIB,
                              peak_flops=v["peak_tflops"] * 1e12, intra_bandwidth=v["intra_gbps"] * 1e9,
                              inter_bandwidth=v["inter_gbps"] * 1e9, efficiency=v["efficiency"], **fixed_cluster())
    return model, cluster, v["batch"] * v["seq"]


def seconds(x: float) -> str:
    """A duration as the readout shows it. Mirrored in planner.js."""
    return f"{x:.2f} s" if x >= 1 else f"{x * 1e3:.1f} ms" if x >= 1e-3 else f"{x * 1e6:.0f} µs"


def mesh_name(ly) -> str:
    """``plots.planner.mesh_name``, with the settings the planner chose for the mesh."""
    from helpers.plots.planner import mesh_name as mesh
    chunks = f", {ly.virtual} chunks a GPU" if ly.virtual > 1 else ""
    return f"{mesh(ly)} (ZeRO-{ly.zero}, recomputation {ly.recompute}, micro-batch {ly.micro_batch}{chunks})"


def title(v: dict, model) -> str:
    moe = "" if v["moe"] == "dense" else f", {v['moe']}"
    return (f"{model.params() / 1e9:.1f}B parameters: {model.layers} layers, hidden {model.hidden}, "
            f"{model.heads} heads ({model.kv_heads} KV), MLP {model.mlp_hidden}{' gated' if model.gated else ''}{moe}, "
            f"{'Llama' if v['llama_style'] else 'GPT'}-style, sequence {model.seq}; {v['batch']:,} sequences a step on "
            f"{v['gpus']:,} GPUs ({v['gpus_per_node']} a node, {v['memory_gib']} GiB, {v['peak_tflops']} TFLOP/s "
            f"at {v['efficiency'] * 100:.0f}%)")


def why_best(ranked: list) -> str:
    """Why the first beats the second: the parts where the runner-up spends more, largest first."""
    if len(ranked) == 1:
        return "It is the only mesh that fits."
    a, b = ranked[0], ranked[1]
    gains = sorted(((k, b.time[k] - a.time[k]) for k in PART_NAMES if b.time[k] > a.time[k]), key=lambda kv: -kv[1])
    said = ", ".join(f"{PART_NAMES[k]} +{seconds(d)}" for k, d in gains[:3])
    if f"{a.step_s:.9g}" == f"{b.step_s:.9g}":
        return f"The runner-up, {mesh_name(b.layout)}, takes as long; the simpler mesh is ranked first."
    return f"The runner-up, {mesh_name(b.layout)}, takes {seconds(b.step_s - a.step_s)} longer: {said}."


def table_html(ranked: list) -> str:
    """The five best as ``analysis.planner.ranked_cells`` in ``book.html_table``, in small type."""
    from helpers.analysis.planner import ranked_cells
    from helpers.book import html_table
    return '<div style="font-size: 11px">' + html_table(*ranked_cells(ranked[:SHOWN])).data + "</div>"


def readout_html(v: dict, ranked: list | None = None) -> str:
    """The answer for one setting (``ranked``: its plan, if already made). Mirrored in planner.js."""
    from helpers.theory import planner
    model, cluster, tokens = setting(v)
    ranked = planner.plan(model, cluster, tokens) if ranked is None else ranked
    head = f"<b>{html.escape(title(v, model))}</b><br>"
    if not ranked:
        return head + (f"No mesh of {v['gpus']:,} GPUs fits this model in {v['memory_gib']} GiB a GPU at any "
                       "ZeRO stage, recomputation, micro-batch or interleaving the planner tries: give it more "
                       "memory or more GPUs.")
    best = ranked[0]
    return head + (f"{len(ranked)} meshes fit. The best, {mesh_name(best.layout)}, takes "
                   f"<b>{seconds(best.step_s)}</b> a step at {best.mfu * 100:.1f}% MFU in "
                   f"{best.memory_bytes / GIB:.1f} GiB a GPU. "
                   f"{why_best(ranked)}{table_html(ranked)}")


class PlannerExplorer(shell.Explorer):
    """Your model on your cluster: the planner's answer, and the five best layouts' steps by part."""

    name = "planner"
    theory = ("theory.js", "planner_theory.js")

    def __init__(self, **values):
        settings = self.settings("planner_explorer", PLANNER_DEFAULTS, values)
        for key, value in values.items():
            if key in OPTIONS and value not in OPTIONS[key]:
                raise ValueError(f"planner_explorer: {key} = {value!r} is not one of {OPTIONS[key]}")
        if "moe" in values and values["moe"] not in MOE:
            raise ValueError(f"planner_explorer: moe = {values['moe']!r} is not one of {list(MOE)}")
        if not EFFICIENCY[0] <= values.get("efficiency", EFFICIENCY[0]) <= EFFICIENCY[1]:
            raise ValueError(f"planner_explorer: efficiency = {values['efficiency']!r} is outside the slider's "
                             f"{EFFICIENCY[0]}-{EFFICIENCY[1]}")
        self.values = settings
        from helpers.theory import planner
        self.model, cluster, tokens = setting(self.values)  # what theory refuses is refused here, in its words
        self.ranked = planner.plan(self.model, cluster, tokens)

    def figure(self):
        from helpers.plots.planner import nothing_fits, step_breakdown
        if not self.ranked:
            return nothing_fits(title(self.values, self.model))
        return step_breakdown(self.ranked[:SHOWN], f"The planner's {min(SHOWN, len(self.ranked))} best layouts")

    def page(self) -> shell.Page:
        from matplotlib.colors import to_hex

        from helpers.plots.planner import PART_COLORS
        v = self.values
        c = {k: shell.choice(k, label, OPTIONS[k], v[k], unit=unit) for k, label, unit in (
            ("layers", "layers", ""), ("hidden", "hidden", ""), ("head_dim", "head size", ""),
            ("q_per_kv", "Q heads per KV head", ""), ("mlp_ratio", "MLP width", "x hidden"),
            ("seq", "sequence", ""), ("vocab", "vocabulary", ""), ("batch", "batch", "sequences"),
            ("gpus", "GPUs", ""), ("gpus_per_node", "GPUs a node", ""), ("memory_gib", "memory", "GiB"),
            ("peak_tflops", "peak", "TFLOP/s"), ("intra_gbps", "in a node", "GB/s"),
            ("inter_gbps", "across nodes", "GB/s"))}
        readout = readout_html(v, self.ranked)
        fixed = fixed_cluster()
        return shell.Page(
            controls=[c["layers"] + c["hidden"] + c["head_dim"],
                      c["q_per_kv"] + c["mlp_ratio"] + shell.select("moe", "MLP", list(MOE), v["moe"]),
                      shell.checkbox("gated", "gated MLP (SwiGLU)", v["gated"])
                      + shell.checkbox("llama_style", "Llama-style: RMSNorm, no biases, rotary, untied",
                                       v["llama_style"]),
                      c["seq"] + c["vocab"] + c["batch"],
                      c["gpus"] + c["gpus_per_node"] + c["memory_gib"],
                      c["peak_tflops"] + c["intra_gbps"],
                      c["inter_gbps"] + shell.slider("efficiency", "efficiency", *EFFICIENCY, v["efficiency"])],
            legend=(f"<small>Bandwidths per GPU per direction. Fixed as on Selene: latency "
                    f"{fixed['intra_latency_s'] * 1e6:g} µs in a node, {fixed['inter_latency_s'] * 1e6:g} µs across; "
                    f"{fixed['reserved_bytes'] / GIB:g} GiB a GPU reserved; bf16 with Adam; flash attention, "
                    "sequence parallelism and overlapped reductions.</small>"),
            readout=readout,
            view='<svg width="720" height="230" viewBox="0 0 720 230"></svg>',
            data={"defaults": fixed, "moe": {k: list(e) for k, e in MOE.items()}, "parts": PART_NAMES, "shown": SHOWN,
                  "ranked_header": RANKED_HEADER,
                  "colors": {k: to_hex(c) for k, c in PART_COLORS.items()}},
            alt=f"The planner's best layouts, each step by part, for {title(v, self.model)}. "
                + readout.split("<br>", 1)[1].split("<div", 1)[0].replace("<b>", "").replace("</b>", ""),
        )


def planner_explorer(**overrides) -> PlannerExplorer:
    """"Plan your own run" (see ``PlannerExplorer``); keyword arguments override ``PLANNER_DEFAULTS``, the
    setting it opens at (the 145.6B GPT on 1,536 A100s), each within the controls' ``OPTIONS``."""
    return PlannerExplorer(**overrides)

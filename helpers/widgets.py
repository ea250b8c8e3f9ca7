"""Interactive explorers (ipywidgets) for JupyterLab. In the static book each shows its default figure."""
from __future__ import annotations


# --- Does it fit? (chapter 2) -------------------------------------------------------------

# GPT-3's model family (Brown et al. 2020, table 2.1): layers, hidden size, heads; context 2048.
GPT3_MODELS = {"GPT-3 Small (125M)": (12, 768, 12), "GPT-3 XL (1.3B)": (24, 2048, 24),
               "GPT-3 6.7B": (32, 4096, 32), "GPT-3 13B": (40, 5140, 40), "GPT-3 175B": (96, 12288, 96)}
GIB = 2**30
FIT_DEFAULTS = {"model": "GPT-3 6.7B", "batch": 8, "device_gib": 80, "devices": 8, "optimizer": "adam",
                "precision": "autocast"}


def fit_case(model: str = "GPT-3 6.7B", batch: int = 8, device_gib: float = 80, devices: int = 8,
             optimizer: str = "adam", precision: str = "autocast", seq: int = 2048):
    """One setting of the explorer: (``theory.advise``'s answer, its figure, a sentence saying it)."""
    from helpers import plots, theory
    layers, hidden, heads = GPT3_MODELS[model]
    n_params = theory.transformer_params(layers, hidden, seq=seq)
    per_sample = theory.transformer_activation_bytes(1, seq, hidden, layers, heads, precision)
    advice = theory.advise(n_params, per_sample, batch, device_gib * GIB, devices, optimizer, precision)
    title = f"{model}: {batch} x {seq} tokens per step, {optimizer}, {precision}"
    return advice, plots.memory_bars(advice.per_device, device_gib * GIB, title), verdict(advice, device_gib)


def verdict(advice, device_gib: float) -> str:
    """``theory.advise``'s answer in words, with the bytes per device of the layout it picked."""
    def gib(layout):
        return f"{sum(layout.values()) / GIB:,.1f} GiB"
    one = advice.per_device["one device"]
    p = advice.pp * advice.dp
    if advice.fits_one_device:
        tail = f"; with {p} devices, DDP runs {p} replicas, each on 1/{p} of the batch." if p > 1 else "."
        return f"Fits on one device: {gib(one)} of {device_gib:g} GiB{tail}"
    head = f"Does not fit on one device ({gib(one)} > {device_gib:g} GiB). "
    states = {k: v for k, v in one.items() if k != "activations"}
    if advice.strategy is None:
        where = "With one device" if p == 1 else f"Not even split over all {p} devices"
        return head + (f"{where}: add devices, cut the batch per step (accumulate gradients), "
                       "or recompute activations.")
    if advice.strategy == "DDP":
        return head + f"DDP over {p} devices fits: each keeps all model states ({gib(states)}) but only 1/{p} of the activations."
    if advice.strategy == "pipeline":
        return head + f"Split the layers over all {p} devices (model/pipeline parallel): the states alone are {gib(states)}."
    name = f"hybrid, {advice.pp} stages x {advice.dp} replicas"
    return head + (f"Hybrid: {advice.pp} pipeline stages, times {advice.dp} data-parallel replicas: "
                   f"{gib(advice.per_device[name])} per device.")


def fit_explorer(**overrides):
    """"Does this model fit, and with which strategy?": controls for the model, batch, device memory and count.

    Shows the default setting's figure and verdict first, as plain outputs (what
    the static book keeps), then returns the live controls for JupyterLab.
    """
    import ipywidgets as w
    from IPython.display import display
    values = {**FIT_DEFAULTS, **overrides}
    _, fig, text = fit_case(**values)
    display(fig)
    print(text)
    controls = {
        "model": w.Dropdown(options=list(GPT3_MODELS), description="model"),
        "batch": w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], description="batch"),
        "device_gib": w.SelectionSlider(options=[16, 24, 40, 48, 80, 96, 141, 192], description="GiB/device"),
        "devices": w.SelectionSlider(options=[2**i for i in range(11)], description="devices"),
        "optimizer": w.Dropdown(options=["sgd", "sgd-momentum", "adam"], description="optimizer"),
        "precision": w.Dropdown(options=["fp32", "autocast", "master-weights"], description="precision"),
    }
    for key, control in controls.items():
        control.value = values[key]
    out = w.Output()

    def update(_=None):
        with out:
            out.clear_output(wait=True)
            _, live_fig, live_text = fit_case(**{k: c.value for k, c in controls.items()})
            display(live_fig)
            print(live_text)

    for control in controls.values():
        control.observe(update, "value")
    update()
    return w.VBox([w.HTML("<b>Move the controls; the figure below follows.</b>"),
                   w.HBox([w.VBox(list(controls.values())[:3]), w.VBox(list(controls.values())[3:])]), out])


# --- Chapter 4: speedup and communication -------------------------------------------------

_AMDAHL_JS = r"""
(function () {
  const root = document.getElementById("%(id)s");
  const aIn = root.querySelector("input.alpha"), pIn = root.querySelector("input.p");
  const svg = root.querySelector("svg"), out = root.querySelector(".readout");
  const W = 300, H = 220, M = {l: 42, r: 10, t: 18, b: 32}, PMAX = %(p_max)d;
  const amdahl = (p, a) => 1 / (a + (1 - a) / p), gustafson = (p, a) => p - a * (p - 1);
  const lx = p => M.l + Math.log2(p) / Math.log2(PMAX) * (W - M.l - M.r);
  const panel = (x0, title, ylab, ymap, series, ticks) => {
    let s = `<g transform="translate(${x0},0)"><text x="${W / 2}" y="12" font-size="11" text-anchor="middle">${title}</text>`;
    s += `<rect x="${M.l}" y="${M.t}" width="${W - M.l - M.r}" height="${H - M.t - M.b}" fill="none" stroke="#999"/>`;
    for (let k = 0; k <= Math.log2(PMAX); k += 2) {
      s += `<text x="${lx(2 ** k)}" y="${H - M.b + 12}" font-size="9" text-anchor="middle">${2 ** k}</text>`;
    }
    for (const [v, label] of ticks) {
      s += `<text x="${M.l - 3}" y="${ymap(v) + 3}" font-size="9" text-anchor="end">${label}</text>`;
      s += `<line x1="${M.l}" x2="${W - M.r}" y1="${ymap(v)}" y2="${ymap(v)}" stroke="#eee"/>`;
    }
    s += `<text x="${W / 2 + 15}" y="${H - 4}" font-size="10" text-anchor="middle">devices p</text>`;
    s += `<text transform="translate(10,${H / 2}) rotate(-90)" font-size="10" text-anchor="middle">${ylab}</text>`;
    for (const [f, color, dash] of series) {
      let d = "";
      for (let i = 0; i <= 120; i++) {
        const p = 2 ** (i / 120 * Math.log2(PMAX)), y = Math.max(M.t, Math.min(H - M.b, ymap(f(p))));
        d += (i ? "L" : "M") + lx(p).toFixed(1) + "," + y.toFixed(1);
      }
      s += `<path d="${d}" fill="none" stroke="${color}" stroke-width="2" stroke-dasharray="${dash}"/>`;
    }
    return s + "</g>";
  };
  function draw() {
    const a = parseFloat(aIn.value), p = 2 ** parseInt(pIn.value);
    const ly = v => H - M.b - Math.log2(v) / Math.log2(PMAX) * (H - M.t - M.b);
    const ey = v => H - M.b - v * (H - M.t - M.b);
    const sticks = [1, 4, 16, 64, 256, 1024].filter(v => v <= PMAX).map(v => [v, v]);
    const eticks = [0, 0.25, 0.5, 0.75, 1].map(v => [v, v]);
    let s = panel(0, "speedup", "S", ly, [[q => q, "#999", "3,3"], [q => amdahl(q, a), "#1f77b4", ""],
                  [q => gustafson(q, a), "#ff7f0e", ""], [q => 1 / a, "#1f77b4", "6,3"]], sticks);
    s += panel(W + 10, "efficiency S / p", "S / p", ey, [[q => amdahl(q, a) / q, "#1f77b4", ""],
               [q => gustafson(q, a) / q, "#ff7f0e", ""]], eticks);
    const S = amdahl(p, a);
    s += `<circle cx="${lx(p)}" cy="${ly(S)}" r="4" fill="#1f77b4"/>`;
    s += `<circle cx="${W + 10 + lx(p)}" cy="${ey(S / p)}" r="4" fill="#1f77b4"/>`;
    svg.innerHTML = s;
    out.innerHTML = `α = ${a.toFixed(3)}, p = ${p}: Amdahl S = <b>${S.toFixed(2)}</b> ` +
      `(efficiency ${(S / p).toFixed(2)}, ceiling 1/α = ${(1 / a).toFixed(1)}); ` +
      `Gustafson S = <b>${gustafson(p, a).toFixed(1)}</b> (efficiency ${(gustafson(p, a) / p).toFixed(2)})`;
  }
  aIn.addEventListener("input", draw); pIn.addEventListener("input", draw); draw();
})();
"""


class AmdahlExplorer:
    """Sliders for alpha and p over Amdahl's and Gustafson's curves, drawn by the browser.

    No kernel needed: the same output works in JupyterLab and in the static web book.
    Without JavaScript the default state shows as a PNG (``plots.amdahl_curves``).
    Blue: Amdahl (fixed total batch) and its ceiling 1/alpha (dashed); orange: Gustafson.
    """

    def __init__(self, alpha: float = 0.1, p: int = 8, p_max: int = 1024):
        self.alpha, self.p, self.p_max = alpha, p, p_max

    def _repr_html_(self) -> str:
        import base64
        import io
        import math
        import uuid
        from helpers import plots
        buf = io.BytesIO()
        plots.amdahl_curves(self.alpha, self.p_max, self.p).savefig(buf, format="png", dpi=80)
        png = base64.b64encode(buf.getvalue()).decode()
        uid = f"amdahl-{uuid.uuid4().hex[:8]}"
        k_max, k = int(math.log2(self.p_max)), int(math.log2(self.p))
        js = _AMDAHL_JS % {"id": uid, "p_max": self.p_max}
        return f"""<div id="{uid}" style="font-family: sans-serif; font-size: 13px">
<label>serial fraction α <input class="alpha" type="range" min="0.005" max="0.5" step="0.005" value="{self.alpha}"></label>
<label style="margin-left: 1em">devices p = 2^k <input class="p" type="range" min="0" max="{k_max}" step="1" value="{k}"></label>
<div class="readout" style="margin: 4px 0"></div>
<div style="font-size: 11px; color: #555"><span style="color: #1f77b4">&#9644;</span> Amdahl, fixed total batch
(dashed: its ceiling 1/&alpha;) &nbsp; <span style="color: #ff7f0e">&#9644;</span> Gustafson, fixed per-rank batch
&nbsp; <span style="color: #999">&#8943;</span> ideal S = p</div>
<svg width="610" height="220" viewBox="0 0 610 220"></svg>
<noscript><img alt="Amdahl and Gustafson at alpha = {self.alpha}" src="data:image/png;base64,{png}"></noscript>
<script>{js}</script></div>"""

    def _repr_png_(self) -> bytes:
        import io
        from helpers import plots
        buf = io.BytesIO()
        plots.amdahl_curves(self.alpha, self.p_max, self.p).savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def amdahl_explorer(alpha: float = 0.1, p: int = 8, p_max: int = 1024) -> AmdahlExplorer:
    """Amdahl's law live: display the returned object (see ``AmdahlExplorer``)."""
    return AmdahlExplorer(alpha, p, p_max)


def diagnosis_html(d, p: int) -> str:
    """``theory.Diagnosis`` as a short HTML card: the verdict, the numbers, the advice."""
    slower = " (slower than one process!)" if d.speedup < 1 else ""
    rows = "".join(f"<li>{a}</li>" for a in d.advice)
    return (f"<b>{d.bound}-bound</b>: step {d.step * 1e3:.2f} ms = compute {d.t_compute * 1e3:.2f} ms "
            f"+ exposed all_reduce {(d.step - d.t_compute) * 1e3:.2f} ms "
            f"(of which latency {d.t_latency * 1e3:.2f} ms). "
            f"{p} ranks give {d.speedup:.2f}x one process's throughput{slower}.<ul>{rows}</ul>")


def slow_run_explorer(n_params: int, per_rank_batch: int, t_per_sample: float, step_latency: float,
                      seconds_per_byte: float, p: int = 2, t_fixed: float = 0.0):
    """"Why is my multi-GPU run slower?": ``theory.diagnose`` with sliders, from your measurements.

    Defaults are what the chapter measured (pass them in). Shows the default
    verdict first as plain HTML (what the static book keeps), then returns the
    live controls for JupyterLab.
    """
    import math

    import ipywidgets as w
    from IPython.display import HTML, display
    from helpers import theory
    display(HTML(diagnosis_html(theory.diagnose(n_params, per_rank_batch, t_per_sample, p, step_latency,
                                                seconds_per_byte, t_fixed=t_fixed), p)))
    log = lambda v, lo, hi, desc, fmt: w.FloatLogSlider(value=v, base=10, min=math.log10(v) - lo,  # noqa: E731
                                                        max=math.log10(v) + hi, step=0.05,
                                                        description=desc, readout_format=fmt)
    controls = {
        "n_params": log(n_params, 1, 4, "parameters", ".3g"),
        "per_rank_batch": w.IntSlider(value=per_rank_batch, min=1, max=max(1024, 4 * per_rank_batch),
                                      description="batch/rank"),
        "t_per_sample": log(t_per_sample, 2, 2, "s/sample", ".2g"),
        "seconds_per_byte": log(seconds_per_byte, 2, 2, "s/byte", ".2g"),
        "step_latency": log(step_latency, 2, 2, "step latency (s)", ".2g"),
        "p": w.SelectionSlider(options=[2 ** i for i in range(1, 11)], value=p, description="ranks"),
    }
    overlap = w.Checkbox(value=False, description="overlap all_reduce with backward (2/3 of compute)")
    card = w.HTML()

    def update(_=None):
        v = {k: c.value for k, c in controls.items()}
        d = theory.diagnose(int(v["n_params"]), v["per_rank_batch"], v["t_per_sample"], v["p"],
                            v["step_latency"], v["seconds_per_byte"], overlappable=(2 / 3) * v["per_rank_batch"] * v["t_per_sample"]
                            if overlap.value else 0.0, t_fixed=t_fixed)
        card.value = diagnosis_html(d, v["p"])

    for c in [*controls.values(), overlap]:
        c.observe(update, "value")
    update()
    return w.VBox([w.HBox([w.VBox(list(controls.values())[:3]), w.VBox(list(controls.values())[3:])]),
                   overlap, card])

"""Second GPU or second node? (chapter 4.3): ``theory.predict_step`` for a model size, a global batch
and p ranks, on your machine's fits and with two published links in place of yours.

The browser (``prediction.js``) prices every setting with ``theory.js``'s port of predict_step;
``machine_step`` is the same in Python (tests/test_explorers.py holds the two equal).
"""
from __future__ import annotations

from . import shell

RANKS = [1, 2, 4, 8, 16, 32, 64]

# What changes on GPUs, with its source. Link rates are published: NVLink 4 gives an H100 SXM
# 900 GB/s, 450 GB/s each way (NVIDIA's H100 datasheet); an NDR InfiniBand port 400 Gb/s = 50 GB/s
# each way (ConnectX-7), one per GPU in a DGX H100. Assumed, not published: a few us per ring step,
# no per-call cost or wait beyond it, no contention (each rank has its own GPU and HBM), and the
# compute of an H100 at 40% of its 989 TFLOP/s dense bf16 peak, 2 FLOP per multiply-add, backward
# twice the forward; 10 us a phase for kernel launches; the optimizer at 3.35 TB/s of HBM, 12 bytes
# a parameter (SGD: read the weight and its gradient, write the weight).
H100_MAC = 2 / (0.4 * 989e12)
H100 = {"data": [0.0, 0.0], "forward": [10e-6, H100_MAC], "backward": [10e-6, 2 * H100_MAC],
        "optimizer": [10e-6, 12 / 3.35e12], "contention": 1.0}
PRESETS = {
    "8 H100 in a node, NVLink": {**H100, "step_latency": 2e-6, "seconds_per_byte": 1 / 450e9,
                                 "per_call": 0.0, "wait": [0.0, 0.0]},
    "H100 nodes, InfiniBand NDR": {**H100, "step_latency": 5e-6, "seconds_per_byte": 1 / 50e9,
                                   "per_call": 0.0, "wait": [0.0, 0.0]},
}


def from_calibration(cal) -> dict:
    """``analysis.Calibration`` as the explorer's plain numbers: this machine's compute, link and contention."""
    line = lambda l: [l.fixed, l.slope]  # noqa: E731
    c, k = cal.compute, cal.link
    return {"data": line(c.data), "forward": line(c.forward), "backward": line(c.backward),
            "optimizer": line(c.optimizer), "contention": cal.contention, "step_latency": k.step_latency,
            "seconds_per_byte": k.seconds_per_byte, "per_call": k.per_call, "wait": line(k.wait)}


def machine_step(m: dict, n_params: int, global_batch: int, p: int):
    """One step of an MLP of ``n_params`` (one multiply-add per parameter per sample, DDP's buckets) on
    machine ``m`` at p ranks, G / p samples each: ``theory.predict_step``."""
    from helpers import theory
    line = lambda l: theory.Line(*l)  # noqa: E731
    compute = theory.ComputeModel(line(m["data"]), line(m["forward"]), line(m["backward"]), line(m["optimizer"]))
    link = theory.Link(m["step_latency"], m["seconds_per_byte"], m["per_call"], line(m["wait"]))
    w = theory.Workload("mlp", n_params, n_params, theory.ddp_buckets(4 * n_params))
    return theory.predict(w, global_batch, p, compute, link, m["contention"])


def speedups(m: dict, n_params: int, global_batch: int, p: int) -> tuple[float, float]:
    """(step at p in seconds, S(p) = T_1 / T_p) at the same global batch."""
    step = machine_step(m, n_params, global_batch, p).step
    return step, machine_step(m, n_params, global_batch, 1).step / step


def readout_html(machines: dict, n_params: int, global_batch: int, p: int) -> str:
    """The answer for one setting, a line per machine. Mirrored in ``prediction.js`` (``readout``)."""
    rows = []
    for name, m in machines.items():
        step, s = speedups(m, n_params, global_batch, p)
        rows.append(f"<li><b>{name}</b>: step {step * 1e3:.3f} ms, S({p}) = <b>{s:.2f}</b>, "
                    f"efficiency {s / p:.0%}</li>")
    return (f"An MLP of {n_params / 1e6:.2f} M parameters at a global batch of {global_batch:,}, "
            f"over {p} ranks:<ul>{''.join(rows)}</ul>")


class PredictionExplorer(shell.Explorer):
    """Model size, global batch and p: the predicted step, S(p) and efficiency on each machine, and
    S against p for all of them."""

    name = "prediction"

    def __init__(self, machines: dict, n_params: int, global_batch: int, p: int = 2):
        self.machines = machines
        self.values = dict(n_params=int(n_params), global_batch=int(global_batch), p=int(p))

    def figure(self):
        import matplotlib.pyplot as plt
        from ..plots.style import finish
        v = self.values
        fig, ax = plt.subplots(figsize=(5, 3))
        for name, m in self.machines.items():
            ax.plot(RANKS, [speedups(m, v["n_params"], v["global_batch"], q)[1] for q in RANKS], "o-", label=name)
        ax.plot(RANKS, RANKS, ":", color="gray", label="ideal S = p")
        ax.set(xscale="log", yscale="log", xlabel="ranks p", ylabel="S(p)", title="predicted speedup")
        ax.legend(fontsize=7)
        return finish(fig)

    def page(self) -> shell.Page:
        v = self.values
        return shell.Page(
            controls=[shell.log_slider("n_params", "parameters", v["n_params"], 2, 2, unit="count")
                      + shell.log_slider("global_batch", "global batch", v["global_batch"], 2, 1, unit="count")
                      + shell.choice("p", "ranks", RANKS, v["p"])],
            readout=readout_html(self.machines, **v),
            view='<svg width="520" height="230" viewBox="0 0 520 230"></svg>',
            data={"machines": self.machines, "ranks": RANKS},
            alt=f"Predicted speedup against ranks for an MLP of {v['n_params']:,} parameters at a global batch "
                f"of {v['global_batch']:,}, on " + ", ".join(self.machines),
        )


def prediction_explorer(cal, model: str = "wide-1024x4", global_batch: int = 4096, p: int = 2) -> PredictionExplorer:
    """The explorer from chapter 4.3's calibration: your machine's fits, then ``PRESETS``. It opens at
    ``model``'s parameter count."""
    machines = {"your machine (this chapter's fits)": from_calibration(cal), **PRESETS}
    return PredictionExplorer(machines, cal.workloads[model].n_params, global_batch, p)

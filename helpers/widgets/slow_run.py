"""Why is my multi-GPU run slower? (chapter 4.2): ``theory.diagnose`` with controls, from your measurements.

The browser (``slow_run.js``) runs diagnose and its advice (``theory.js``) for every
setting, and draws the step's time and the speedup against the number of ranks.
"""
from __future__ import annotations

from . import shell

RANKS = [2**i for i in range(1, 11)]


def diagnosis_html(d, p: int) -> str:
    """``theory.Diagnosis`` as a short HTML card: the verdict, the numbers, the advice.

    Mirrored in ``theory.js`` (``theory.diagnosisHtml``); tests/test_explorers.py holds the two equal."""
    slower = " (slower than one process!)" if d.speedup < 1 else ""
    rows = "".join(f"<li>{a}</li>" for a in d.advice)
    return (f"<b>{d.bound}-bound</b>: step {d.step * 1e3:.2f} ms = compute {d.t_compute * 1e3:.2f} ms "
            f"+ exposed all_reduce {(d.step - d.t_compute) * 1e3:.2f} ms "
            f"(of which latency {d.t_latency * 1e3:.2f} ms). "
            f"{p} ranks give {d.speedup:.2f}x one process's throughput{slower}.<ul>{rows}</ul>")


class SlowRunExplorer(shell.Explorer):
    """Parameters, per-rank batch, compute per sample, the ring's step latency and seconds per byte,
    the number of ranks, and overlap on or off: the diagnosis, the step's parts, the speedup per p.

    Overlap on lets 2/3 of the compute (about the backward's share) hide the all_reduce.
    """

    name = "slow_run"

    def __init__(self, n_params: int, per_rank_batch: int, t_per_sample: float, step_latency: float,
                 seconds_per_byte: float, p: int = 2, t_fixed: float = 0.0):
        self.values = dict(n_params=int(n_params), per_rank_batch=int(per_rank_batch),
                           t_per_sample=float(t_per_sample), step_latency=float(step_latency),
                           seconds_per_byte=float(seconds_per_byte), p=int(p))
        self.t_fixed = float(t_fixed)

    def diagnosis(self):
        from helpers import theory
        return theory.diagnose(**self.values, t_fixed=self.t_fixed)

    def figure(self):
        from helpers import plots
        d, p = self.diagnosis(), self.values["p"]
        return plots.step_prediction({"one process": {"compute": d.t_compute},
                                      f"{p} ranks": {"compute": d.t_compute, "comm": d.step - d.t_compute}})

    def page(self) -> shell.Page:
        v, d = self.values, self.diagnosis()
        b = v["per_rank_batch"]
        return shell.Page(
            controls=[shell.log_slider("n_params", "parameters", v["n_params"], 1, 4, unit="count")
                      + shell.slider("per_rank_batch", "batch per rank", 1, max(1024, 4 * b), 1, b),
                      shell.log_slider("t_per_sample", "compute per sample", v["t_per_sample"], 2, 2, unit="s")
                      + shell.log_slider("seconds_per_byte", "link β", v["seconds_per_byte"], 2, 2, unit="s/B"),
                      shell.log_slider("step_latency", "ring step latency ℓ", v["step_latency"], 2, 2, unit="s")
                      + shell.choice("p", "ranks", RANKS, v["p"]),
                      shell.checkbox("overlap", "overlap all_reduce with backward (2/3 of compute)")],
            readout=diagnosis_html(d, v["p"]),
            view='<svg width="700" height="190" viewBox="0 0 700 190"></svg>',
            data={"t_fixed": self.t_fixed, "ranks": [1, *RANKS]},
            alt=(f"One DDP step on {v['p']} ranks: {d.t_compute * 1e3:.2f} ms of compute and "
                 f"{(d.step - d.t_compute) * 1e3:.2f} ms of exposed all_reduce; {d.bound}-bound, "
                 f"{d.speedup:.2f}x one process's throughput"),
        )


def slow_run_explorer(n_params: int, per_rank_batch: int, t_per_sample: float, step_latency: float,
                      seconds_per_byte: float, p: int = 2, t_fixed: float = 0.0) -> SlowRunExplorer:
    """"Why is my multi-GPU run slower?" (see ``SlowRunExplorer``). Its defaults are what the
    chapter measured (pass them in)."""
    return SlowRunExplorer(n_params, per_rank_batch, t_per_sample, step_latency, seconds_per_byte, p, t_fixed)

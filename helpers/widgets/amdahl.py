"""Amdahl's law, live (chapter 4.1): sliders for alpha and p over Amdahl's and Gustafson's curves."""
from __future__ import annotations

from . import shell

ALPHA_RANGE = (0.001, 1.0)  # the slider's ends; a fitted alpha outside them (a run faster than
# ideal, or slower on p ranks than on one) is shown at the nearer end


class AmdahlExplorer(shell.Explorer):
    """Sliders for alpha and p over Amdahl's and Gustafson's curves, drawn by the browser (``amdahl.js``).

    No kernel needed: the same output works in JupyterLab and in the static web book.
    Without JavaScript the default state shows as a PNG (``plots.amdahl_curves``).
    Blue: Amdahl (fixed total batch) and its ceiling 1/alpha (dashed); orange: Gustafson.
    """

    name = "amdahl"

    def __init__(self, alpha: float = 0.1, p: int = 8, p_max: int = 1024):
        lo, hi = ALPHA_RANGE
        self.alpha, self.p, self.p_max = round(min(max(float(alpha), lo), hi), 3), int(p), int(p_max)

    def figure(self):
        from helpers import plots
        return plots.amdahl_curves(self.alpha, self.p_max, self.p)

    def page(self) -> shell.Page:
        from helpers import theory
        a, p = self.alpha, self.p
        s, g = float(theory.amdahl(p, a)), float(theory.gustafson(p, a))
        readout = (f"α = {a:.3f}, p = {p}: Amdahl S = <b>{s:.2f}</b> (efficiency {s / p:.2f}, ceiling 1/α = "
                   f"{1 / a:.1f}); Gustafson S = <b>{g:.1f}</b> (efficiency {g / p:.2f})")
        ps = [2**k for k in range(self.p_max.bit_length()) if 2**k <= self.p_max]
        return shell.Page(
            controls=[shell.slider("alpha", "serial fraction α", *ALPHA_RANGE, 0.001, a, unit="")
                      + shell.choice("p", "devices p", ps, p, unit="")],
            legend=('<div style="font-size: 11px; color: #555"><span style="color: #1f77b4">&#9644;</span> '
                    'Amdahl, fixed total batch (dashed: its ceiling 1/&alpha;) &nbsp; <span style="color: #ff7f0e">'
                    '&#9644;</span> Gustafson, fixed per-rank batch &nbsp; <span style="color: #999">&#8943;</span> '
                    'ideal S = p</div>'),
            readout=readout,
            view='<svg width="610" height="220" viewBox="0 0 610 220"></svg>',
            data={"p_max": self.p_max},
            alt=f"Amdahl's and Gustafson's speedups and efficiencies for alpha = {a:g}, up to p = {self.p_max}; "
                f"at p = {p}, Amdahl gives S = {s:.2f}",
        )


def amdahl_explorer(alpha: float = 0.1, p: int = 8, p_max: int = 1024) -> AmdahlExplorer:
    """Amdahl's law live: display the returned object (see ``AmdahlExplorer``)."""
    return AmdahlExplorer(alpha, p, p_max)

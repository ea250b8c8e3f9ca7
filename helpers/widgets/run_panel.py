"""Try a layout for real (chapter 8.5): ipywidgets controls that launch chapter 8.4's GPT on the reader's
own ranks, and set what each run measured beside what the formulas and the planner predicted.

Unlike the explorers beside it, which run in the browser alone, this panel needs a kernel: its Run
button starts ``train_4d`` through ``helpers.launch`` on a thread of its own, so the kernel stays free
for the Stop button (``launch(stop=...)`` kills every rank). Each finished run becomes one
``analysis.layouts.record`` in a table and a figure that grow. A choice that cannot run gets one line
and starts nothing. On the static web book, where no kernel answers, the panel's output is the table
and figure of the runs that built the page (its ``text/html``; ``_config.yml`` drops the widget view
there).
"""
from __future__ import annotations

import base64
import dataclasses
import html
import threading
import warnings
from typing import Callable

from .. import plans
from ..analysis import layouts
from ..displays import bar_html
from ..launch import LaunchStopped, launch
from ..plots.alt_text import describe
from ..plots.four_d import tried_layouts
from ..recipes import four_d as fd
from .shell import png

RANKS = (1, 2, 4, 8, 16, 32, 64)
MESH = (1, 2, 4, 8)
SEQ = (32, 64, 128)
MICRO_BATCH = 2  # sequences in each micro-batch: a replica's batch is micro_batches x 2
DEFAULTS = {"nprocs": 8, "dp": 2, "tp": 2, "pp": 2, "zero": 2, "recompute": "none", "micro_batches": 2,
            "seq": 64, "steps": 4}
TIMEOUT_S = 600.0


def refusal(layout: dict, machine) -> str:
    """Why ``layout`` cannot run on ``machine``, in one line ("" when it can)."""
    if unknown := sorted(set(layout) - set(DEFAULTS)):
        return f"unknown settings {unknown}: a layout sets {sorted(DEFAULTS)}"
    n = layout["nprocs"]
    if n > plans.most_ranks(machine):
        return f"{n} ranks: more than this machine can hold ({plans.most_ranks_why(machine)})"
    if layout["steps"] < 3:
        return f"steps must be at least 3 (one sets up, one is timed, the last is counted), got {layout['steps']}"
    try:
        fd.check_layout(layout["dp"], layout["tp"], layout["pp"], n, _config(layout),
                        MICRO_BATCH * layout["micro_batches"], layout["micro_batches"], layout["zero"],
                        layout["recompute"])
    except ValueError as e:
        return str(e)
    return ""


def _config(layout: dict):
    return dataclasses.replace(fd.CONFIG, seq=layout["seq"])


def run_layout(layout: dict, planner: Callable[[list[dict]], dict], *, stop: threading.Event | None = None,
               on_progress: Callable[[dict], None] | None = None, progress: bool = True) -> dict:
    """Launch ``layout`` (a ``DEFAULTS``-shaped dict) and return its ``analysis.layouts.record``."""
    ranks = launch(fd.train_4d, nprocs=layout["nprocs"], dp=layout["dp"], tp=layout["tp"], pp=layout["pp"],
                   steps=layout["steps"], batch=MICRO_BATCH * layout["micro_batches"],
                   micro_batches=layout["micro_batches"], config=_config(layout), zero=layout["zero"],
                   recompute=layout["recompute"], show=None, timeout=TIMEOUT_S, stop=stop,
                   on_progress=on_progress, progress=progress)
    return layouts.record(ranks, planner)


def _ipython():
    """The running IPython shell, or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class RunPanel:
    """The panel. ``planner(ranks)`` prices a finished run's own layout (``analysis.planner``);
    ``run(**settings)`` runs one layout from a cell (waiting, with the book's progress bar), the
    Run button the same from the panel (not waiting). ``records`` holds every run, oldest first."""

    def __init__(self, machine, planner: Callable[[list[dict]], dict], **defaults):
        import ipywidgets as W
        self.machine, self.planner = machine, planner
        self.records: list[dict] = []
        self._stop, self._thread = threading.Event(), None
        v = DEFAULTS | defaults

        def dropdown(options, value, text):
            return W.Dropdown(options=options, value=value, description=text, layout=W.Layout(width="15em"),
                              style={"description_width": "7em"})
        self.controls = {
            "nprocs": dropdown(RANKS, v["nprocs"], "ranks"), "dp": dropdown(MESH, v["dp"], "dp"),
            "tp": dropdown(MESH, v["tp"], "tp"), "pp": dropdown(MESH, v["pp"], "pp"),
            "zero": dropdown([("ZeRO-2", 2), ("ZeRO-3", 3)], v["zero"], "sharding"),
            "recompute": dropdown(fd.RECOMPUTE, v["recompute"], "recompute"),
            "micro_batches": dropdown((1, 2, 4, 8), v["micro_batches"], "micro-batches"),
            "seq": dropdown(SEQ, v["seq"], "sequence"),
            "steps": W.BoundedIntText(value=v["steps"], min=1, max=50, description="steps",
                                      layout=W.Layout(width="15em"), style={"description_width": "7em"})}
        for key, control in self.controls.items():
            control.add_class(f"book-run-{key}")  # what the browser test finds them by
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.stop_button = W.Button(description="Stop", icon="stop", disabled=True)
        self.run_button.add_class("book-run-go"), self.stop_button.add_class("book-run-stop")
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self._stop.set())
        self.status, self.bar, self.table = W.HTML(), W.HTML(), W.HTML()
        self.status.add_class("book-run-status"), self.table.add_class("book-run-table")
        self.figure = W.Image(format="png", layout=W.Layout(max_width="100%"))
        grid = W.GridBox(list(self.controls.values()), layout=W.Layout(grid_template_columns="repeat(3, 16em)"))
        self.box = W.VBox([grid, W.HBox([self.run_button, self.stop_button]), self.status, self.bar,
                           self.table, self.figure])
        self.box.add_class("book-run-panel")
        self._handle = None

    def show(self) -> None:
        """Display the panel; each ``run`` from a cell then redraws this output, so the page the book
        builds keeps the panel with every run the chapter made."""
        from IPython.display import display
        self._handle = display(self, display_id=True)

    # --- what the reader chose ---------------------------------------------------------------------
    def layout(self) -> dict:
        return {key: control.value for key, control in self.controls.items()}

    def _say(self, text: str, error: bool = False) -> None:
        style = ' style="color:#b00020"' if error else ""
        self.status.value = f"<span{style}>{html.escape(text)}</span>"

    # --- running -----------------------------------------------------------------------------------
    def run(self, **settings) -> dict:
        """Run one layout from a cell and wait: ``DEFAULTS`` updated by ``settings``."""
        layout = DEFAULTS | settings
        if why := refusal(layout, self.machine):
            raise ValueError(why)
        rec = self._record(run_layout(layout, self.planner))
        if self._handle is not None:
            self._handle.update(self)
        return rec

    def start(self) -> bool:
        """The Run button: check the choice, then run it on a thread; False if nothing started."""
        if self._thread is not None and self._thread.is_alive():
            self._say("a run is going: stop it or wait for it", error=True)
            return False
        layout = self.layout()
        if why := refusal(layout, self.machine):
            self._say(why, error=True)
            return False
        self._stop.clear()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self._say(f"running {layouts.label(layout)} on {layout['nprocs']} ranks")
        self._thread = threading.Thread(target=self._run_in_panel, args=(layout,), name="run-panel", daemon=True)
        self._thread.start()
        self._stop_on_interrupt()
        return True

    def _stop_on_interrupt(self) -> None:
        """Make the kernel's interrupt stop a run going on the panel's thread, as it stops a cell.

        ipykernel ignores SIGINT while idle, and for each message it handles sets Python's own handler,
        then restores the one it saved (``Kernel.saved_sigint_handler``). The Run button's click is such
        a message, so the saved handler is replaced: it stops this panel's run if one is going, and
        otherwise does what the saved one did (nothing, for SIG_IGN)."""
        kernel = getattr(_ipython(), "kernel", None)
        if kernel is None or not hasattr(kernel, "saved_sigint_handler"):
            return  # not in a kernel (a test, a script): Ctrl-C reaches the main thread as usual
        before = kernel.saved_sigint_handler
        if getattr(before, "panel", None) is self:
            return

        def on_interrupt(signum, frame):
            if self._thread is not None and self._thread.is_alive():
                self._stop.set()
            elif callable(before):
                before(signum, frame)
        on_interrupt.panel = self
        kernel.saved_sigint_handler = on_interrupt

    def _run_in_panel(self, layout: dict) -> None:
        try:
            with warnings.catch_warnings(record=True) as caught:  # shown here, not in whichever cell runs
                warnings.simplefilter("always")
                rec = run_layout(layout, self.planner, stop=self._stop, progress=False,
                                 on_progress=lambda r: setattr(self.bar, "value", bar_html(r)))
            self._record(rec)
            notes = " ".join(str(w.message) for w in caught if issubclass(w.category, UserWarning))
            self._say(f"run {len(self.records)} done: {layouts.label(layout)}. {notes}".strip())
        except LaunchStopped as e:
            self._say(f"stopped: {e}", error=True)
        except Exception as e:  # noqa: BLE001 - any failure is the reader's to read, in one line
            self._say(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", error=True)
        finally:
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _record(self, rec: dict) -> dict:
        self.records.append(rec)
        self.table.value = layouts.table_html(self.records)
        self.figure.value = png(tried_layouts(self.records))
        return rec

    # --- shown -------------------------------------------------------------------------------------
    def static_html(self) -> str:
        """The runs so far as a table and a figure: what the web book shows in the panel's place."""
        if not self.records:
            return "<p>No layout has been run in this panel yet.</p>"
        fig = tried_layouts(self.records)
        image = base64.b64encode(png(fig)).decode()
        return (f"<p>The runs that built this page (run the chapter in JupyterLab to try your own):</p>"
                f"{layouts.table_html(self.records)}"
                f'<img src="data:image/png;base64,{image}" alt="{html.escape(describe(fig))}">')

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/html"] = self.static_html()
        return bundle



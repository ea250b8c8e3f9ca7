"""Displays that redraw in their cell while a launch runs: rank 0's progress bar, a live loss curve.

``helpers.launch`` feeds both from rank 0's ``helpers.dist.report`` records. In a
notebook each is one IPython display handle updated in place, which the built
book keeps in its final state; in a terminal the bar is tqdm.
"""
from __future__ import annotations

import html
import json
import sys
import time
from pathlib import Path
from typing import Callable


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _metrics(rec: dict) -> dict:
    """What a record reports besides its position (and the display's own ``_`` fields)."""
    return {k: v for k, v in rec.items() if k not in ("step", "total") and not k.startswith("_")}


class _HtmlBar:
    def __init__(self):
        from IPython.display import HTML, display
        self._HTML = HTML
        self.handle = display(HTML(""), display_id=True)

    def update(self, rec: dict, done: bool) -> None:
        self.handle.update(self._HTML(bar_html(rec)))


def bar_html(rec: dict) -> str:
    """The book's progress bar for one record (``step``, ``total``, metrics, ``_rate``), as HTML."""
    step, total = rec["step"], rec["total"] or 1
    metrics = "  ".join(f"{k} {v:.4g}" for k, v in _metrics(rec).items())
    rate = rec.get("_rate")
    speed = f"  {rate:.1f} steps/s" if rate else ""
    label = html.escape(f"{step}/{total}{speed}  {metrics}")
    return (f'<div style="font-family:monospace"><progress value="{step}" max="{total}" '
            f'style="width:40%;vertical-align:middle"></progress> {label}</div>')


class _TqdmBar:
    def __init__(self):
        from tqdm import tqdm
        self.bar = tqdm(total=0, file=sys.stderr, disable=None, leave=False)

    def update(self, rec: dict, done: bool) -> None:
        self.bar.total = rec["total"]
        self.bar.n = rec["step"]
        self.bar.set_postfix({k: f"{v:.4g}" for k, v in _metrics(rec).items()}, refresh=True)

    def close(self) -> None:
        self.bar.close()


class ProgressDisplay:
    """Reads rank 0's ``progress.jsonl`` and draws the newest record, at most 10 times a second."""

    def __init__(self, path: Path, on_progress: Callable[[dict], None] | None = None, draw: bool = True):
        self.path, self.on_progress, self.draw = path, on_progress, draw
        self.offset = 0
        self.bar = None
        self.last: dict | None = None
        self.drawn_at = 0.0
        self.first: tuple[float, int] | None = None  # (time, step) of the first record seen

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path) as f:
            f.seek(self.offset)
            text = f.read()
        end = text.rfind("\n") + 1  # a record is complete only once its newline is written
        self.offset += len(text[:end].encode())
        for line in text[:end].splitlines():
            rec = json.loads(line)
            if self.on_progress:
                self.on_progress(dict(rec))
            self.last = rec
            if self.first is None:
                self.first = (time.monotonic(), rec["step"])
        if self.draw and self.last and time.monotonic() - self.drawn_at > 0.1:
            self._draw()

    def step_reached(self) -> int:
        """The last step rank 0 reported (0 before its first report)."""
        return self.last["step"] if self.last else 0

    def _make_bar(self):
        return _HtmlBar() if in_notebook() else _TqdmBar()

    def _draw(self) -> None:
        if self.bar is None:
            self.bar = self._make_bar()
        t0, step0 = self.first
        elapsed = time.monotonic() - t0
        rec = dict(self.last, _rate=(self.last["step"] - step0) / elapsed if elapsed > 0 else 0)
        self.bar.update(rec, done=False)
        self.drawn_at = time.monotonic()

    def close(self) -> None:
        if self.draw and self.last:
            self._draw()
        if self.bar is not None and hasattr(self.bar, "close"):
            self.bar.close()


class LiveLoss:
    """A loss curve redrawn in its cell while ``helpers.launch`` runs: pass it as ``on_progress``.

    ``launch`` calls it with every record rank 0 gives ``helpers.dist.report``. It
    redraws at most every ``every`` seconds, through one IPython display handle, so
    the figure updates in place; ``finish()`` draws the final state, which is what
    the built book keeps. Outside a notebook it only collects the points.
    """

    def __init__(self, title: str = "Training loss on rank 0", key: str = "loss", every: float = 0.25):
        self.title, self.key, self.every = title, key, every
        self.steps: list[int] = []
        self.values: list[float] = []
        self.total = 0
        self.handle = None
        self.drawn_at = 0.0
        self.draws = 0

    def __call__(self, record: dict) -> None:
        if self.key not in record:
            return
        self.steps.append(record["step"])
        self.values.append(record[self.key])
        self.total = record["total"]
        if time.monotonic() - self.drawn_at >= self.every:
            self.draw()

    def figure(self):
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(self.steps, self.values, lw=1)
        last = self.steps[-1] if self.steps else 0
        ax.set(xlim=(0, max(self.total, 1)), xlabel="step", ylabel=self.key,
               title=f"{self.title}: step {last} of {self.total}")
        ax.grid(alpha=0.3)
        from .plots.style import finish
        return finish(fig)  # laid out, detached from pyplot, and shown with its alt text like every figure

    def draw(self) -> None:
        self.drawn_at = time.monotonic()
        if not in_notebook():
            return
        from IPython.display import display
        fig = self.figure()
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
        self.draws += 1

    def finish(self) -> None:
        """Draw the last points (the launch may end between two redraws)."""
        if self.steps:
            self.draw()

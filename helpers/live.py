"""What a launch shows while it runs: the ranks' output, and rank 0's progress.

The ranks write to files in the run's folder; the launching thread reads them
a few times a second. In a notebook the progress is an HTML bar updated in
place, which the built book keeps in its final state; in a terminal it is tqdm.
"""
from __future__ import annotations

import html
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


class LogTail:
    """Follows ``rank{r}.log`` in ``run_dir`` and prints the shown ranks' new lines, tagged."""

    def __init__(self, run_dir: Path, shown: set[int], keep: int = 5):
        self.run_dir, self.shown = run_dir, shown
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, str] = {}
        self.recent: dict[int, deque] = {}
        self.keep = keep

    def poll(self) -> None:
        for path in sorted(self.run_dir.glob("rank*.log")):
            rank = int(path.stem[4:])
            with open(path, "rb") as f:
                f.seek(self.offsets.get(rank, 0))
                chunk = f.read()
            if not chunk:
                continue
            self.offsets[rank] = self.offsets.get(rank, 0) + len(chunk)
            text = self.partial.pop(rank, "") + chunk.decode(errors="replace")
            *lines, rest = text.split("\n")
            if rest:
                self.partial[rank] = rest
            self._emit(rank, lines)

    def _emit(self, rank: int, lines: list[str]) -> None:
        recent = self.recent.setdefault(rank, deque(maxlen=self.keep))
        for line in lines:
            line = line.rstrip("\r")
            recent.append(line)
            if rank in self.shown:
                print(f"[rank{rank}] {line}", flush=True)

    def last_lines(self) -> str:
        """One line per rank, for error messages: where each rank got to."""
        parts = [f"rank {r} last printed {q[-1]!r}." for r, q in sorted(self.recent.items()) if q]
        return " ".join(parts) or "No rank printed anything."

    def close(self) -> None:
        for rank, rest in list(self.partial.items()):
            self._emit(rank, [rest])
        self.partial.clear()


def _metrics(rec: dict) -> dict:
    """What a record reports besides its position (and the display's own ``_`` fields)."""
    return {k: v for k, v in rec.items() if k not in ("step", "total") and not k.startswith("_")}


class _HtmlBar:
    def __init__(self):
        from IPython.display import HTML, display
        self._HTML = HTML
        self.handle = display(HTML(""), display_id=True)

    def update(self, rec: dict, done: bool) -> None:
        step, total = rec["step"], rec["total"] or 1
        metrics = "  ".join(f"{k} {v:.4g}" for k, v in _metrics(rec).items())
        rate = rec.get("_rate")
        speed = f"  {rate:.1f} steps/s" if rate else ""
        label = html.escape(f"{step}/{total}{speed}  {metrics}")
        self.handle.update(self._HTML(
            f'<div style="font-family:monospace"><progress value="{step}" max="{total}" '
            f'style="width:40%;vertical-align:middle"></progress> {label}</div>'))


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

    def __init__(self, on_progress: Callable[[dict], None] | None):
        self.on_progress = on_progress
        self.offset = 0
        self.bar = None
        self.last: dict | None = None
        self.drawn_at = 0.0
        self.first: tuple[float, int] | None = None  # (time, step) of the first record seen

    def poll(self, path: Path) -> None:
        if not path.exists():
            return
        with open(path) as f:
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
        if self.last and time.monotonic() - self.drawn_at > 0.1:
            self._draw()

    def _draw(self) -> None:
        if self.bar is None:
            self.bar = _HtmlBar() if in_notebook() else _TqdmBar()
        t0, step0 = self.first
        elapsed = time.monotonic() - t0
        rec = dict(self.last, _rate=(self.last["step"] - step0) / elapsed if elapsed > 0 else 0)
        self.bar.update(rec, done=False)
        self.drawn_at = time.monotonic()

    def close(self) -> None:
        if self.last:
            self._draw()
        if self.bar is not None and hasattr(self.bar, "close"):
            self.bar.close()


def progress_display(on_progress: Callable[[dict], None] | None = None) -> ProgressDisplay:
    return ProgressDisplay(on_progress)

"""What a launch shows while it runs: the ranks' own output, tagged with their rank.

The ranks write to files in the run's folder (``helpers.protocol``); the
launching thread reads them a few times a second. Rank 0's progress is drawn
by ``helpers.displays``.
"""
from __future__ import annotations

import codecs
from collections import deque
from pathlib import Path

from . import protocol


class LogTail:
    """Follows ``rank{r}.log`` in ``run_dir`` and prints the shown ranks' new lines, tagged."""

    def __init__(self, run_dir: Path, shown: set[int], keep: int = 5):
        self.run_dir, self.shown = run_dir, shown
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, str] = {}
        # One decoder per rank keeps a UTF-8 character that a poll cut in two for the next poll.
        self.decoders: dict[int, codecs.IncrementalDecoder] = {}
        self.recent: dict[int, deque] = {}
        self.keep = keep

    # A log is read a chunk at a time: a rank that prints 50 MB costs the cell a few MB, not 3.5x 50 MB.
    CHUNK = 1 << 20
    PER_POLL = 8 * CHUNK  # per rank and poll, so a rank that never stops printing cannot stall the cell

    def poll(self, most: int | None = PER_POLL) -> None:
        """Print the shown ranks' new lines; ``most=None`` reads to the end (once the ranks are gone)."""
        for path in sorted(self.run_dir.glob("rank*.log")):
            rank = protocol.rank_of_log(path)
            with open(path, "rb") as f:
                f.seek(self.offsets.get(rank, 0))
                read = 0
                while (most is None or read < most) and (chunk := f.read(self.CHUNK)):
                    read += len(chunk)
                    self.offsets[rank] = self.offsets.get(rank, 0) + len(chunk)
                    self._take(rank, chunk)

    def _take(self, rank: int, chunk: bytes) -> None:
        decoder = self.decoders.setdefault(rank, codecs.getincrementaldecoder("utf-8")(errors="replace"))
        text = self.partial.pop(rank, "") + decoder.decode(chunk)
        *lines, rest = text.split("\n")
        if len(rest) > self.CHUNK:  # a line without end (a progress bar's \r): shown in pieces
            lines.append(rest)
            rest = ""
        if rest:
            self.partial[rank] = rest
        self._emit(rank, lines)

    def _emit(self, rank: int, lines: list[str]) -> None:
        lines = [line.rstrip("\r") for line in lines]
        self.recent.setdefault(rank, deque(maxlen=self.keep)).extend(lines[-self.keep:])
        if rank in self.shown and lines:  # one write a chunk: a flush per line is a message per line in Jupyter
            print("\n".join(f"[rank{rank}] {line}" for line in lines), flush=True)

    def last_lines(self) -> str:
        """One line per rank, for error messages: where each rank got to."""
        parts = [f"rank {r} last printed {q[-1]!r}." for r, q in sorted(self.recent.items()) if q]
        return " ".join(parts) or "No rank printed anything."

    def close(self) -> None:
        for rank, rest in list(self.partial.items()):
            self._emit(rank, [rest])
        self.partial.clear()

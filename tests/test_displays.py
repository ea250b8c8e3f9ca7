"""helpers.displays: rank 0's progress bar (HTML in a notebook, tqdm in a terminal) and its limits."""
import json

import pytest

from helpers import displays


class FakeBar:
    def __init__(self):
        self.drawn, self.closed = [], False

    def update(self, rec, done):
        self.drawn.append(dict(rec))

    def close(self):
        self.closed = True


def _write(path, *records):
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


@pytest.fixture
def display(tmp_path, monkeypatch):
    bars = []
    monkeypatch.setattr(displays.ProgressDisplay, "_make_bar", lambda self: bars.append(FakeBar()) or bars[-1])
    seen = []
    d = displays.ProgressDisplay(tmp_path / "progress.jsonl", on_progress=seen.append)
    return d, bars, seen, tmp_path / "progress.jsonl"


def test_many_records_at_once_draw_once_and_close_draws_the_last(display):
    d, bars, seen, path = display
    _write(path, *({"step": s, "total": 100, "loss": 1.0 / s} for s in range(1, 101)))
    d.poll()
    d.poll()  # nothing new, and too soon to redraw
    assert len(seen) == 100 and [r["step"] for r in seen] == list(range(1, 101))
    assert len(bars) == 1 and [r["step"] for r in bars[0].drawn] == [100]  # at most 10 draws a second
    d.close()
    assert bars[0].drawn[-1]["step"] == 100 and bars[0].closed


def test_a_half_written_record_waits_for_its_newline(display):
    d, bars, seen, path = display
    path.write_text('{"step": 1, "total": 2}\n{"step": 2, "to')
    d.poll()
    assert [r["step"] for r in seen] == [1]
    with open(path, "a") as f:
        f.write('tal": 2}\n')
    d.poll()
    assert [r["step"] for r in seen] == [1, 2]


def test_html_bar_escapes_what_ranks_report_and_survives_total_zero(monkeypatch):
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj.data)

    bar = displays._HtmlBar.__new__(displays._HtmlBar)
    from IPython.display import HTML
    bar._HTML, bar.handle = HTML, Handle()
    bar.update({"step": 0, "total": 0, "<script>alert(1)</script>": 1.0}, done=False)
    assert "<script>" not in shown[-1] and "&lt;script&gt;" in shown[-1]
    assert 'max="1"' in shown[-1]  # total 0 draws an empty bar, not a division by zero


def test_tqdm_bar_follows_the_records(capsys):
    bar = displays._TqdmBar()
    bar.update({"step": 3, "total": 0, "loss": 0.5}, done=False)
    bar.update({"step": 4, "total": 10, "loss": 0.25}, done=False)
    assert bar.bar.n == 4 and bar.bar.total == 10
    bar.close()

"""Chapter 8.5's launch panel, without a browser: its refusals, a run through it, its Stop, and what
the static book shows in its place (tests/browser/test_lab_panel.py clicks it in JupyterLab)."""
import time

import pytest

from helpers import machine, plans
from helpers.analysis import layouts
from helpers.launch import worker_processes
from helpers.widgets.run_panel import DEFAULTS, RunPanel, refusal

HERE = machine.this()


def fake_planner(ranks):  # the planner's own check is tests/test_planner_held_out.py
    return {"memory_bytes": 1e6, "step_s": 0.5}


@pytest.mark.parametrize("change, words", [
    ({"tp": 3}, "dp * pp * tp = 2 * 2 * 3 = 12, but the job has 8 processes"),
    ({"nprocs": 4}, "but the job has 4 processes"),
    ({"pp": 4, "dp": 1}, "2 layers do not divide into pp = 4"),
    ({"tp": 8, "dp": 1, "pp": 1}, "tp = 8 must divide the heads (4)"),
    ({"steps": 2}, "steps must be at least 3"),
    ({"tpp": 2}, "unknown settings ['tpp']"),
])
def test_a_choice_that_cannot_run_gets_one_line(change, words):
    why = refusal(DEFAULTS | change, HERE)
    assert words in why and "\n" not in why


def test_more_ranks_than_the_plans_allow_are_refused_with_the_plans_reason():
    for profile in plans.PROFILES.values():
        too_many = plans.most_ranks(profile) + 1
        why = refusal(DEFAULTS | {"nprocs": too_many}, profile)
        assert why == f"{too_many} ranks: more than this machine can hold ({plans.most_ranks_why(profile)})"


@pytest.fixture(scope="module")
def panel():
    p = RunPanel(HERE, fake_planner, nprocs=4, dp=1)
    p.run(nprocs=4, dp=1, tp=2, pp=2, steps=3)
    return p


def test_a_run_from_a_cell_is_a_record_measured_beside_the_formulas(panel):
    (rec,) = panel.records
    assert {k: rec["layout"][k] for k in ("nprocs", "dp", "tp", "pp", "zero", "recompute")} == \
        {"nprocs": 4, "dp": 1, "tp": 2, "pp": 2, "zero": 2, "recompute": "none"}
    assert rec["same_training"] and rec["memory_bytes"] == rec["memory_formula"]
    assert rec["sent_bytes"] == rec["sent_formula"] and rec["memory_planner"] == 1e6
    header, rows = layouts.cells(panel.records)
    assert len(rows) == 1 and len(rows[0]) == len(header)
    assert "dp 1 × tp 2 × pp 2" in panel.table.value and panel.figure.value[:4] == b"\x89PNG"


def test_the_button_runs_on_a_thread_and_refuses_in_one_line(panel):
    panel.controls["tp"].value = 4
    assert panel.start() is False and "= 8, but the job has 4 processes" in panel.status.value
    panel.controls["tp"].value, panel.controls["recompute"].value = 2, "full"
    assert panel.start() is True
    assert panel.start() is False and "a run is going" in panel.status.value
    panel._thread.join(120)
    assert len(panel.records) == 2 and "run 2 done" in panel.status.value, panel.status.value
    assert panel.records[1]["layout"]["recompute"] == "full" and panel.records[1]["same_training"]
    assert "<progress" in panel.bar.value and not panel.run_button.disabled


def test_stop_kills_every_rank_and_says_so(panel):
    panel.controls["steps"].value = 50
    assert panel.start()
    deadline = time.monotonic() + 60
    while "<progress" not in panel.bar.value or "/50" not in panel.bar.value:
        assert time.monotonic() < deadline, panel.status.value
        time.sleep(0.1)
    panel.stop_button.click()
    panel._thread.join(60)
    assert "stopped: stopped after" in panel.status.value and "every rank was killed" in panel.status.value
    assert len(panel.records) == 2 and not worker_processes() and panel.stop_button.disabled


def test_the_web_book_gets_the_recorded_runs_in_the_panels_place(panel):
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "<table" in bundle["text/html"] and 'src="data:image/png;base64,' in bundle["text/html"]
    assert "run the chapter in JupyterLab" in bundle["text/html"]
    assert "No layout has been run" in RunPanel(HERE, fake_planner).static_html()


def test_a_kernel_interrupt_stops_the_panels_run_and_is_ignored_while_idle(panel, monkeypatch):
    """ipykernel ignores SIGINT while idle and restores its saved handler after each message: the panel
    replaces that saved handler with one that stops its run, and ignores the signal when none is going."""
    import signal
    from types import SimpleNamespace

    from helpers.widgets import run_panel
    kernel = SimpleNamespace(saved_sigint_handler=signal.SIG_IGN)
    monkeypatch.setattr(run_panel, "_ipython", lambda: SimpleNamespace(kernel=kernel))
    panel.controls["steps"].value = 50
    assert panel.start()
    interrupt = kernel.saved_sigint_handler
    assert callable(interrupt) and interrupt.panel is panel
    deadline = time.monotonic() + 60
    while "/50" not in panel.bar.value:
        assert time.monotonic() < deadline, panel.status.value
        time.sleep(0.1)
    interrupt(signal.SIGINT, None)
    panel._thread.join(60)
    assert "stopped: stopped after" in panel.status.value and not worker_processes()
    interrupt(signal.SIGINT, None)  # idle: nothing to stop, and SIG_IGN is not called
    assert panel.start() and kernel.saved_sigint_handler is interrupt  # installed once a panel
    panel._stop.set()
    panel._thread.join(60)
    assert not worker_processes()

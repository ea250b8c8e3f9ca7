"""Where CI's core-seconds go: a pytest plugin that charges each test the CPU the whole machine spent
while it ran (its ranks, kernels, browsers and servers included, which no rusage of pytest sees).

Run the tests one at a time on an otherwise idle machine, so that the machine's CPU is the test's:

    PYTHONPATH=bench .venv/bin/python -m pytest -p cpu_per_test tests --ignore=tests/browser -q
    CPU_PER_TEST=_build/cpu_browser.json PYTHONPATH=bench .venv/bin/python -m pytest -p cpu_per_test tests/browser -q

Writes {nodeid: [wall s, cpu s]} to $CPU_PER_TEST (default _build/cpu_per_test.json) and prints the
30 costliest and the total. A module- or session-scoped fixture is charged to the test that first
needed it (its setup), as pytest's own --durations charges it.
"""
from __future__ import annotations

import json
import os
import time

import psutil
import pytest

_costs: dict[str, list[float]] = {}


def _busy() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, cpu = time.monotonic(), _busy()
    yield
    _costs[item.nodeid] = [time.monotonic() - wall, _busy() - cpu]


def pytest_sessionfinish(session):
    if not _costs:
        return
    path = os.environ.get("CPU_PER_TEST", "_build/cpu_per_test.json")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(_costs, f, indent=1)


def pytest_terminal_summary(terminalreporter):
    rows = sorted(_costs.items(), key=lambda kv: -kv[1][1])
    write = terminalreporter.write_line
    write(f"cpu per test: {sum(c for _, c in _costs.values()):.0f} CPU s in "
          f"{sum(w for w, _ in _costs.values()):.0f} s over {len(_costs)} tests; the costliest:")
    for nodeid, (wall, cpu) in rows[:30]:
        write(f"{cpu:7.1f} CPU s {wall:7.1f} s  {nodeid}")

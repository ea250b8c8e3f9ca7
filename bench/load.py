"""The timing chapters under load: each run through nbval (as `make test` runs it) while one other
process keeps a core busy, as a second notebook, a build or a browser would on a shared machine.

For each chapter and run: pass or the first failing cell, the wall time, and every comparison the
chapter made through ``helpers.analysis.margins`` (its margin over the rounds' scatter). Writes a
markdown table to stdout (for bench/RESULTS.md) and the raw records to --json.
Not in CI: it is slow (every timing chapter, 3 times). Usage:

    python bench/load.py [--runs 3] [--chapters 04_3_prediction ...] [--quiet-machine]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import machine
from helpers.analysis import margins

ROOT = Path(__file__).resolve().parents[1]
# The chapters whose cells compare measured timings: the Makefile's TIMED_CHAPTERS (one place), and
# the three that time without running alone in CI (5.3's steps, 6.3's overlap, 7.2's detection).
MORE = ["05_3_model_parallel_training", "06_3_tensor_parallel", "07_2_hangs"]
BUSY = "while True: pass"


def timed_chapters() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    block = re.search(r"^TIMED_CHAPTERS := (.*?)(?<!\\)\n", text, re.S | re.M)[1]
    return sorted(block.replace("\\\n", " ").split() + MORE)


def run_chapter(name: str, busy: bool) -> dict:
    """One nbval run of notebooks/<name>.ipynb, with one spinning process beside it if ``busy``."""
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "margins.jsonl"
        env = {**os.environ, margins.RECORD: str(record)}
        competitor = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
        t0 = time.monotonic()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
                                   "--nbval-cell-timeout=900", "-q", "-x", "-p", "no:cacheprovider",
                                   f"notebooks/{name}.ipynb"], cwd=ROOT, env=env, capture_output=True, text=True)
        finally:
            if competitor is not None:
                competitor.kill()
                competitor.wait()
        seconds = time.monotonic() - t0
        out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)  # nbval colours its report
        failed = re.search(r"::Cell (\d+)", out) if done.returncode else None
        error = re.findall(r"^(\w+(?:Error|Exception|Timeout): .*)$", out, re.M)
        return {"chapter": name, "passed": done.returncode == 0, "seconds": seconds,
                "cell": int(failed[1]) if failed else None, "error": error[-1][:200] if error else None,
                "comparisons": margins.read(record), "tail": out[-4000:] if done.returncode else ""}


def table(records: list[dict], runs: int) -> str:
    """Chapter by chapter: passes out of ``runs``, wall times, and each comparison's lowest margin."""
    lines = ["| chapter | passed | seconds a run | comparisons (lowest margin over scatter in the runs) |",
             "|---|---|---|---|"]
    for name in dict.fromkeys(r["chapter"] for r in records):
        mine = [r for r in records if r["chapter"] == name]
        lows: dict[str, float] = {}
        for r in mine:
            for c in r["comparisons"]:
                lows[c["name"]] = min(lows.get(c["name"], float("inf")), c["margin"])
        said = "; ".join(f"{k} {v:.1f}" for k, v in lows.items()) or "none recorded"
        fails = [f"cell {r['cell']}: {r['error']}" for r in mine if not r["passed"]]
        passed = f"{sum(r['passed'] for r in mine)}/{runs}" + (f" ({'; '.join(fails)})" if fails else "")
        seconds = " ".join(f"{r['seconds']:.0f}" for r in mine)
        lines.append(f"| {name} | {passed} | {seconds} | {said} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chapters", nargs="*", default=None)
    parser.add_argument("--quiet-machine", action="store_true", help="no competing process (the baseline)")
    parser.add_argument("--json", type=Path, default=ROOT / "_build" / "load.json")
    args = parser.parse_args()
    chapters = args.chapters or timed_chapters()
    here = machine.this()
    print(f"# {here.describe()} ({here.cpu}): {'no' if args.quiet_machine else 'one'} busy process "
          f"beside each run, {args.runs} runs", flush=True)
    records = []
    for run in range(args.runs):
        for name in chapters:
            records.append(r := run_chapter(name, busy=not args.quiet_machine))
            print(f"run {run + 1} {name}: {'pass' if r['passed'] else 'FAIL cell ' + str(r['cell'])} "
                  f"in {r['seconds']:.0f} s {r['error'] or ''}", flush=True)
            args.json.parent.mkdir(exist_ok=True)
            args.json.write_text(json.dumps(records, indent=1))
    print(table(records, args.runs))


if __name__ == "__main__":
    main()

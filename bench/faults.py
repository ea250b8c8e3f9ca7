"""The launcher's fault table: run the fault suite, then print what each fault's trials did.

Runs ``pytest tests/test_faults.py tests/test_faults_kernel.py`` with HELPERS_FAULT_RESULTS set,
so each case records its row (faults_kit.run_trials), and writes bench/results/faults.md and prints it:
fault | trials | survived | left over. 'survived': trials in which the launcher behaved as the
case states; 'left over': processes, listening ports, fds and run folders left behind (0 expected).

Usage: python bench/faults.py [extra pytest arguments]
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report

ROOT = Path(__file__).resolve().parents[1]
SUITE = ["tests/test_faults.py", "tests/test_faults_kernel.py"]


def _order(fault: str) -> tuple[int, str]:
    number = re.match(r"(\d+)\.", fault)
    return (int(number[1]) if number else 99, fault)


def table(results: dict[str, dict]) -> str:
    rows = ["| fault | trials | survived | left over |", "| --- | --- | --- | --- |"]
    for fault in sorted(results, key=_order):
        r = results[fault]
        rows.append(f"| {fault.replace('|', '/')} | {r['trials']} | {r['survived']} | {r['left_over']} |")
    return "\n".join(rows)


def main(extra: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITE, *extra],
                             cwd=ROOT, env={**os.environ, "HELPERS_FAULT_RESULTS": str(out)},
                             capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        results = json.loads(out.read_text()) if out.exists() else {}
    summary = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(report.write("faults", [f"{report.machine_line()}; {datetime.date.today().isoformat()}. "
                                  f"`python bench/faults.py`: {summary}; wall {wall:.1f} s.", "",
                                  table(results)]))
    if run.returncode:
        print(f"\n{run.stdout[-4000:]}", file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where bench/ scripts leave their tables, and the line that says which machine made them."""
from __future__ import annotations

from pathlib import Path

from helpers.machine import this as this_machine

FOLDER = Path(__file__).resolve().parent / "results"


def machine_line() -> str:
    here = this_machine()
    flags = ", ".join(f for f, on in here.flags().items() if on) or "none of the listed flags"
    return f"{here.cpu} ({flags}), {here.describe()}, torch {here.torch}"


def write(name: str, lines: list[str]) -> str:
    """Write ``bench/results/NAME.md`` and return its text (the caller prints it)."""
    text = "\n".join(lines) + "\n"
    FOLDER.mkdir(exist_ok=True)
    (FOLDER / f"{name}.md").write_text(text)
    return text

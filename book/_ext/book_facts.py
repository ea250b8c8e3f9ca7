"""What the landing page says about the book itself, read from the toc and the notebooks, never typed.

How many chapters there are, which of them launch multi-process jobs (a code cell that calls
``helpers.launch``, ``cluster.run_nodes``, 8.5's ``panel.run`` or is a ``%%torchrun`` cell), and
which carry an explorer (``widgets.*_explorer``), each chapter by the number the web book gives it: the toc's numbered
parts count their chapters on from one another (``use_multitoc_numbering``), and a chapter's
sections are numbered under it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

LAUNCH = re.compile(r"\b(?:helpers\.launch|launch|cluster\.run_nodes|panel\.run)\(|^%%torchrun\b", re.MULTILINE)
EXPLORER = re.compile(r"\bwidgets\.\w+_explorer\(")


def numbered_notebooks(toc: dict) -> dict[str, str]:
    """notebook stem -> its number in the web book, for the notebooks of the toc's numbered parts."""
    out, chapter = {}, 0
    for part in toc.get("parts", []):
        if not part.get("numbered"):
            continue
        for entry in part.get("chapters", []):
            chapter += 1
            files = [(entry["file"], str(chapter))]
            files += [(s["file"], f"{chapter}.{i}") for i, s in enumerate(entry.get("sections", []), 1)]
            out.update({Path(f).name: n for f, n in files if f.startswith("notebooks/")})
    return out


def _code(notebook: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                     if c["cell_type"] == "code")


def _listed(numbers: list[str]) -> str:
    """"chapter 2", or "chapters 2, 4.1 and 4.2"."""
    if len(numbers) == 1:
        return f"chapter {numbers[0]}"
    return "chapters " + ", ".join(numbers[:-1]) + " and " + numbers[-1]


def chapters(root: Path) -> dict:
    """The book's chapters, and which of them launch jobs and carry explorers, by their numbers."""
    numbers = numbered_notebooks(yaml.safe_load((root / "_toc.yml").read_text()))
    code = {stem: _code(root / "notebooks" / f"{stem}.ipynb") for stem in numbers}
    return {"numbers": numbers,
            "launching": [s for s in numbers if LAUNCH.search(code[s])],
            "explorers": [s for s in numbers if EXPLORER.search(code[s])]}


def landing(root: Path, torchrun_chapters=()) -> dict[str, str]:
    """The landing page's MyST substitutions about the book (Markdown); ``torchrun_chapters``: the
    notebooks that also run the ``torchrun`` command (``helpers.plans.TORCHRUN_JOBS``)."""
    facts = chapters(root)
    numbers, launching = facts["numbers"], facts["launching"]
    quiet = [s for s in numbers if s not in launching]
    return {"chapter_count": str(len(numbers)), "launching_count": str(len(launching)),
            "no_job_chapters": ("every one does" if not quiet else
                                f"{_listed([numbers[s] for s in quiet])} "
                                f"work{'s' * (len(quiet) == 1)} in the notebook's own process"),
            "explorer_chapters": _listed([numbers[s] for s in facts["explorers"]]),
            "torchrun_chapters": _listed([numbers[s] for s in numbers if s in torchrun_chapters])}

"""The landing page's facts about the book (book/_ext/book_facts.py): its chapters' count and numbers,
which launch jobs and which carry explorers, read from the toc and the notebooks."""
import json
import re
import sys
from pathlib import Path

import chapter_cells
from helpers import machine, plans, sentences

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_facts  # noqa: E402


def test_numbers_run_on_across_numbered_parts_and_skip_the_others():
    toc = {"parts": [
        {"numbered": True, "chapters": [{"file": "notebooks/a"},
                                        {"file": "book/b", "sections": [{"file": "notebooks/b1"},
                                                                        {"file": "notebooks/b2"}]}]},
        {"numbered": True, "chapters": [{"file": "notebooks/c"}]},
        {"caption": "Appendix", "chapters": [{"file": "book/errata"}, {"file": "notebooks/extra"}]}]}
    assert book_facts.numbered_notebooks(toc) == {"a": "1", "b1": "2.1", "b2": "2.2", "c": "3"}


def _notebook(path: Path, *code: str) -> None:
    cells = [{"cell_type": "code", "source": src.splitlines(keepends=True)} for src in code]
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["# t"]}, *cells]}))


def test_a_chapter_launches_when_a_cell_starts_a_job_not_when_it_shows_the_launcher(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "_toc.yml").write_text(
        "parts:\n  - numbered: true\n    chapters:\n"
        + "".join(f"      - file: notebooks/{n}\n" for n in ("one", "two", "three", "four")))
    _notebook(tmp_path / "notebooks" / "one.ipynb", "r = helpers.launch(recipe, nprocs=2)")
    _notebook(tmp_path / "notebooks" / "two.ipynb", "book.show_source(helpers.launch)", "widgets.fit_explorer()")
    _notebook(tmp_path / "notebooks" / "three.ipynb", "%%torchrun -n 2\nprint(1)")
    _notebook(tmp_path / "notebooks" / "four.ipynb", "runs = cluster.run_nodes(argvs)")
    said = book_facts.landing(tmp_path, torchrun_chapters={"four": ()})
    assert said == {"chapter_count": "4", "launching_count": "3",
                    "no_job_chapters": "chapter 2 works in the notebook's own process",
                    "explorer_chapters": "chapter 2", "torchrun_chapters": "chapter 4"}


def test_the_books_chapters_that_launch_are_those_whose_cells_start_jobs():
    facts = book_facts.chapters(ROOT)
    assert set(facts["numbers"]) == {p.stem for p in chapter_cells.NOTEBOOKS}  # every notebook is in the toc
    starts = {p.stem for p in chapter_cells.NOTEBOOKS
              if any(chapter_cells.launches(p)) or chapter_cells.torchrun_jobs(p)}
    assert set(facts["launching"]) == starts
    assert set(plans.CHAPTER_JOBS) | set(plans.TORCHRUN_JOBS) <= starts


def test_every_substitution_of_the_landing_page_is_defined():
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", (ROOT / "book" / "intro.md").read_text()))
    defined = book_facts.landing(ROOT, plans.TORCHRUN_JOBS).keys() | sentences.landing(machine.this()).keys()
    assert used and used <= defined, used - defined
    assert {"chapter_count", "launching_count", "no_job_chapters", "explorer_chapters"} <= used

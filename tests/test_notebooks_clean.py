"""Notebooks are committed without outputs or execution counts; the built book carries them."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts; clear them"


def test_every_notebook_is_in_the_toc():
    toc = (NOTEBOOKS[0].parent.parent / "_toc.yml").read_text()
    missing = [p.stem for p in NOTEBOOKS if f"notebooks/{p.stem}" not in toc]
    assert not missing, f"not in _toc.yml: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_books_own_self_checks_say_nothing_to_the_reader(path):
    """An exercise's grader is asserted with book.grade, which prints nothing: book.check there
    printed "Not quite. Hint:" under every exercise of a reader who ran the chapter."""
    nb = json.loads(path.read_text())
    loud = [i for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" and "assert book.check(" in "".join(c["source"])]
    assert not loud, f"{path.name}: cells {loud} assert book.check; use book.grade(answer, is_right)"

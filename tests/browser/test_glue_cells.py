"""book/_lab/glue_cells.json, which names the cell behind each value JupyterLab's prose shows before a
run, against the chapters nbval executed in this run (the book's cache): so it runs after them, with
the site's tests, while JupyterLab's own tests run beside the chapters."""
import json
import sys

from conftest import ROOT

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
GLUE_CELLS = json.loads((ROOT / "book" / "_lab" / "glue_cells.json").read_text())


def test_each_marker_names_the_cell_that_really_glues_the_value():
    """glue_cells.json against the notebooks nbval executed in this run (the book's cache)."""
    sys.path.insert(0, str(ROOT / "book" / "_lab"))
    import book_data
    ran = book_data.glue_cells_from_runs()
    assert set(ran) == {n[:-6] for n in NOTEBOOKS}, "run `make notebooks` first: some chapter is not in the cache"
    stale = {nb: {k: (v, ran[nb].get(k)) for k, v in cells.items() if ran[nb].get(k) != v}
             for nb, cells in GLUE_CELLS.items()}
    stale = {nb: d for nb, d in stale.items() if d}
    assert not stale, f"book/_lab/glue_cells.json is out of date (python book/_lab/book_data.py --glue-cells): {stale}"

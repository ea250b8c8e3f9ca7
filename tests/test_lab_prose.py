"""book/_lab's JavaScript under node: JupyterLab's prose must read as the web book's does.

pyformat.js is Python's format() and myst-nb's format_plain_text, the web book's own glue
formatting: checked against both over thousands of values, ties included. prose.js rewrites the
MyST of every chapter's markdown: nothing of MyST's syntax may survive it, and each value not
computed yet names the code cell that computes it (glue_cells.json).
"""
import json
import random
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from myst_nb.core.variables import format_plain_text

from helpers.widgets import shell

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "book" / "_lab"
NODE = shell.node()  # the venv's; a check that cannot run is a failure, not a skip
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
GLUE_REF = re.compile(r"\{glue(?::text)?\}`([^`]+)`")
RAW_MYST = re.compile(r"\{[a-z][\w:-]*\}`|^\s*(```+|:::+)\s*\{|^\([\w-]+\)=", re.M)

RUNNER = r"""
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const mod = require(input.module);
process.stdout.write(JSON.stringify(input.cases.map(c => {
  try { return mod[input.fn](...c); } catch (e) { return {error: e.message}; }
})));
"""


def node(module: str, fn: str, cases: list) -> list:
    payload = json.dumps({"module": str(LAB / "src" / module), "fn": fn, "cases": cases})
    done = subprocess.run([NODE, "-e", RUNNER], input=payload, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def markdown_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def test_numbers_are_formatted_as_python_formats_them():
    rng = random.Random(0)
    values = [0.0, -0.0, 0.125, 0.375, 2.5, 3.5, 0.05, 1.005, 999.95, 1234567.25, 1e-7, 2.675, 0.5, 1.5,
              0.015, 9.9999, 99999.5, 1e22, 5e-324, 0.995, 9.5, 0.945, 1 / 3, 2**40 / 3, 5e15 + 0.5]
    values += [rng.uniform(-1e4, 1e4) for _ in range(150)] + [10 ** rng.uniform(-8, 12) for _ in range(150)]
    values += [round(rng.uniform(0, 100), 2) for _ in range(100)]  # two-decimal values: ties at .1f
    specs = [".2f", ".0%", ".1f", ".0f", ".1%", ".3f", ".1e", ".2g", ".4f", ",.0f", ".0e", "g", ".3g", "e",
             "+.2f", ">10.2f", "010.1f"]
    cases = [[v, s] for v in values for s in specs]
    assert node("pyformat.js", "formatFloat", cases) == [format(v, s) for v, s in cases]


def test_glued_text_is_formatted_as_the_web_book_formats_it():
    texts = ["'gloo'", '"it\'s"', "'a\\nb\\u00e9'", "3.14159", "1e-05", "[1, 2]", "np.float64(1.3)", "True",
             "'50%'", "0.125", "2.5", "'x_y $1'"]
    cases = [[t, s] for t in texts for s in ("", "s")] + [[t, s] for t in ("3.14159", "1e-05", "0.125", "'2.5'")
                                                          for s in (".2f", ".0%", ".1e")]
    assert node("pyformat.js", "formatPlainText", cases) == [format_plain_text(t, s) for t, s in cases]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_myst_syntax_survives_and_each_pending_value_names_its_cell(path):
    cells = json.loads((LAB / "glue_cells.json").read_text()).get(path.stem, {})
    nb = nbformat.read(path, as_version=4)
    number = {c.id: n for n, c in enumerate((c for c in nb.cells if c.cell_type == "code"), 1)}
    producers = {name: number[cell] for name, cell in cells.items() if cell in number}
    sources = markdown_cells(path)
    ctx = {"producers": producers, "docs": {}, "cites": {}}
    shown = node("prose.js", "toMarkdown", [[s, ctx] for s in sources])
    for source, out in zip(sources, shown):
        assert not RAW_MYST.search(out), (path.name, RAW_MYST.search(out)[0], out[:300])
        names = [ref.rsplit(":", 1)[0] if ":" in ref else ref for ref in GLUE_REF.findall(source)]
        markers = re.findall(r"⟨cell (\d+)⟩", out)
        assert markers == [str(producers[n]) for n in names], (path.name, names, markers)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_glued_name_in_the_prose_has_its_cell_on_record(path):
    """book/_lab/glue_cells.json is read off a run (book_data.py --glue-cells); a chapter whose
    prose names a value it does not list would show '⟨a cell above⟩' instead of the cell."""
    cells = json.loads((LAB / "glue_cells.json").read_text()).get(path.stem, {})
    ids = {c.id for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"}
    used = {ref.rsplit(":", 1)[0] if ":" in ref else ref for s in markdown_cells(path) for ref in GLUE_REF.findall(s)}
    assert not used - set(cells), f"{path.name}: not in glue_cells.json: {sorted(used - set(cells))}"
    assert set(cells.values()) <= ids, f"{path.name}: glue_cells.json names cells the notebook no longer has"


def test_values_links_and_citations_render_as_on_the_web():
    ctx = {"values": {"world": "2", "ratio": "0.8125", "where": "'CPU, gloo'"},
           "docs": {"notebooks/03_1_data_parallel": {"title": "Data parallelism", "file": "notebooks/03_1_data_parallel.ipynb"},
                    "book/errata": {"title": "Errata", "file": "book/errata.md"}},
           "cites": {"amdahl1967": {"label": "Amdahl, 1967", "full": "Gene M. Amdahl. Validity. 1967."}}}
    source = ("{glue:text}`world` ranks at {glue:text}`ratio:.0%` on {glue:text}`where`; see {doc}`03_1_data_parallel`,"
              " the {doc}`list <../book/errata>` and {cite}`amdahl1967`.\n\n```{note}\nA *note*.\n```")
    [out] = node("prose.js", "toMarkdown", [[source, ctx]])
    assert '<span class="book-glue" title="world">2</span> ranks at' in out
    assert ">81%</span>" in out and ">CPU, gloo</span>" in out
    assert '<a href="03_1_data_parallel.ipynb">Data parallelism</a>' in out
    assert '<a href="../book/errata.md">list</a>' in out
    assert '[<a href="../book/references.md" title="Gene M. Amdahl. Validity. 1967.">Amdahl, 1967</a>]' in out
    assert '<div class="book-admonition note">' in out and "A *note*." in out


def test_book_data_knows_every_doc_and_citation_the_notebooks_use():
    import sys
    sys.path.insert(0, str(LAB))
    import book_data
    docs, cites = book_data.docs(), book_data.cites()
    for path in NOTEBOOKS:
        for source in markdown_cells(path):
            for target in re.findall(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`", source):
                name = node("prose.js", "docName", [[target, "notebooks"]])[0]
                assert name in docs, (path.name, target)
                assert (ROOT / docs[name]["file"]).exists()
            for keys in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", source):
                assert all(k.strip() in cites for k in keys.split(",")), (path.name, keys)

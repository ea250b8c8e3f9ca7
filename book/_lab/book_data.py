"""What the JupyterLab extension needs to know about the book, written to src/book_data.json.

- docs: every page in _toc.yml, its file and its title (what a {doc} link shows on the web);
- cites: every entry of book/references.bib, its [Author, year] label and full reference,
  formatted as the web book's bibliography formats them (pybtex's unsrt style);
- glue_cells: for each notebook, the code cell that glues each value (by cell id), from
  glue_cells.json beside this file. Before a reader runs that cell, the prose names it.

glue_cells.json is read off a real run: ``python book/_lab/book_data.py --glue-cells`` takes
the notebooks nbval executed last (the book's execution cache, _build/.jupyter_cache), and
tests/browser/test_lab_prose.py fails when it no longer matches them.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GLUE_CELLS = HERE / "glue_cells.json"
GLUE_MIME = "application/papermill.record/text/plain"


def toc_files() -> list[str]:
    """Every docname in _toc.yml, in order (root first)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    names = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                names.append(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))
    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return names


def title(path: Path) -> str:
    if path.suffix == ".ipynb":
        lines = [line for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
                 for line in c.source.splitlines()]
    else:
        lines = path.read_text().splitlines()
    return next((line[2:].strip() for line in lines if line.startswith("# ")), path.stem)


def docs() -> dict:
    out = {}
    for name in toc_files():
        path = next(p for p in (ROOT / f"{name}.ipynb", ROOT / f"{name}.md") if p.exists())
        out[name] = {"title": title(path), "file": str(path.relative_to(ROOT))}
    return out


def cites() -> dict:
    from pybtex.database import parse_file
    from pybtex.plugin import find_plugin
    bib = parse_file(str(ROOT / "book" / "references.bib"))
    style = find_plugin("pybtex.style.formatting", "unsrt")()
    out = {}
    for key, entry in bib.entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [" ".join(p.last_names) or " ".join(p.first_names) for p in people]
        who = (last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2
               else f"{last[0]} et al." if last else entry.fields.get("title", key))
        full = style.format_entry(key, entry).text.render_as("text")
        out[key] = {"label": f"{who}, {entry.fields.get('year', 'n.d.')}", "full": full}
    return out


def glue_cells_from_runs(cache_dir: Path | None = None) -> dict:
    """{notebook stem: {glued name: id of the code cell whose outputs carry it}}, from the
    notebooks as nbval last executed them."""
    from jupyter_cache import get_cache
    # where tests/book_cache.py puts them
    default = Path(os.environ.get("BOOK_CACHE_DIR", ROOT / "_build" / ".jupyter_cache"))
    cache = get_cache(str(cache_dir or default))
    out = {}
    for record in cache.list_cache_records():
        nb = cache.get_cache_bundle(record.pk).nb
        cells = {}
        for cell in nb.cells:
            for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
                name = o.get("metadata", {}).get("scrapbook", {}).get("name")
                if name and GLUE_MIME in o.get("data", {}):
                    cells[name] = cell.id
        out[Path(record.uri).stem] = dict(sorted(cells.items()))
    return dict(sorted(out.items()))


def main(argv: list[str]) -> None:
    if argv == ["--glue-cells"]:
        GLUE_CELLS.write_text(json.dumps(glue_cells_from_runs(), indent=1, ensure_ascii=False) + "\n")
        return
    if argv:
        sys.exit("usage: book_data.py [--glue-cells]")
    data = {"docs": docs(), "cites": cites(), "glue_cells": json.loads(GLUE_CELLS.read_text())}
    (HERE / "src" / "book_data.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])

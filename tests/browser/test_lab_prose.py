"""The book's prose in JupyterLab reads as the web book's (book/_lab): no MyST syntax shows, a value
not computed yet names the cell that computes it, and once a chapter has run, every number in
its prose is the reader's own, formatted as the web book formats the same run."""
import json
import re
import urllib.request

from conftest import ROOT, screenshot
from lab_kit import (assert_the_run_is_in_the_prose, lab, read_prose, refs, run_notebook,  # noqa: F401
                     shut_down, unexpected_errors)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
GLUE_CELLS = json.loads((ROOT / "book" / "_lab" / "glue_cells.json").read_text())
RAW_MYST = re.compile(r"\{[a-z][\w:-]*\}`|```\s*\{|:::\s*\{")


def _open(browser, notebook: str | None) -> None:
    """Open a notebook in the running JupyterLab page without a kernel (the prose before a run needs
    none, and 23 kernels cost CI a minute of its two cores), closing the one before; None: close them all."""
    browser.set_script_timeout(120)
    error = browser.execute_async_script("""
        const [path, done] = [arguments[0], arguments[arguments.length - 1]];
        const app = window.jupyterapp;
        (async () => {
          await app.restored;
          for (const w of Array.from(app.shell.widgets('main')).filter(w => w.context)) {
            await w.sessionContext.shutdown();
            w.dispose();
          }
          if (path === null) return;
          const w = await app.commands.execute('docmanager:open', {path, factory: 'Notebook',
                                                                  kernelPreference: {shouldStart: false, shouldReuse: false}});
          await w.context.ready;
        })().then(() => done(null), e => done(String(e)));""", notebook and f"notebooks/{notebook}")
    assert error is None, f"{notebook} did not open in JupyterLab: {error}"


def test_every_chapter_renders_its_myst_and_names_the_cell_behind_each_value(browser, lab):
    browser.get(f"{lab['url']}/lab?token={lab['token']}&reset")
    WebDriverWait(browser, 120, poll_frequency=0.5).until(
        lambda d: d.execute_script("return !!(window.jupyterapp && window.jupyterapp.shell.widgets)"))
    problems = []
    for notebook in NOTEBOOKS:
        _open(browser, notebook)
        prose = read_prose(browser)
        for cell in prose["cells"]:
            if raw := RAW_MYST.search(cell["text"]):
                problems.append(f"{notebook}: raw MyST {raw[0]!r} in {cell['text'][:120]!r}")
            wanted = [name for name, _ in refs(cell["source"])]
            if [g["name"] for g in cell["glue"]] != wanted or not all(g["pending"] for g in cell["glue"]):
                problems.append(f"{notebook}: values {wanted} shown as {cell['glue']}")
        # before a run, each value is a marker naming its cell's number, counted as Run All counts
        markers = {g["text"] for c in prose["cells"] for g in c["glue"]}
        if any(not re.fullmatch(r"⟨cell \d+⟩", m) for m in markers):
            problems.append(f"{notebook}: markers {sorted(markers)}")
        if notebook == "01_background.ipynb":
            screenshot(browser, "jupyterlab_prose_before_a_run")
    _open(browser, None)
    assert not problems, "\n".join(problems)
    kernels = json.load(urllib.request.urlopen(f"{lab['url']}/api/kernels?token={lab['token']}", timeout=30))
    assert kernels == [], kernels  # the prose rendered with no kernel behind it
    # make lab's settings (book/_lab/overrides.json): JupyterLab asks nothing of a new reader
    assert "Jupyter news" not in browser.find_element(By.TAG_NAME, "body").text


def test_a_part_7_chapter_shows_the_readers_own_numbers(browser, lab):
    """Chapter 1's run (test_lab.py) is checked the same way."""
    state, _ = run_notebook(browser, lab, "07_3_cluster.ipynb")
    assert not unexpected_errors(state), state
    assert_the_run_is_in_the_prose(browser)
    screenshot(browser, "jupyterlab_prose_after_07_3_cluster")
    assert shut_down(lab, state["kernel"]) == []


def test_each_marker_names_the_cell_that_really_glues_the_value():
    """glue_cells.json against the notebooks nbval executed in this run (the book's cache)."""
    import sys
    sys.path.insert(0, str(ROOT / "book" / "_lab"))
    import book_data
    ran = book_data.glue_cells_from_runs()
    assert set(ran) == {n[:-6] for n in NOTEBOOKS}, "run `make notebooks` first: some chapter is not in the cache"
    stale = {nb: {k: (v, ran[nb].get(k)) for k, v in cells.items() if ran[nb].get(k) != v}
             for nb, cells in GLUE_CELLS.items()}
    stale = {nb: d for nb, d in stale.items() if d}
    assert not stale, f"book/_lab/glue_cells.json is out of date (python book/_lab/book_data.py --glue-cells): {stale}"

"""JupyterLab driven through its real UI, for the tests: a fresh server, a notebook opened and run,
its kernel shut down."""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil
import pytest
from myst_nb.core.variables import format_plain_text
from conftest import ROOT
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# No autosave: a run's outputs must never be written into the committed notebooks. The news
# prompt is off in the venv's own settings (book/_lab/overrides.json), as a reader's `make lab` gets it.
SETTINGS = {"@jupyterlab/docmanager-extension/plugin": {"autosave": False}}
GLUE_REF = re.compile(r"\{glue(?::text)?\}`([^`]+)`")
RUN_LIMIT = 420  # seconds for a chapter's run-all; chapter 1 takes about a minute on 2 cores

# The open notebook, read from JupyterLab's own model (window.jupyterapp).
_PANEL = """const app = window.jupyterapp;
const w = app && Array.from(app.shell.widgets('main')).find(x => x.content && x.content.model && x.sessionContext);"""
_READY = _PANEL + """
const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
return !!(k && k.connectionStatus === 'connected' && k.status === 'idle' && w.content.model.cells.length);"""
_CELLS = _PANEL + """
const cells = [], m = w.content.model;
for (let i = 0; i < m.cells.length; i++) {
  const c = m.cells.get(i);
  if (c.type !== 'code') continue;
  const types = [];
  for (let j = 0; j < c.outputs.length; j++) types.push(c.outputs.get(j).type);
  cells.push({index: i, tags: c.getMetadata('tags') || [], count: c.executionCount, outputs: types});
}
return {cells, status: w.sessionContext.session.kernel.status, kernel: w.sessionContext.session.kernel.id};"""


# Every markdown cell of the open notebook as the reader sees it: its source, its rendered text,
# and each glued value's span (book/_lab); null until every one has rendered. Also the glued
# values in the outputs, as the web build reads them (metadata.scrapbook).
_PROSE = _PANEL + """
if (!w) return null;
const cells = [], values = {};
for (const cell of w.content.widgets) {
  const m = cell.model;
  if (m.type === 'code') {
    for (let j = 0; j < m.outputs.length; j++) {
      const o = m.outputs.get(j), name = o.metadata && o.metadata.scrapbook && o.metadata.scrapbook.name;
      if (name && o.data['application/papermill.record/text/plain'] !== undefined)
        values[name] = String(o.data['application/papermill.record/text/plain']);
    }
    continue;
  }
  if (m.type !== 'markdown') continue;
  const out = cell.node.querySelector('.jp-RenderedMarkdown');
  if (!cell.rendered || !out || !out.textContent.trim()) return null;
  cells.push({source: m.sharedModel.getSource(), text: out.innerText,
              glue: [...out.querySelectorAll('.book-glue')].map(s => ({name: s.title.split(':')[0], text: s.textContent,
                      pending: s.classList.contains('book-glue-pending')}))});
}
return {cells, values};"""


def refs(source: str) -> list[tuple[str, str]]:
    """(name, format spec) of each glued value in a markdown source, as myst-nb splits them."""
    return [(r.rsplit(":", 1)[0], r.rsplit(":", 1)[1]) if ":" in r else (r, "s") for r in GLUE_REF.findall(source)]


def read_prose(browser, timeout: float = 60) -> dict:
    """The open notebook's prose, once JupyterLab has rendered all of it."""
    return WebDriverWait(browser, timeout, poll_frequency=0.5).until(lambda d: d.execute_script(_PROSE))


def assert_the_run_is_in_the_prose(browser) -> None:
    """Every value the open notebook's prose glues is shown, formatted as the web book's build
    formats the same outputs (myst-nb's format_plain_text), none left waiting on its cell."""
    prose = read_prose(browser)
    values = prose["values"]
    shown = [(g["name"], g["text"], g["pending"]) for c in prose["cells"] for g in c["glue"]]
    wanted = [(name, format_plain_text(values[name], spec), False) if name in values else (name, "(never glued)", False)
              for c in prose["cells"] for name, spec in refs(c["source"])]
    assert shown == wanted, [(s, w) for s, w in zip(shown, wanted) if s != w]
    assert shown, "the prose glues nothing"


@pytest.fixture(scope="module")
def lab():
    """JupyterLab on 127.0.0.1 with a fresh token and empty settings; stopped, with its tree, at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token, state = secrets.token_hex(16), tempfile.mkdtemp(prefix="book-lab-")
    for plugin, values in SETTINGS.items():
        path = os.path.join(state, f"{plugin}.jupyterlab-settings")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(values, f)
    before = {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")}
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": state, "JUPYTERLAB_WORKSPACES_DIR": state,
           "HELPERS_OFFLINE": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={ROOT}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.workspaces_dir={state}", f"--LabApp.user_settings_dir={state}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI's containers run as root
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(os.path.join(state, "lab.log"), "w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    else:
        server.kill()
        raise RuntimeError(f"JupyterLab did not start; see {state}/lab.log")
    yield {"url": url, "token": token, "pid": server.pid}
    tree = [server, *psutil.Process(server.pid).children(recursive=True)]
    server.terminate()
    # The server shuts its kernels down first, each with its ranks' forkserver; under CI's load (two
    # browser workers beside the unit tests) that once took more than 20 s (2026-12-08)
    gone, alive = psutil.wait_procs(tree, timeout=60)
    for p in alive:
        p.kill()
    shutil.rmtree(state, ignore_errors=True)
    assert {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")} == before, "a notebook was saved"
    assert not alive, f"JupyterLab left {[p.pid for p in alive]} running after it was stopped"


def unexpected_errors(state: dict) -> list[int]:
    return [c["index"] for c in state["cells"] if "error" in c["outputs"] and "raises-exception" not in c["tags"]]


def run_notebook(browser, lab, notebook, until: str | None = None) -> tuple[dict, dict]:
    """Open a notebook in JupyterLab and run it, all of it or the cells up to the first that
    contains ``until``, watching the page while they run. Ends early on an unexpected error,
    where JupyterLab stops running the rest."""
    browser.get(f"{lab['url']}/lab/tree/notebooks/{notebook}?token={lab['token']}&reset")
    WebDriverWait(browser, 120, poll_frequency=0.5).until(lambda d: d.execute_script(_READY))
    last = None  # the index of the last cell to run; None: all
    if until is None:
        browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    else:
        last = browser.execute_script(_PANEL + """
            const m = w.content.model; let i = 0;
            while (i < m.cells.length && !m.cells.get(i).sharedModel.getSource().includes(arguments[0])) i++;
            w.content.activeCellIndex = i + 1;
            app.commands.execute('notebook:run-all-above');
            return i;""", until)
    seen, t0 = {"rank_lines": False, "progress_bar": False}, time.time()
    while time.time() - t0 < RUN_LIMIT:
        time.sleep(0.5)
        outputs = browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
        seen["rank_lines"] |= any("[rank" in o.text for o in outputs[-6:])
        seen["progress_bar"] |= bool(browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output progress"))
        state = browser.execute_script(_CELLS)
        wanted = [c for c in state["cells"] if last is None or c["index"] <= last]
        if state["status"] == "idle" and (unexpected_errors(state) or all(c["count"] is not None for c in wanted)):
            return state, seen
    raise AssertionError(f"{notebook} did not finish in {RUN_LIMIT} s: {browser.execute_script(_CELLS)}")


def shut_down(lab, kernel_id: str) -> list[int]:
    """Shut the kernel down through the server's API; the pids of the run still alive afterwards."""
    run = [p for p in psutil.Process(lab["pid"]).children(recursive=True)]
    req = urllib.request.Request(f"{lab['url']}/api/kernels/{kernel_id}?token={lab['token']}", method="DELETE")
    urllib.request.urlopen(req, timeout=30)
    _, alive = psutil.wait_procs(run, timeout=20)
    return [p.pid for p in alive]

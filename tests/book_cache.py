"""pytest plugin: hand the notebooks nbval just executed to the book build, so CI runs each once.

``pytest -p book_cache --nbval-lax notebooks`` records every cell's outputs as
nbval runs it, and at the end stores each fully passed notebook in Jupyter
Book's execution cache (``_build/.jupyter_cache``). ``jupyter-book build`` with
``execute_notebooks: cache`` then renders those outputs instead of running the
notebook a second time. A notebook whose code changed misses the cache and is
executed by the build as usual.

nbval drops ``update_display_data`` messages (the launcher's progress bar
updates in place); this plugin keeps the last update of each display, so the
book shows the bar's final state, as a live run would.
"""
from __future__ import annotations

import copy
import fcntl
import os
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import IPyNbCell, IPyNbFile

CACHE = Path(os.environ.get("BOOK_CACHE_DIR", Path(__file__).resolve().parent.parent / "_build" / ".jupyter_cache"))
_updates: dict[str, dict] = {}
_ran: dict[Path, nbformat.NotebookNode] = {}  # each notebook as nbval read it, before any cell ran
_cells: dict[Path, dict[int, list]] = defaultdict(dict)
_failed: set[Path] = set()
_seconds: dict[Path, float] = defaultdict(float)  # the cells' run time, for the execution report

_original_get = IPyNbFile.get_kernel_message


def _get_kernel_message(self, timeout=None, stream="iopub"):
    msg = _original_get(self, timeout=timeout, stream=stream)
    content = msg.get("content", {})
    display_id = content.get("transient", {}).get("display_id")
    if display_id and msg["msg_type"] == "display_data":
        content.setdefault("metadata", {})["book_cache_display_id"] = display_id
    elif display_id and msg["msg_type"] == "update_display_data":
        _updates[display_id] = {"data": content["data"], "metadata": content.get("metadata", {})}
        msg["msg_type"] = "comm_book_cache"  # nbval skips comm messages quietly
    return msg


IPyNbFile.get_kernel_message = _get_kernel_message


def _final(outputs: list) -> list:
    outs = copy.deepcopy(outputs)
    for out in outs:
        display_id = out.get("metadata", {}).pop("book_cache_display_id", None)
        if display_id in _updates:  # the last update's picture, and its description (alt text)
            out["data"] = copy.deepcopy(_updates[display_id]["data"])
            out["metadata"] = copy.deepcopy(_updates[display_id]["metadata"])
    return outs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if not isinstance(item, IPyNbCell) or report.when != "call":
        return
    path = Path(str(item.parent.fspath))
    # Hash what nbval ran, not what is on disk at the end: the file may be edited meanwhile.
    _ran.setdefault(path, copy.deepcopy(item.parent.nb))
    _seconds[path] += report.duration
    if report.failed:
        _failed.add(path)
    elif item.test_outputs is not None:
        _cells[path][item.cell_num] = _final(item.test_outputs)


def pytest_sessionfinish(session, exitstatus):
    if not _ran:
        return
    from jupyter_cache import get_cache
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / f"{CACHE.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist's workers, each with its own notebooks, write in turn
        _store(get_cache(str(CACHE)))


def _store(cache) -> None:
    from jupyter_cache.base import CacheBundleIn
    for path, ran in _ran.items():
        # A notebook that failed, or did not run every cell, keeps no entry: the book must not
        # show outputs of an older version beside code that no longer produces them.
        for record in cache.list_cache_records():
            if record.uri == str(path):
                cache.remove_cache(record.pk)
        outputs = _cells.get(path, {})
        nb = copy.deepcopy(ran)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if path in _failed or len(outputs) != len(code):
            continue
        for n, cell in enumerate(code):  # nbval numbers the code cells from 0
            cell.outputs = [nbformat.from_dict(o) for o in outputs[n]]
            cell.execution_count = n + 1
        # execution_seconds is the field myst-nb's {nb-exec-table} reads as the run time
        bundle = CacheBundleIn(nb, str(path), data={"execution_seconds": round(_seconds[path], 2)})
        cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)

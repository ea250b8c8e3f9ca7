import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HELPERS_OFFLINE", "1")

# Under pytest-xdist each worker gets a temp dir of its own, before anything asks for one: the leak
# checks count run folders in the temp dir, and another worker's launch must not look like a leak.
# The dirs lie in one folder of the controller's (a worker's parent), which it removes once every
# worker has exited: a worker removing its own would pull the folder from under multiprocessing's
# own exit cleanup.
WORKERS_TMP = Path(tempfile.gettempdir()) / f"tests-{os.getpid()}"
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    mine = Path(tempfile.gettempdir()) / f"tests-{os.getppid()}" / worker
    mine.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(mine)


def pytest_unconfigure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(WORKERS_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_worker_left_behind():
    """Every test must leave no worker process, whatever it did to the launcher."""
    from helpers.launch import worker_processes
    yield
    left = [p for p in worker_processes() if p.is_running()]
    assert not left, f"worker processes left behind: {left}"


# `make unit-alone` runs these tests one at a time beside the timed chapters, which hold beside one
# busy process (bench/load.py), not beside ranks: a test there that starts ranks, a kernel or any
# other Python process fails at once, naming the Makefile's list it does not belong in.
if os.environ.get("UNIT_ALONE") == "1":
    import importlib
    import subprocess

    def _refuse(what: str):
        raise RuntimeError(f"UNIT_ALONE: this test starts {what}; move its file from the Makefile's "
                           "UNIT_ALONE to the tests that run after the timed chapters")

    def _no_ranks(*args, **kwargs):
        _refuse("ranks")

    class _NoPython(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            program = Path(str(args if isinstance(args, (str, os.PathLike)) else args[0])).name
            if program.startswith("python") or program in ("torchrun", "jupyter"):
                _refuse(f"a Python process ({program})")
            super().__init__(args, *rest, **kwargs)

    # the module, not the package's attribute of the same name (the launch function)
    importlib.import_module("helpers.launch").forkserver_context = _no_ranks
    subprocess.Popen = _NoPython

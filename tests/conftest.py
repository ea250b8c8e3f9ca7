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

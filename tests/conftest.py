import os
import shutil
import tempfile

import pytest

os.environ.setdefault("HELPERS_OFFLINE", "1")

# Under pytest-xdist each worker gets a temp dir of its own, before anything asks for one: the leak
# checks count run folders in the temp dir, and another worker's launch must not look like a leak.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["TMPDIR"] = tempfile.tempdir = tempfile.mkdtemp(prefix=f"tests-{worker}-")

    def pytest_unconfigure(config):
        shutil.rmtree(tempfile.tempdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_worker_left_behind():
    """Every test must leave no worker process, whatever it did to the launcher."""
    from helpers.launch import worker_processes
    yield
    left = [p for p in worker_processes() if p.is_running()]
    assert not left, f"worker processes left behind: {left}"

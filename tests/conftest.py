import os

import pytest

os.environ.setdefault("HELPERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def no_worker_left_behind():
    """Every test must leave no worker process, whatever it did to the launcher."""
    from helpers.launch import worker_processes
    yield
    left = [p for p in worker_processes() if p.is_running()]
    assert not left, f"worker processes left behind: {left}"

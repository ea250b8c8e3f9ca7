"""helpers.compat: the one place that knows how torch releases differ."""
import dataclasses

import pytest
from torch.distributed.launcher.api import LaunchConfig

from helpers import compat


@pytest.mark.parametrize("text, want", [("2.14.1+cu130", (2, 14)), ("2.7.1", (2, 7)), ("3.0.0a0+git12ab", (3, 0))])
def test_version_reads_major_and_minor(text, want):
    assert compat.version(text) == want


def test_a_torch_older_than_the_oldest_is_refused_in_one_line():
    compat.check(f"{compat.OLDEST[0]}.{compat.OLDEST[1]}.0")  # the oldest itself is fine
    with pytest.raises(RuntimeError, match=r"needs torch 2\.7 or newer; this is torch 2\.6\.0") as e:
        compat.check("2.6.0")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not a torch version"):
        compat.version("nightly")


def test_launch_config_keeps_what_this_torch_knows_and_drops_the_rest():
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    config = compat.launch_config(min_nodes=1, max_nodes=1, nproc_per_node=3, a_setting_from_the_future=1)
    assert config.nproc_per_node == 3 and "a_setting_from_the_future" not in vars(config)
    if "shutdown_timeout" in known:  # newer than 2.7: the launcher's 5 s reaches the agent
        assert compat.launch_config(min_nodes=1, max_nodes=1, nproc_per_node=1, shutdown_timeout=5).shutdown_timeout == 5

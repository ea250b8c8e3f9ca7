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


# --- The one-tensor collectives: *_single in 2.14, older names before ---------------------------

def test_every_one_tensor_collective_name_of_this_torch_is_known():
    import inspect
    import re

    import torch.distributed as dist
    here = {n for n in dir(dist) if re.fullmatch(r"_?(all_gather|reduce_scatter)_(single|into_tensor|tensor|base)", n)}
    assert here and here <= set(compat.COLLECTIVES), here - set(compat.COLLECTIVES)
    for name, (op, message) in compat.COLLECTIVES.items():
        if hasattr(dist, name):  # the parameter Traffic reads the message from is there
            assert message in inspect.signature(getattr(dist, name)).parameters, name


def test_the_older_names_are_used_where_the_single_ones_are_missing(monkeypatch):
    import torch.distributed as dist
    seen = []
    pairs = (("all_gather_single", "all_gather_into_tensor"), ("reduce_scatter_single", "reduce_scatter_tensor"))
    for new, old in pairs:
        monkeypatch.setattr(dist, new, lambda out, inp, group=None, name=new: seen.append(name), raising=False)
        monkeypatch.setattr(dist, old, lambda out, inp, group=None, name=old: seen.append(name))
    compat.all_gather_single(None, None)
    compat.reduce_scatter_single(None, None)
    monkeypatch.delattr(dist, "all_gather_single")
    monkeypatch.delattr(dist, "reduce_scatter_single")  # torch 2.7
    compat.all_gather_single(None, None)
    compat.reduce_scatter_single(None, None)
    assert seen == ["all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "reduce_scatter_tensor"]


def test_no_other_module_names_a_collective_that_only_some_releases_have():
    import ast
    from pathlib import Path
    root = Path(compat.__file__).parent
    versioned = set(compat.COLLECTIVES) - {"all_reduce"}
    found = []
    for path in root.rglob("*.py"):
        if path.name == "compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            on_dist = isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("dist", "torch.distributed")
            looked_up = (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr")
                         and len(node.args) > 1 and isinstance(node.args[1], ast.Constant))
            named = node.attr if on_dist else node.args[1].value if looked_up else None
            if named in versioned:
                found.append(f"{path.relative_to(root)}:{node.lineno} {named}")
    assert not found, found

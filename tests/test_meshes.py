"""Every DeviceMesh comes from ``helpers.devices.mesh``, and every sharding call is given one.

Left to itself, torch builds a mesh on ``torch._C._get_accelerator()``: ``cuda`` on any machine
with a GPU, even inside gloo ranks whose tensors are on the CPU (a 1-GPU machine runs 2 ranks on
gloo). ``fully_shard`` then moves the parameters to cuda:0 and the loss meets CPU targets. This
machine has no GPU, so the tests pretend its accelerator is one: torch's default would then fail
here as it does there, and the recipes must not reach it.
"""
import ast
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import helpers.dist
from helpers import devices, protocol
from helpers.recipes import fsdp
from helpers.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
MESH_BUILDERS = {"init_device_mesh", "DeviceMesh"}  # only helpers/devices.py may call these
# callable -> (position, keyword) of its mesh argument; left out or None, torch picks a default mesh
NEEDS_MESH = {"fully_shard": (None, "mesh"), "parallelize_module": (1, "device_mesh"),
              "distribute_tensor": (1, "device_mesh"), "distribute_module": (1, "device_mesh"),
              "from_local": (1, "device_mesh")}


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _is_none(node: ast.AST | None) -> bool:
    return node is None or (isinstance(node, ast.Constant) and node.value is None)


def mesh_problems(source: str, where: str, may_build: bool = False) -> list[str]:
    """Each place in ``source`` that builds a mesh itself, or shards without an explicit mesh."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not may_build:
            problems += [f"{where}:{node.lineno} imports {a.name}" for a in node.names if a.name in MESH_BUILDERS]
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name in MESH_BUILDERS and not may_build:
            problems.append(f"{where}:{node.lineno} builds a mesh with {name}: use devices.mesh")
        if name in NEEDS_MESH:
            position, keyword = NEEDS_MESH[name]
            given = next((k.value for k in node.keywords if k.arg == keyword), None)
            if given is None and position is not None and len(node.args) > position:
                given = node.args[position]
            if _is_none(given) and not any(k.arg is None for k in node.keywords):  # **kwargs: cannot tell
                problems.append(f"{where}:{node.lineno} calls {name} without a mesh: torch would pick "
                                "its accelerator's")
    return problems


def _code_cells(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def test_every_mesh_in_the_package_and_the_notebooks_comes_from_devices():
    problems = []
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        problems += mesh_problems(path.read_text(), str(path.relative_to(ROOT)),
                                  may_build=path == ROOT / "helpers" / "devices.py")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        problems += mesh_problems(_code_cells(path), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_scan_finds_what_it_looks_for():
    assert len(mesh_problems("fully_shard(m)\nfully_shard(m, mesh=None)\nfully_shard(m, mesh=mesh)", "x")) == 2
    assert len(mesh_problems("parallelize_module(m, plan=p)\nparallelize_module(m, mesh, p)", "x")) == 1
    assert len(mesh_problems("from torch.distributed.device_mesh import init_device_mesh\n"
                             "init_device_mesh(d.type, (2,))\nDeviceMesh('cpu', [0, 1])", "x")) == 3
    assert mesh_problems("init_device_mesh(d.type, (2,))", "devices.py", may_build=True) == []


@pytest.fixture
def gloo_on_a_gpu_machine(monkeypatch):
    """A rank on gloo where torch's accelerator is a GPU: a 1-GPU machine's two ranks."""
    monkeypatch.setenv(protocol.BACKEND, "gloo")
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))


def test_torchs_own_default_mesh_follows_the_accelerator_not_the_rank(gloo_on_a_gpu_machine):
    from torch.distributed.fsdp import fully_shard
    with helpers.dist.distributed() as ctx:
        assert ctx.device == torch.device("cpu")
        try:
            layer = fully_shard(nn.Linear(4, 4))
        except RuntimeError:  # no GPU here to move the parameters to: the same mistake, caught sooner
            return
        assert next(layer.parameters()).device.type == "cuda"  # a real GPU took the gloo rank's weights


def test_fsdp_on_gloo_keeps_every_tensor_on_the_ranks_device(gloo_on_a_gpu_machine):
    r = fsdp.reshard(steps=1, batch_size=4, width=32, depth=2)
    assert r["backend"] == "gloo" and r["on"]["states"] == r["off"]["states"]
    with helpers.dist.distributed() as ctx:
        mesh = Topology(dp=1).build_mesh(ctx.device)
        model = fsdp.apply_fsdp(nn.Sequential(nn.Linear(4, 4)), mesh["dp"])
        assert mesh.device_type == "cpu" and {p.device.type for p in model.parameters()} == {"cpu"}
        assert model(torch.ones(2, 4)).device == ctx.device
        assert devices.of_group() == ctx.device

"""What the chapters' code cells launch and glue, read from their source without running them."""
from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DEFAULT_NPROCS = inspect.signature(helpers.launch).parameters["nprocs"].default
# Calls that start ranks: launch itself, and 8.5's launch panel run from a cell (always with nprocs=)
LAUNCHES = ("helpers.launch", "launch", "panel.run")
GLUE_REF = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)")


def cells(path: Path, kind: str) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _python(src: str) -> ast.Module:
    return ast.parse("\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%")))


def _loop_values(tree: ast.AST, name: str) -> tuple[int, ...] | None:
    """The literal ints a name runs over in the cell (``for p in (1, 4)``), or None."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and node.target.id == name and isinstance(node.iter, (ast.Tuple, ast.List)):
            values = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.iter.elts):
                return tuple(values)
    return None


def launches(path: Path) -> tuple[set[int], list[str]]:
    """The fixed rank counts a chapter launches, and the expressions of the planned ones."""
    fixed, planned = set(), []
    for src in cells(path, "code"):
        if src.startswith("%%torchrun"):
            fixed.add(int(re.search(r"-n\s+(\d+)", src).group(1)))
            continue
        tree = _python(src)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) in LAUNCHES):
                continue
            nprocs = next((k.value for k in node.keywords if k.arg == "nprocs"), None)
            if nprocs is None:
                fixed.add(DEFAULT_NPROCS)
            elif isinstance(nprocs, ast.Constant):
                fixed.add(nprocs.value)
            elif isinstance(nprocs, ast.Name) and _loop_values(tree, nprocs.id):
                fixed.update(_loop_values(tree, nprocs.id))
            else:
                planned.append(ast.unparse(nprocs))
    return fixed, planned


def _backends(path: Path) -> dict[int, set[str]]:
    """{nprocs: the backend expressions passed with it ("None" when none is)}, over every launch."""
    found: dict[int, set[str]] = {}
    for src in cells(path, "code"):
        if src.startswith("%%"):
            continue
        tree = _python(src)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in LAUNCHES:
                kw = {k.arg: k.value for k in node.keywords}
                nprocs = kw.get("nprocs", ast.Constant(DEFAULT_NPROCS))
                counts = ((nprocs.value,) if isinstance(nprocs, ast.Constant) else
                          _loop_values(tree, nprocs.id) or () if isinstance(nprocs, ast.Name) else ())
                backend = kw.get("backend", ast.Constant(None))
                if isinstance(backend, ast.Name) and _loop_iter(tree, backend.id):
                    backend = _loop_iter(tree, backend.id)
                for n in counts:
                    found.setdefault(n, set()).add(ast.unparse(backend))
    return found


def _loop_iter(tree: ast.AST, name: str) -> ast.expr | None:
    """What a name runs over in the cell (``for b in plans.f(here)``), or None."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            return node.iter
    return None


def gloo_launches(path: Path) -> set[int]:
    """The rank counts whose every launch passes ``backend="gloo"``: those run on gloo whatever the
    machine (a count also launched without it runs where launch picks, too)."""
    return {n for n, backends in _backends(path).items() if backends == {"'gloo'"}}


def paired_launches(path: Path) -> set[int]:
    """The rank counts whose every launch passes a backend from ``plans.throughput_backends``."""
    return {n for n, backends in _backends(path).items()
            if all(b.startswith("plans.throughput_backends(") for b in backends)}


# --- torchrun jobs started as subprocesses ------------------------------------------------------

TORCHRUN_WORDS = ("torch.distributed.run", "torchrun")
HELPER_JOBS = ("restarts.torchrun_restart", "restarts.lose_a_node")  # run torchrun jobs of their own


def _assignments(path: Path) -> dict[str, ast.expr]:
    """Every ``name = value`` at the top level of the chapter's cells (the last one wins)."""
    found = {}
    for src in cells(path, "code"):
        for stmt in _python(src).body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                found[stmt.targets[0].id] = stmt.value
    return found


def _resolve(node: ast.expr | None, names: dict[str, ast.expr]) -> ast.expr | None:
    while isinstance(node, ast.Name) and node.id in names:
        node = names.pop(node.id)  # popped: a name assigned from itself cannot loop
    return node


def _keyword(call: ast.Call, name: str, default):
    value = next((k.value for k in call.keywords if k.arg == name), None)
    return value.value if isinstance(value, ast.Constant) else default


def env_backend(env: ast.expr | None, names: dict[str, ast.expr]):
    """The backend an environment expression sets: a dict's HELPERS_BACKEND, or what a call to
    ``cluster.shared_host_env`` returns; None where it sets none."""
    from helpers import cluster, protocol
    env = _resolve(env, names)
    if isinstance(env, ast.Call) and ast.unparse(env.func).endswith("shared_host_env"):
        return cluster.shared_host_env(1).get(protocol.BACKEND)
    if isinstance(env, ast.Dict):
        for key, value in zip(env.keys, env.values):
            if key is None:
                if (found := env_backend(value, names)) is not None:
                    return found
            elif ast.unparse(key) in ("protocol.BACKEND", repr(protocol.BACKEND)):
                return value.value if isinstance(value, ast.Constant) else ast.unparse(value)
    return None


def _argv_job(argvs: ast.expr | None, names: dict[str, ast.expr]) -> tuple[int, int] | None:
    """(agents, ranks per agent) of ``cluster.loopback_argvs(...)`` or ``[cluster.standalone_argv(...)]``."""
    from helpers import cluster
    argvs = _resolve(argvs, names)
    if isinstance(argvs, ast.Call) and ast.unparse(argvs.func).endswith("loopback_argvs"):
        params = inspect.signature(cluster.loopback_argvs).parameters
        return (_keyword(argvs, "nnodes", params["nnodes"].default),
                _keyword(argvs, "nproc", params["nproc"].default))
    if isinstance(argvs, ast.List):
        one = [_resolve(e, names) for e in argvs.elts]
        if all(isinstance(e, ast.Call) and ast.unparse(e.func).endswith("standalone_argv") for e in one):
            return len(one), _keyword(one[0], "nproc", None)
    return None


def _command_job(src: str) -> tuple[int, int]:
    """(agents, ranks per agent) of a torchrun command line written out in a cell: every node of it
    is started on this host."""
    flag = lambda name, default: int(m.group(1)) if (m := re.search(rf"--{name}[ =](\d+)", src)) else default
    return flag("nnodes", 1), flag("nproc-per-node", 1)


def torchrun_jobs(path: Path, helper_jobs: Callable[[str], list] = lambda name: []) -> list:
    """Every torchrun job the chapter starts as subprocesses on this host, as ``plans.HostJob``s:
    ``cluster.run_nodes`` of argvs built by ``helpers.cluster``, any ``subprocess`` call in a cell
    that writes out a torchrun command, ``netns.two_hosts``, and the jobs of the helpers that start their own
    (``helper_jobs(name)`` lists those, the test records them)."""
    from helpers import plans
    names, found = _assignments(path), []
    for src in cells(path, "code"):
        for node in ast.walk(_python(src)):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            env = next((k.value for k in node.keywords if k.arg == "env"), None)
            if func.endswith("run_nodes"):
                shape = _argv_job(node.args[0] if node.args else None, dict(names))
                assert shape, f"{path.name}: cannot read the argvs of {ast.unparse(node)}"
                found.append(plans.HostJob(*shape, env_backend(env, dict(names))))
            elif func.startswith("subprocess.") and any(w in src for w in TORCHRUN_WORDS):
                found.append(plans.HostJob(*_command_job(src), env_backend(env, dict(names))))
            elif func.endswith("two_hosts"):  # netns: 2 agents of one rank, one in each namespace;
                from helpers import cluster, protocol  # it gives them cluster.shared_host_env itself
                found.append(plans.HostJob(2, 1, cluster.shared_host_env(2).get(protocol.BACKEND)))
            elif func in HELPER_JOBS:
                found += helper_jobs(func)
    return found


def glue_calls(path: Path) -> list[tuple[ast.Call, bool]]:
    """Every ``book.glue(...)`` call, and whether it is a top-level statement of its cell."""
    found = []
    for src in cells(path, "code"):
        tree = _python(src)
        top = {id(s.value) for s in tree.body if isinstance(s, ast.Expr)}
        found += [(n, id(n) in top) for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and ast.unparse(n.func) == "book.glue"]
    return found


def glued_names(path: Path, chapter_sentences: set[str]) -> tuple[set[str], list[re.Pattern]]:
    """The names a chapter glues: literal keywords, the keys of a ``{f"..": v for ..}``, its sentences."""
    names, patterns = set(), []
    for call, _ in glue_calls(path):
        names |= {k.arg for k in call.keywords if k.arg}
        for k in call.keywords:
            if k.arg is not None:
                continue
            if ast.unparse(k.value).startswith("sentences.for_chapter"):
                names |= chapter_sentences
            elif isinstance(k.value, ast.DictComp) and isinstance(k.value.key, ast.JoinedStr):
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in k.value.key.values]
                patterns.append(re.compile("".join(parts)))
            else:
                raise AssertionError(f"{path.name}: glue(**{ast.unparse(k.value)}) cannot be read statically")
    return names, patterns


def glue_refs(path: Path) -> set[str]:
    return {m.group(1) for src in cells(path, "markdown") for m in GLUE_REF.finditer(src)}

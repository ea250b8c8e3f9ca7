"""What the chapters' code cells launch and glue, read from their source without running them."""
from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DEFAULT_NPROCS = inspect.signature(helpers.launch).parameters["nprocs"].default
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
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) in ("helpers.launch", "launch")):
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


def gloo_launches(path: Path) -> set[int]:
    """The rank counts of the launches that pass ``backend="gloo"`` with a constant ``nprocs``."""
    found = set()
    for src in cells(path, "code"):
        if src.startswith("%%"):
            continue
        for node in ast.walk(_python(src)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("helpers.launch", "launch"):
                kw = {k.arg: k.value for k in node.keywords}
                if ast.unparse(kw.get("backend", ast.Constant(None))) == "'gloo'" and \
                        isinstance(kw.get("nprocs"), ast.Constant):
                    found.add(kw["nprocs"].value)
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

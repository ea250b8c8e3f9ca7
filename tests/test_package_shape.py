"""The package's shape, held by tests: one home per concept, and the rules DESIGN.md states."""
import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = sorted((ROOT / "helpers").rglob("*.py"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_theory_imports_no_torch():
    """helpers.theory is arithmetic: numpy, scipy, the standard library and itself, nothing else."""
    allowed = {"numpy", "scipy", "dataclasses", "math", "__future__"}
    for path in sorted((ROOT / "helpers" / "theory").rglob("*.py")):  # the planner package too
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = set() if node.level else {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"


@pytest.mark.parametrize("path", HELPERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_short(path):
    assert len(path.read_text().splitlines()) <= 320, f"{path.name}: split it along its seams"


# What asks the machine what it is; only helpers/machine.py may.
MACHINE_QUERIES = re.compile(r"sched_getaffinity|os\.cpu_count|cuda\.device_count|cuda\.is_available|"
                             r"/proc/cpuinfo|get_device_name")


def _code_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return path.read_text()


def test_cores_and_gpus_are_read_in_one_module():
    places = [*HELPERS, *sorted((ROOT / "bench").glob("*.py")), *NOTEBOOKS]
    readers = [str(p.relative_to(ROOT)) for p in places if MACHINE_QUERIES.search(_code_of(p))]
    assert readers == ["helpers/machine.py"], readers


def _imported_helpers(path: Path, modules: dict) -> set[str]:
    """The helpers modules ``path`` imports, at its top or inside a function alike."""
    name = modules[path]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = ".".join(filter(None, [base if node.level else "", node.module or ""]))
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules.values() else target
                         for a in node.names)
    return found & set(modules.values()) - {name}


def test_no_module_of_helpers_imports_one_that_imports_it_back():
    """No import circle, even through a function's own import: ``machine`` (the machine's facts)
    depends on nothing of the launcher; a circle means two modules that are one."""
    modules = {p: ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in sorted((ROOT / "helpers").rglob("*.py"))}
    graph = {modules[p]: _imported_helpers(p, modules) for p in modules}
    assert "helpers.protocol" not in graph["helpers.machine"]

    def on_a_circle(start):
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        return False
    circles = [m for m in sorted(graph) if on_a_circle(m)]
    assert not circles, f"modules on an import circle: {circles}"


def test_one_median():
    """statistics.median is called in training.median alone; no sorted(x)[n // 2] anywhere."""
    for path in [*HELPERS, *sorted((ROOT / "bench").glob("*.py")), *NOTEBOOKS]:
        code = _code_of(path)
        rel = str(path.relative_to(ROOT))
        assert not re.search(r"\[\s*len\([^)]*\)\s*//\s*2\s*\]", code), f"{rel}: use helpers.training.median"
        if rel != "helpers/training.py":
            assert "statistics.median" not in code and "np.median" not in code, \
                f"{rel}: use helpers.training.median"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_check_cells_are_visible_on_demand(path):
    """A cell that asserts the prose is tagged hide-input, never remove-input."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        assert "remove-input" not in tags, f"{path.name} cell {i}: use hide-input"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_cells_are_short_and_define_nothing(path):
    """No def or class in a chapter cell but an exercise's checker; no cell over 15 lines."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        assert len(src.splitlines()) <= 15, f"{path.name} cell {i}: {len(src.splitlines())} lines"
        body = "\n".join(ln for ln in src.splitlines() if not ln.startswith("%"))
        defs = [n.name for n in ast.walk(ast.parse(body)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert all(d.endswith("_right") for d in defs), f"{path.name} cell {i} defines {defs}"


# The widest code line the web book shows at 1280 px without a sideways scroll bar
# (tests/browser/test_layout.py measures it; 130 characters fit, 132 did not).
SHOWN_LINE_CHARS = 130


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_shown_code_fits_a_laptop_page(path):
    """The browser's layout test, caught before the book is built."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or "remove-cell" in cell.get("metadata", {}).get("tags", []):
            continue
        for line in "".join(cell["source"]).splitlines():
            assert len(line) <= SHOWN_LINE_CHARS, f"{path.name} cell {i}: {len(line)} characters: {line[:60]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_glue_is_kept_apart_from_asserts(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "glue(" in src:
            assert "assert " not in src, f"{path.name} cell {i}: glue and asserts in one cell"
            assert "myst_nb" not in src and "display=False" not in src, \
                f"{path.name} cell {i}: glue through book.glue"

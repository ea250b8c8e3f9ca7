"""tests/book_cache.py: the book renders only outputs of the code that produced them."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent


def _notebook(path: Path, *cells: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _nbval(path: Path, cache: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(HERE), "BOOK_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "book_cache", "--nbval-lax",
                           "--nbval-current-env", "-p", "no:cacheprovider", str(path)],
                          cwd=path.parent, env=env, capture_output=True, text=True, timeout=300).returncode


def _records(cache: Path) -> list:
    from jupyter_cache import get_cache
    return get_cache(str(cache)).list_cache_records()


def test_a_notebook_edited_while_it_runs_is_cached_as_it_ran(tmp_path):
    nb_path, cache = tmp_path / "chapter.ipynb", tmp_path / "cache"
    edit = (f"import nbformat; nb = nbformat.read({str(nb_path)!r}, 4); "
            f"nb.cells[1].source = 'y = 3'; nbformat.write(nb, {str(nb_path)!r})")
    _notebook(nb_path, edit, "y = 2")
    ran = nbformat.read(nb_path, 4)
    assert _nbval(nb_path, cache) == 0
    from jupyter_cache import get_cache
    c = get_cache(str(cache))
    record = c.match_cache_notebook(ran)  # the code that ran is what is cached
    assert record.uri == str(nb_path)
    try:
        c.match_cache_notebook(nbformat.read(nb_path, 4))  # the edited file is not
    except KeyError:
        pass
    else:
        raise AssertionError("the edited notebook matched outputs that its code never produced")


def test_a_notebook_that_fails_loses_its_cached_outputs(tmp_path):
    nb_path, cache = tmp_path / "chapter.ipynb", tmp_path / "cache"
    _notebook(nb_path, "x = 1")
    assert _nbval(nb_path, cache) == 0 and [r.uri for r in _records(cache)] == [str(nb_path)]
    _notebook(nb_path, "x = 1", "assert x == 2")
    assert _nbval(nb_path, cache) != 0
    assert _records(cache) == []


def test_the_cache_records_the_run_time_and_an_updated_display_keeps_its_description(tmp_path):
    nb_path, cache = tmp_path / "chapter.ipynb", tmp_path / "cache"
    _notebook(nb_path, "import time; time.sleep(0.5)",
              "from IPython.display import display\n"
              "h = display({'text/plain': 'first'}, raw=True, metadata={'text/plain': {'alt': 'a'}}, display_id=True)\n"
              "h.update({'text/plain': 'last'}, raw=True, metadata={'text/plain': {'alt': 'b'}})")
    assert _nbval(nb_path, cache) == 0
    from jupyter_cache import get_cache
    c = get_cache(str(cache))
    (record,) = _records(cache)
    assert record.data["execution_seconds"] >= 0.5  # what the execution report shows
    (out,) = c.get_cache_bundle(record.pk).nb.cells[1].outputs
    assert out["data"]["text/plain"] == "last" and out["metadata"] == {"text/plain": {"alt": "b"}}

"""book.show_source: each listing under the file it comes from."""
from helpers import book, dist


def test_a_decorated_function_is_listed_under_its_own_file():
    shown = book.show_source(dist.distributed, dist.setup).data  # distributed is a contextmanager
    assert shown.count("From `helpers/dist.py`:") == 2 and "contextlib.py" not in shown
    assert "def distributed(" in shown and "def setup(" in shown

"""The build's internal-link check (book/_ext/site_links.py) finds what is broken, and only that."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
from site_links import broken_links  # noqa: E402


def test_missing_pages_files_and_anchors_are_found_and_the_rest_pass(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "fig.png").write_bytes(b"png")
    (tmp_path / "index.html").write_text(
        '<a href="book/a.html#there">ok</a> <a href="book/gone.html">gone</a> <img src="_images/fig.png">'
        '<a href="https://example.org/x">external, not checked</a> <a href="#top">self</a><div id="top"></div>')
    (tmp_path / "book" / "a.html").write_text(
        '<h1 id="there">A</h1><a href="../index.html#nowhere">bad anchor</a><img src="../_images/lost.png">'
        '<a href="../../outside.html">outside the site</a>')
    assert sorted(broken_links(tmp_path)) == [
        ("book/a.html", "../../outside.html"), ("book/a.html", "../_images/lost.png"),
        ("book/a.html", "../index.html#nowhere"), ("index.html", "book/gone.html")]

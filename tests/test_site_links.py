"""The build's internal-link check (book/_ext/site_links.py) finds what is broken, and only that."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
from site_links import broken_links, offsite_assets  # noqa: E402


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


def test_what_a_page_loads_from_another_host_is_found_and_links_out_are_not(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "index.html").write_text(
        '<script src="_static/book.js"></script><script src="https://cdn.jsdelivr.net/npm/x/embed-amd.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.com/a.css"><link rel="canonical" href="https://book.example/">'
        '<img src="http://example.org/fig.png"><a href="https://colab.research.google.com/x">a link out</a>'
        '<link rel="stylesheet" href="_static/book.css">')
    (tmp_path / "_static" / "inside.html").write_text('<script src="https://cdn.example/x.js"></script>')
    assert offsite_assets(tmp_path) == [
        ("index.html", "https://cdn.jsdelivr.net/npm/x/embed-amd.js"), ("index.html", "//fonts.example.com/a.css"),
        ("index.html", "http://example.org/fig.png")]


def test_the_book_asks_myst_nb_for_no_widget_manager_from_a_cdn():
    """8.5's panel leaves widget state in a notebook that `make book` executes itself; myst-nb then adds
    its widget manager's scripts, from two CDNs by default. The web book shows the panel's HTML instead."""
    from jupyter_book.config import get_final_config
    root = Path(__file__).resolve().parent.parent
    config, _ = get_final_config(user_yaml=root / "_config.yml", sourcedir=root,
                                 cli_config={"latex_individualpages": False})
    assert config["nb_ipywidgets_js"] == {}
    assert ["html", "application/vnd.jupyter.widget-view+json", None] in config["nb_mime_priority_overrides"]

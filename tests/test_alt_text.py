"""Figures describe themselves: the PNG a cell shows carries alt text, and the book's image keeps it."""
from types import SimpleNamespace

import pytest
from IPython.core.interactiveshell import InteractiveShell

from helpers import book, plots
from helpers.plots.alt_text import describe


def test_a_figure_is_described_by_its_titles_labels_and_legend():
    text = describe(plots.amdahl_curves(0.1, 1024, 8))
    assert text.startswith("Figure. 2 panels: α = 0.1 (x: devices p, y: speedup S) showing ideal S = p")
    assert "efficiency (x: devices p, y: efficiency S / p) showing Amdahl, Gustafson" in text


@pytest.fixture
def shell():
    yield InteractiveShell.instance()
    InteractiveShell.clear_instance()


def test_a_cell_shows_a_figure_as_png_with_its_description(shell):
    fig = plots.amdahl_curves(0.2, 64, 4)  # finish() installs the formatter in the running shell
    data, metadata = shell.display_formatter.format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert metadata["image/png"]["alt"] == describe(fig)


def test_the_book_turns_the_description_into_the_image_alt():
    made = []

    class Renderer:
        def render_image(self, data):
            made.append({"uri": "x.png"})
            return made

    png = SimpleNamespace(mime_type="image/png", output_metadata={"image/png": {"alt": "Figure. A panel."}})
    assert book.FigureAltText.handle_mime(Renderer(), png, False) == [{"uri": "x.png", "alt": "Figure. A panel."}]
    plain = SimpleNamespace(mime_type="image/png", output_metadata={})
    assert book.FigureAltText.handle_mime(Renderer(), plain, False) is None  # myst-nb's own renderer draws it

"""Every figure carries a description of itself, for readers who cannot see it.

``describe(fig)`` reads what the figure already states: its title, each panel's
title, axis labels and legend. ``show_with_alt_text()`` makes IPython display a
Figure as a PNG whose output metadata holds that description; the book's
myst-nb plugin (``helpers.book.FigureAltText``) turns it into the image's alt.
"""
from __future__ import annotations

import io

from matplotlib.figure import Figure


def _panel(ax) -> str:
    title = ax.get_title() or ax.get_title("left") or "a panel"
    axes = [f"{name}: {label}" for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if label]
    legend = ax.get_legend()
    shown = [t.get_text() for t in legend.get_texts()] if legend else []
    parts = [title] + ([f"({', '.join(axes)})"] if axes else []) + ([f"showing {', '.join(shown)}"] if shown else [])
    return " ".join(parts)


def describe(fig: Figure) -> str:
    """One sentence: 'Figure: <title>. 2 panels: <title> (x: .., y: ..) showing <legend>; ...'."""
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    title = fig._suptitle.get_text() if fig._suptitle else ""
    head = f"Figure: {title}." if title else "Figure."
    if not panels:
        return head
    word = "Panel" if len(panels) == 1 else f"{len(panels)} panels"
    return f"{head} {word}: " + "; ".join(_panel(ax) for ax in panels) + "."


def png_with_alt_text(fig: Figure):
    """What IPython shows for a Figure: the PNG the inline backend would draw, and its description."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue(), {"alt": describe(fig)}


def show_with_alt_text() -> None:
    """In IPython, display every Figure with its description (idempotent; a no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if (shell := get_ipython()) is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, png_with_alt_text)

"""What a notebook needs around the runs: the scale knob, source listings, glue, exercises.

The machine's facts are ``helpers.machine``; this module only presents things.
"""
from __future__ import annotations

import inspect
import os
import textwrap
from typing import Any, Callable


def scale() -> float:
    """``BOOK_SCALE`` (default 1): multiply workloads by it for longer, steadier runs on bigger machines."""
    value = float(os.environ.get("BOOK_SCALE", "1"))
    if value <= 0:
        raise ValueError(f"BOOK_SCALE must be positive, got {value}")
    return value


def scaled(n: int, minimum: int = 1) -> int:
    return max(minimum, round(n * scale()))


def show_source(*objs: Any):
    """Render the source of functions, classes or modules as highlighted code, each under its file."""
    from IPython.display import Markdown
    parts = []
    for o in objs:
        # unwrap: a decorated function (a contextmanager) would name contextlib.py as its file
        where = "helpers/" + inspect.getsourcefile(inspect.unwrap(o)).split("/helpers/")[-1]
        code = textwrap.dedent(inspect.getsource(o)).rstrip()
        parts.append(f"From `{where}`:\n\n```python\n{code}\n```")
    return Markdown("\n\n".join(parts))


def html_table(header: list, rows: list[list]):
    """A plain HTML table (the book renders a notebook's Markdown output without tables)."""
    from IPython.display import HTML

    def line(tag: str, cells: list) -> str:
        return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"
    return HTML("<table>" + line("th", header) + "".join(line("td", r) for r in rows) + "</table>")


def glue(**values: Any) -> None:
    """Hand each value to the prose by name (myst-nb's ``glue``, shown nowhere in the cell)."""
    from myst_nb import glue as myst_glue
    for name, value in values.items():
        # A numpy scalar's text is 'np.float64(1.3)', which the prose's format spec cannot read.
        myst_glue(name, value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value,
                  display=False)


def check(answer: Any, is_right: Callable[[Any], bool], hint: str) -> bool | None:
    """Grade the reader's answer: None while unanswered, else whether ``is_right(answer)``, said
    aloud with a hint if not."""
    if answer is None:
        print("Not answered yet: set the variable above and run this cell again.")
        return None
    ok = grade(answer, is_right)
    print("Correct." if ok else f"Not quite. Hint: {hint}")
    return ok


def grade(answer: Any, is_right: Callable[[Any], bool]) -> bool:
    """``check`` without a word: the book's own self-checks of an exercise's grader (that it takes
    the right answer and refuses a plausible wrong one) must not print "Not quite" at the reader."""
    return bool(is_right(answer))


class FigureAltText:
    """myst-nb mime renderer (entry point in pyproject.toml): a PNG output that carries an ``alt``
    in its metadata (``helpers.plots.alt_text``) becomes an image with that description."""

    mime_priority_overrides = ()

    @staticmethod
    def handle_mime(renderer, data, inline: bool):
        alt = data.output_metadata.get(data.mime_type, {}).get("alt") if data.mime_type == "image/png" else None
        if not alt:
            return None
        nodes = renderer.render_image_inline(data) if inline else renderer.render_image(data)
        for node in nodes:
            node["alt"] = str(alt)
        return nodes

"""The web book's own Sphinx extension: a site that reads the same with or without the internet.

* MathJax and a CJK font are served from the site (``_static/``, fetched from npm by
  ``make``); the build fails with the command to run if either is missing.
* sphinx-thebe's scripts are dropped: Jupyter Book registers them twice on every page
  (a console SyntaxError) and they load thebe from a CDN. The launch buttons are
  the way to run a page.
* The landing page's machine facts are MyST substitutions from ``helpers.sentences``, and its facts
  about the book itself (how many chapters, which launch jobs) from ``book_facts``.
* ``book.css`` fits code and math to the column; ``book.js`` makes the header's sidebar toggles work.
* The landing redirect that sphinx-external-toc writes as ``index.html`` is one <meta> line;
  a browser then asks for /favicon.ico, a 404 in the console. It gets the site's icon and a link.
* The build fails on a broken internal link: Sphinx checks its own references,
  but not the links inside notebook outputs and raw HTML. It fails too on a page that
  loads anything from another host (myst-nb's widget manager comes from CDNs by default).
"""
from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

STATIC = Path(__file__).resolve().parent.parent / "_static"
MATHJAX = "mathjax/tex-mml-chtml.js"
CJK_FONT = "fonts/noto-sans-sc/400.css"  # the article's Chinese, readable where no CJK font is installed


def _configure(app: Sphinx, config) -> None:
    for asset in (MATHJAX, CJK_FONT):
        if not (STATIC / asset).is_file():
            raise ExtensionError(f"{STATIC / asset} is missing: run `make book`, which fetches it from npm.")
    config.html_static_path.append(str(STATIC))
    config.mathjax_path = MATHJAX
    from book_facts import landing  # beside this file, like site_links
    from helpers import machine, plans, sentences
    config.myst_substitutions = {**config.myst_substitutions, **sentences.landing(machine.this()),
                                 **landing(STATIC.parent.parent, plans.TORCHRUN_JOBS)}


def _drop_thebe(app: Sphinx, pagename, templatename, context, doctree) -> None:
    def thebe(js) -> bool:
        return "thebe" in (getattr(js, "filename", None) or "") or "THEBE_JS_URL" in str(
            getattr(js, "attributes", {}).get("body", ""))
    if "script_files" in context:
        context["script_files"] = [js for js in context["script_files"] if not thebe(js)]


def _whole_redirect(app: Sphinx, exception) -> None:
    index = Path(app.outdir) / "index.html"
    if exception is None and app.builder.format == "html" and index.is_file():
        text = index.read_text(encoding="utf-8").strip()
        if text.startswith('<meta http-equiv="Refresh"') and text.count("\n") == 0:
            target = text.split("url=", 1)[1].split('"', 1)[0]
            icon = Path(app.config.html_favicon or "").name
            index.write_text(
                f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{text}\n'
                f'<link rel="icon" href="_static/{icon}"><title>{app.config.html_title}</title></head>\n'
                f'<body><a href="{target}">{app.config.html_title}</a></body></html>\n', encoding="utf-8")


def _check_links(app: Sphinx, exception) -> None:
    if exception is None and app.builder.format == "html":
        from site_links import broken_links, offsite_assets  # beside this file, on Jupyter Book's sys.path
        # a link to another edition (book_i18n) is checked once all are in _build/html: i18n/build.py
        if broken := broken_links(Path(app.outdir), alternates=False):
            raise ExtensionError("broken internal links:\n" + "\n".join(f"  {page}: {href}" for page, href in broken))
        if offsite := offsite_assets(Path(app.outdir)):
            raise ExtensionError("pages that load from off the site, so fail offline (ship it in _static/):\n"
                                 + "\n".join(f"  {page}: {url}" for page, url in offsite))


def setup(app: Sphinx) -> dict:
    app.setup_extension("book_i18n")  # translated editions (locale/): glue in translated prose, edition links
    app.connect("config-inited", _configure)
    app.connect("html-page-context", _drop_thebe)
    app.connect("build-finished", _whole_redirect, priority=900)  # after sphinx-external-toc writes it
    app.connect("build-finished", _check_links, priority=950)
    app.add_css_file(CJK_FONT)
    app.add_css_file("book.css")
    app.add_js_file("book.js")  # the sidebar toggles in the article header work (see the file)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

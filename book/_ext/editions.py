"""The book's editions: the English one (``jupyter-book build .``) and the Chinese one, from the same
notebooks, through Sphinx's gettext catalogs (``book/locale/zh_CN/LC_MESSAGES/<page>.po``).

    python book/_ext/editions.py gettext   # _build/gettext/<page>.pot: the English messages, one catalog a page
    python book/_ext/editions.py update    # each page's .po brought up to its .pot (new messages, fuzzy, obsolete)
    python book/_ext/editions.py html      # _build/html/zh/: the Chinese edition, from the English build's cache
    python book/_ext/editions.py check     # every link of _build/html, the editions' links to each other included

It calls Jupyter Book's own ``build_sphinx`` (what ``jupyter-book build`` calls) with the same
``_config.yml``, so the extensions, MyST settings and executed outputs are the English build's. The CLI
cannot: every builder shares ``_build/.doctrees`` (gettext's environment is refused by html's), and its
output is always ``<path-output>/_build/html``. myst-nb keeps its cache and ``jupyter_execute/`` beside
the output folder, so the Chinese edition builds in ``_build/zh_CN/html`` with the English cache named
outright (no notebook runs twice), and is copied to ``_build/html/zh/``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
LOCALE = ROOT / "book" / "locale"
LANG, FOLDER = "zh_CN", "zh/"


def _sphinx(builder: str, outdir: Path, doctrees: Path, **overrides) -> None:
    from jupyter_book.cli.main import builder_specific_actions
    from jupyter_book.sphinx import build_sphinx
    overrides = {"nb_execution_cache_path": str(BUILD / ".jupyter_cache"), "latex_individualpages": False,
                 "external_toc_path": (ROOT / "_toc.yml").as_posix(), "nitpicky": True, **overrides}
    result = build_sphinx(ROOT, outdir, doctreedir=doctrees, noconfig=True, path_config=ROOT / "_config.yml",
                          confoverrides=overrides, builder=builder, use_external_toc=True,
                          warningiserror=True, keep_going=True)
    builder_specific_actions(result, "custom", outdir, "book", None, print)  # raises on a warning


def update() -> None:
    """Every page's catalog brought up to the English: new messages added, changed ones kept as fuzzy
    (Sphinx then shows the English until a translator clears the flag), gone ones made obsolete."""
    from babel.messages.pofile import read_po, write_po
    pot_dir = BUILD / "gettext"
    for pot in sorted(pot_dir.rglob("*.pot")):
        po = LOCALE / LANG / "LC_MESSAGES" / pot.relative_to(pot_dir).with_suffix(".po")
        with pot.open("rb") as f:
            template = read_po(f)
        if po.is_file():
            with po.open("rb") as f:
                catalog = read_po(f, locale=LANG)
            catalog.update(template, update_header_comment=False)
        else:
            catalog, _ = template, po.parent.mkdir(parents=True, exist_ok=True)
            catalog.locale = LANG
        with po.open("wb") as f:
            write_po(f, catalog, width=0, omit_header=False, ignore_obsolete=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["gettext", "update", "html", "check"])
    step = parser.parse_args(argv).step
    start = time.monotonic()
    if step == "gettext":
        _sphinx("gettext", BUILD / "gettext", BUILD / "gettext" / ".doctrees")
    elif step == "update":
        update()
    elif step == "html":
        _sphinx("html", BUILD / LANG / "html", BUILD / LANG / ".doctrees", language=LANG)
        site = BUILD / "html" / FOLDER
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(BUILD / LANG / "html", site, ignore=shutil.ignore_patterns(".buildinfo"))
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from site_links import broken_links
        if broken := broken_links(BUILD / "html"):
            print("\n".join(f"  {page}: {href}" for page, href in broken))
            print(f"{len(broken)} broken links in {BUILD / 'html'}, the editions' links to each other included")
            return 1
    print(f"editions: {step} done in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

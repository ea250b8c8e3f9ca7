"""The book's translated editions (Sphinx gettext, ``locale/<lang>/LC_MESSAGES``): what the English
build needs nothing of, but a translated page would get wrong without.

* **Glued numbers in translated prose.** Sphinx parses each translated paragraph (a .po msgstr) as
  a document of its own, and myst-nb parses that as plain MyST: there is no notebook behind it, so
  ``{glue:text}`acc_single:.1%``` finds no glue data: the number is left out of the page and the
  build warns "notebooks/01_background.ipynb:1: WARNING: No key 'acc_single' found in glue data for
  this document." Here such a role, in a translated snippet of a notebook, is read as
  ``{glue:text}`/notebooks/01_background.ipynb::acc_single:.1%```, a reference to the page's own
  notebook, which myst-nb resolves after parsing from the ``.glue.json`` it wrote for the page (a
  key with no format gets ``:s``: myst-nb splits the format off at the last colon, ``::`` too).
  The book's prose uses only ``{glue:text}``.
* **The parts' captions in the sidebar.** sphinx-external-toc inserts the toc's toctrees (and
  their ``caption:``, "The article, section by section") in a transform at priority 100, after
  Sphinx's Locale transform (20) has translated the page: gettext extracts the captions into the
  root page's catalog (``book/intro.po``) but nothing applies them. ``TranslateTocCaptions`` (101)
  does.
* **Outputs stay as they ran** (``LeaveOutputsOut``): gettext takes no message from a cell's outputs.
* **The other edition, one click away.** ``book_editions`` (language -> [label, folder under the
  English site]) lists the editions; each page gets a ``<link rel="alternate" hreflang>`` to the
  same page in every other one, which ``_static/book_i18n.js`` shows as a button in the header.
"""
from __future__ import annotations

from os import path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain


class TranslateTocCaptions(SphinxTransform):
    default_priority = 101  # after sphinx_external_toc's InsertToctrees (100)

    def apply(self, **kwargs) -> None:
        if not self.config.language or self.config.language == "en":
            return
        toctrees = [t for t in self.document.findall(addnodes.toctree) if t.get("caption")]
        if not toctrees:
            return
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        catalog, found = init_locale([path.join(self.env.srcdir, d) for d in self.config.locale_dirs],
                                     self.config.language, domain)
        if not found:
            return
        for toctree in toctrees:
            original = toctree.get("rawcaption") or toctree["caption"]
            if (translated := catalog.gettext(original)) != original:
                toctree["rawcaption"] = original  # the msgid, for gettext and the sidebar's caption node
                toctree["caption"] = translated


class LeaveOutputsOut(SphinxTransform):
    """A cell's outputs are what its code printed, drew and listed as it ran: no catalog's messages.
    They stay as they ran in every edition, like the code, and the figures' descriptions (their images'
    alt) carry the run's own numbers, which would make new English messages on every machine. So does
    a ``machine-facts`` block (the landing page's table of this machine's launches)."""
    default_priority = 10  # before the Locale transform (20), which is also what gettext reads

    def apply(self, **kwargs) -> None:
        if self.app.builder.name != "gettext":
            return
        left_out = {"cell_output", "machine-facts"}
        for output in self.document.findall(lambda n: isinstance(n, nodes.container) and left_out & set(n["classes"])):
            for node in output.findall(nodes.Element):
                if isinstance(node, nodes.image):
                    node["alt"] = ""
                elif isinstance(node, nodes.TextElement):
                    node["translatable"] = False


def _patch_glue_text() -> None:
    from myst_nb.ext.glue.roles import PasteTextRole
    if getattr(PasteTextRole, "_book_i18n", False):
        return
    run = PasteTextRole.run

    def translated_run(self):
        document = self.document
        source = document.current_source or ""
        if "nb_renderer" not in document and source.endswith("<translated>") and "::" not in self.text:
            env = document.settings.env
            self.text = f"/{env.doc2path(env.docname, False)}::{self.text}" + ("" if ":" in self.text else ":s")
        return run(self)

    PasteTextRole.run = translated_run
    PasteTextRole._book_i18n = True


def _edition_links(app: Sphinx, pagename, templatename, context, doctree) -> None:
    editions = app.config.book_editions
    here = app.config.language or "en"
    if here not in editions:
        return
    # from this page up to its edition's root, then up to the English site's root
    up = "../" * pagename.count("/") + "../" * editions[here][1].count("/")
    links = [f'<link rel="alternate" hreflang="{lang.replace("_", "-")}" href="{up}{folder}{pagename}.html" '
             f'title="{label}">' for lang, (label, folder) in editions.items() if lang != here]
    context["metatags"] = context.get("metatags", "") + "\n".join(links) + "\n"


def setup(app: Sphinx) -> dict:
    # e.g. {"en": ["English", ""], "zh_CN": ["中文", "zh/"]}; empty: no links (an edition not built
    # would be a broken link)
    app.add_config_value("book_editions", {}, "html", types=[dict])
    _patch_glue_text()
    app.add_transform(TranslateTocCaptions)
    app.add_transform(LeaveOutputsOut)
    app.connect("html-page-context", _edition_links)
    app.add_js_file("book_i18n.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}

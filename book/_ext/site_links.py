"""A built site, checked: every internal link's page or file exists, and so does its #anchor; and
nothing a page loads (a script, a stylesheet, an image, a frame) comes from off the site."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self, alternates: bool = True):
        super().__init__()
        self.alternates = alternates  # False: leave out <link rel="alternate" hreflang> (another edition)
        self.links: list[str] = []
        self.assets: list[str] = []  # what the browser fetches to show the page, not what a reader clicks
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "link" and a.get("rel") == "alternate" and a.get("hreflang") and not self.alternates:
            return
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and key == "href" and a.get("rel") == "canonical"):
                self.links.append(a[key])
        if tag in _FETCHED and (url := a.get(_FETCHED[tag])) and (tag != "link" or _LOADS & set(
                (a.get("rel") or "").split())):
            self.assets.append(url)


# The tags whose attribute the browser fetches on its own; a <link> only for these rels.
_FETCHED = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src", "audio": "src",
            "embed": "src", "link": "href"}
_LOADS = {"stylesheet", "icon", "preload", "modulepreload", "prefetch", "manifest"}


def _read(path: Path, alternates: bool = True) -> _Page:
    page = _Page(alternates)
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path, alternates: bool = True) -> list[tuple[str, str]]:
    """(page, link) for every link inside ``site`` whose target or anchor is missing; ``alternates``
    False leaves out the links to the page in another edition (not built yet, or outside ``site``)."""
    site = site.resolve()
    pages = {p: _read(p, alternates) for p in site.rglob("*.html") if "_static" not in p.parts}
    broken = []
    for path, page in sorted(pages.items()):
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # external: not reachable from here, so not checked
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_relative_to(site) or not target.exists():
                broken.append((str(path.relative_to(site)), link))
            elif parts.fragment and target.suffix == ".html":
                ids = (pages.get(target) or _read(target)).ids
                if unquote(parts.fragment) not in ids:
                    broken.append((str(path.relative_to(site)), link))
    return broken


def offsite_assets(site: Path) -> list[tuple[str, str]]:
    """(page, url) for everything a page of ``site`` loads from another host: it fails offline."""
    return [(str(path.relative_to(site)), url)
            for path in sorted(site.resolve().rglob("*.html")) if "_static" not in path.parts
            for url in _read(path).assets if urlsplit(url).netloc]

"""How far each catalog of the Chinese edition is translated, and whether a translation kept what
the page needs (tests/test_i18n.py fails on any problem it reports).

    python book/_ext/catalogs.py [--pot _build/gettext]

Reads ``book/locale/<lang>/LC_MESSAGES/**/*.po`` with Babel (in the book's venv: Sphinx needs it). Per catalog: translated, fuzzy (the English changed since; Sphinx shows the English until
someone clears the flag), untranslated, and, given the .pot files, pages with no catalog and
catalogs whose page is gone. Per message, a translation must keep every MyST role of the English
(``{glue:text}`acc:.1%```, ``{doc}`` targets, ``{cite}`` keys...), its inline math and its
``{{ substitutions }}``: a dropped glue role is a number missing from the page, a dropped math span
a formula. A message untranslated or fuzzy is a problem too: the page would show its English.
"""
from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r"\{([a-z:-]+)\}`([^`]*)`")
MATH = re.compile(r"(?<![\\$])\$(?!\$)([^$]+?)(?<!\\)\$")
SUBST = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# CommonMark's emphasis rules against Chinese punctuation: "**在网页上：**每一页" is no bold (a closing
# ** after punctuation must be followed by a space or punctuation), nor is "文字**「引用」**" (an opening
# ** before punctuation must follow a space or punctuation). Chinese has no spaces to fix it with.
def _punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def bad_emphasis(text: str) -> bool:
    for k, m in enumerate(re.finditer(r"\*\*", text)):
        before = text[m.start() - 1] if m.start() else " "
        after = text[m.end()] if m.end() < len(text) else " "
        word = lambda ch: not ch.isspace() and not _punct(ch)  # noqa: E731
        if k % 2 == 0 and word(before) and _punct(after):
            return True
        if k % 2 == 1 and _punct(before) and word(after):
            return True
    return False


def _target(role: str, text: str) -> str:
    """What must survive translation: a role's target, not its title (``{doc}`标题 <errata>```)."""
    if role in ("doc", "ref", "numref", "term") and (m := re.search(r"<([^>]+)>\s*$", text)):
        return m.group(1)
    return text


def needs(text: str) -> Counter:
    return Counter([f"{{{r}}}`{_target(r, t)}`" for r, t in ROLE.findall(text)]
                   + [f"${m}$" for m in MATH.findall(text)] + [f"{{{{{s}}}}}" for s in SUBST.findall(text)])


def check(lang: str, pot: Path | None) -> tuple[list[str], int]:
    lc = ROOT / "book" / "locale" / lang / "LC_MESSAGES"
    problems, rows = [], []
    for po_path in sorted(lc.rglob("*.po")):
        domain = po_path.relative_to(lc).with_suffix("").as_posix()
        with po_path.open("rb") as f:
            catalog = read_po(f, abort_invalid=True)
        n = Counter()
        for message in catalog:
            if not message.id:
                continue  # the header
            where = ", ".join(f"{p}:{l}" for p, l in message.locations[:1]) or domain
            if message.fuzzy:
                n["fuzzy"] += 1
                problems.append(f"{domain}: {where}: fuzzy (the English changed): {message.id[:60]!r}")
            elif message.string:
                n["translated"] += 1
                missing = needs(message.id) - needs(message.string)
                extra = needs(message.string) - needs(message.id)
                if bad_emphasis(message.string):
                    problems.append(f"{domain}: {where}: emphasis beside full-width punctuation renders as "
                                    f"literal asterisks (move the punctuation outside): {message.string[:50]!r}")
                if missing or extra:
                    problems.append(f"{domain}: {where}: translation "
                                    + (f"lost {sorted(missing.elements())} " if missing else "")
                                    + (f"added {sorted(extra.elements())} " if extra else "")
                                    + f"(msgid {message.id[:60]!r}...)")
            else:
                n["untranslated"] += 1
                problems.append(f"{domain}: {where}: untranslated: {message.id[:60]!r}")
        obsolete = len(catalog.obsolete)
        total = n["translated"] + n["fuzzy"] + n["untranslated"]
        rows.append((domain, n["translated"], n["fuzzy"], n["untranslated"], obsolete, total))
    if pot is not None:
        pages = {p.relative_to(pot).with_suffix("").as_posix() for p in pot.rglob("*.pot")}
        have = {r[0] for r in rows}
        problems += [f"{d}: no catalog (run `python book/_ext/editions.py update`)" for d in sorted(pages - have)]
        problems += [f"{d}: catalog of a page no longer built" for d in sorted(have - pages)]
        for d in sorted(pages & have):  # English the catalog has not met: written since its last update
            with (pot / f"{d}.pot").open("rb") as f:
                english = {m.id for m in read_po(f) if m.id}
            with (lc / f"{d}.po").open("rb") as f:
                known = {m.id for m in read_po(f) if m.id}
            problems += [f"{d}: not in its catalog (run `python book/_ext/editions.py update`, then translate): "
                         f"{msgid[:60]!r}" for msgid in sorted(english - known)]
    width = max([len(r[0]) for r in rows] + [7])
    print(f"{'catalog':{width}}  translated  fuzzy  untranslated  obsolete    done")
    for domain, t, f, u, o, total in rows:
        print(f"{domain:{width}}  {t:10}  {f:5}  {u:12}  {o:8}  {100 * t / max(total, 1):5.1f}%")
    t, total = sum(r[1] for r in rows), sum(r[5] for r in rows)
    print(f"{'all':{width}}  {t:10}  {sum(r[2] for r in rows):5}  {sum(r[3] for r in rows):12}  "
          f"{sum(r[4] for r in rows):8}  {100 * t / max(total, 1):5.1f}%")
    return problems, len(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", default="zh_CN")
    parser.add_argument("--pot", type=Path, default=ROOT / "_build" / "gettext")
    args = parser.parse_args(argv)
    problems, _ = check(args.lang, args.pot if args.pot.is_dir() else None)
    for p in problems:
        print("PROBLEM", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

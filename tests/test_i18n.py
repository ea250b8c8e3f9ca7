"""The Chinese edition's catalogs (book/locale/zh_CN): one for every page of the book, every message
translated and none fuzzy, and each translation keeping what its page needs: the glued values, the
links' targets, the citations, the math, and emphasis that CommonMark renders beside Chinese
punctuation. `make book` checks them against the English it extracts at build time
(``catalogs.py --pot``); tests/browser/test_site_zh.py reads the built edition."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import catalogs  # noqa: E402

LC = ROOT / "book" / "locale" / "zh_CN" / "LC_MESSAGES"


def _toc_files(entries):
    for e in entries:
        if "file" in e:
            yield e["file"]
        for key in ("parts", "chapters", "sections"):
            yield from _toc_files(e.get(key, []))


def test_every_page_of_the_toc_has_a_catalog_and_no_catalog_is_left_over():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = {toc["root"], *_toc_files(toc.get("parts", []) + toc.get("chapters", []))}
    assert {p.relative_to(LC).with_suffix("").as_posix() for p in LC.rglob("*.po")} == pages


def test_every_message_is_translated_and_keeps_its_roles_math_and_emphasis():
    problems, count = catalogs.check("zh_CN", None)
    assert count > 30
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


@pytest.mark.parametrize("text, bad", [("**在网页上：**每一页", True), ("**在网页上**：每一页", False),
                                       ("文字**「引用」**", True), ("**在 JupyterLab 中：**`make lab`", False)])
def test_emphasis_beside_full_width_punctuation_is_caught(text, bad):
    assert catalogs.bad_emphasis(text) is bad


def test_a_translation_may_title_a_link_but_must_keep_its_target_and_every_value():
    assert catalogs.needs("{doc}`勘误 <errata>` $N$ {{ built_on }} {glue:text}`a:.1%`") == \
        catalogs.needs("{doc}`errata` $N$ {{ built_on }} {glue:text}`a:.1%`")
    assert catalogs.needs("损失 {glue:text}`a:.1%`") != catalogs.needs("损失 {glue:text}`a:.2%`")

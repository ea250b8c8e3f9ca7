"""The Chinese edition (_build/html/zh/, from book/locale's catalogs) in a real browser with no internet:
each page's prose in Chinese, the English page's numbers in it, and a link to the same page in English
and back. test_site.py's checks of every page (typeset, loaded, no error, nothing off the site) and of
every explorer's controls read these pages too."""
from __future__ import annotations

import pytest
from conftest import PAGES, console_errors, open_page
from selenium.webdriver.common.by import By

ZH = sorted(p for p in PAGES if p.startswith("zh/") and p != "zh/index.html")  # index.html: the redirect
PROSE = [p for p in ZH if p not in ("zh/search.html", "zh/genindex.html")]  # pages of the book, not the theme's
# The English build curls its apostrophes (docutils' smart quotes), which the Chinese one leaves straight
STRAIGHT = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
# The article's own text, and what is not prose: code, math, glued values, citations, links' targets,
# the cells and their outputs (code and what it printed, which stays as it ran), the machine's table
READ = """
const article = document.querySelector("article.bd-article");
const glued = [...article.querySelectorAll(".pasted-text")].map(e => e.textContent);
const english = [...article.querySelectorAll("p, li, h1, h2, h3, dt, dd, figcaption")]
  .filter(e => !e.closest(".cell, pre, .highlight, .explorer, .bibliography, .citation, .machine-facts"))
  .map(e => {
    const c = e.cloneNode(true);
    c.querySelectorAll("code, .math, mjx-container, .pasted-text, a[href*='references'], li").forEach(x => x.remove());
    return c.textContent.replace(/\\s+/g, " ").trim();
  })
  .filter(t => /[A-Za-z]{2,}([ ,;:'-]+[A-Za-z]{2,}){3,}/.test(t) && !/[\\u4e00-\\u9fff]/.test(t));
return {glued, english, lang: document.documentElement.lang};
"""


def test_the_chinese_edition_has_every_page_of_the_english_one():
    assert ZH and [p.removeprefix("zh/") for p in ZH] == sorted(p for p in PAGES if not p.startswith("zh/")
                                                                and p != "index.html")


@pytest.mark.parametrize("page", PROSE)
def test_a_page_is_chinese_prose_around_the_english_pages_numbers(browser, site, page):
    open_page(browser, site, page)
    zh = browser.execute_script(READ)
    open_page(browser, site, page.removeprefix("zh/"))
    en = browser.execute_script(READ)
    assert zh["lang"] == "zh-CN" and en["lang"] == "en"
    # the same values, in the order each language's sentences put them
    same = sorted(v.translate(STRAIGHT) for v in zh["glued"]) == sorted(v.translate(STRAIGHT) for v in en["glued"])
    assert same, f"{page}: glued values differ from the English page's"
    if page != "zh/book/references.html":  # the papers' titles are English
        assert zh["english"] == [], f"{page}: English prose left: {zh['english'][:5]}"


@pytest.mark.parametrize("page", ["zh/book/intro.html", "zh/notebooks/04_1_speedup.html"])
def test_the_switch_reaches_the_same_page_in_the_other_edition_and_back(browser, site, page):
    open_page(browser, site, page)
    browser.find_element(By.CSS_SELECTOR, "a.book-edition[hreflang='en']").click()
    assert browser.current_url == f"{site}/{page.removeprefix('zh/')}"
    browser.find_element(By.CSS_SELECTOR, "a.book-edition[hreflang='zh-CN']").click()
    assert browser.current_url == f"{site}/{page}"
    assert console_errors(browser) == []


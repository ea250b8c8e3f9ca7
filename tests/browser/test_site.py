"""The built web book in a real browser with no internet: every page clean, typeset, loaded, usable."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from conftest import (PAGES, TYPESET, console_errors, move_every_control, offsite_requests, open_page,
                      screenshot)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHAPTERS = sorted(p for p in PAGES if p.startswith("notebooks/"))
EXPLORER_PAGES = ("notebooks/02_strategies.html", "notebooks/04_1_speedup.html",
                  "notebooks/04_2_communication.html", "notebooks/04_3_prediction.html",
                  "notebooks/08_1_transformer_bill.html", "notebooks/08_5_plan.html")
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_the_site_has_every_chapter():
    assert CHAPTERS == sorted(f"notebooks/{nb.stem}.html" for nb in NOTEBOOKS.glob("*.ipynb")), CHAPTERS


@pytest.mark.parametrize("page", PAGES)
def test_page_is_clean_typeset_and_loaded(browser, site, page):
    console_errors(browser), offsite_requests(browser)  # drain what an earlier page left
    open_page(browser, site, page)
    browser.set_script_timeout(30)
    math = browser.execute_async_script(TYPESET)
    assert math["raw"] == 0 and math["errors"] == 0, f"{page}: {math} (MathJax must load from the site)"
    images = browser.execute_script(
        "return [...document.images].map(i => ({src: i.getAttribute('src'), alt: i.alt, ok: i.complete && i.naturalWidth > 0}))")
    assert all(i["ok"] for i in images), [i["src"] for i in images if not i["ok"]]
    no_alt = [i["src"] for i in images if not i["alt"].strip() or i["alt"] == i["src"] or "_images/" in i["alt"]]
    assert not no_alt, f"{page}: images without a description: {no_alt}"
    overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{page} is {overflow}px wider than the window: a table or output does not scroll"
    assert console_errors(browser) == [], page
    assert offsite_requests(browser) == [], f"{page} asked for these off the site (offline, it cannot)"


@pytest.mark.parametrize("page", [*EXPLORER_PAGES, *(f"zh/{p}" for p in EXPLORER_PAGES)])  # both editions
def test_every_control_of_every_explorer_changes_the_page(browser, site, page):
    open_page(browser, site, page)
    explorers = browser.find_elements(By.CSS_SELECTOR, ".explorer[data-explorer]")
    assert explorers, f"{page} has no explorer"
    for explorer in explorers:
        assert move_every_control(browser, explorer) == [], page
    assert console_errors(browser) == []


def test_the_articles_chinese_has_a_font_from_the_site(browser, site):
    """Offline, on a machine without a CJK font, the article's title still reads."""
    open_page(browser, site, "book/intro.html")
    title = browser.execute_script("return [...document.querySelectorAll('em')].map(e => e.textContent)"
                                   ".find(t => /[\u4e00-\u9fff]/.test(t))")
    browser.set_script_timeout(30)
    faces = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "document.fonts.load('16px \"Noto Sans SC\"', arguments[0]).then(f => done(f.map(x => x.status)), e => done(String(e)));",
        title)
    assert title and faces and all(s == "loaded" for s in faces), (title, faces)
    assert console_errors(browser) == []


def test_search_finds_a_term(browser, site):
    open_page(browser, site, "search.html?q=Amdahl")
    hits = WebDriverWait(browser, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results ul.search li"))
    assert any("04_1_speedup" in h.find_element(By.TAG_NAME, "a").get_attribute("href") for h in hits)


@pytest.mark.parametrize("page", CHAPTERS)
def test_chapter_has_launch_buttons_and_its_notebook_to_download(browser, site, page):
    open_page(browser, site, page)
    hrefs = browser.execute_script("return [...document.querySelectorAll('a')].map(a => a.href)")
    name = page.removeprefix("notebooks/").removesuffix(".html")
    for service in ("colab.research.google.com/github/", "mybinder.org/v2/gh/", "/hub/user-redirect/git-pull"):
        assert any(service in h and name in h for h in hrefs), (page, service)
    ipynb = [h for h in hrefs if h.endswith(f"{name}.ipynb") and h.startswith(site)]
    assert ipynb, f"{page}: no download link for its notebook"
    with urllib.request.urlopen(ipynb[0]) as r:
        assert json.load(r)["nbformat"] == 4


def test_execution_report_lists_every_chapter_with_its_run_time(browser, site):
    open_page(browser, site, "book/report.html")
    header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table thead th")]
    doc, seconds, status = (header.index(h) for h in ("Document", "Run Time (s)", "Status"))
    rows = {r[doc]: r for r in ([td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                                for tr in browser.find_elements(By.CSS_SELECTOR, "table tbody tr"))}
    for chapter in CHAPTERS:
        row = rows[chapter.removesuffix(".html")]
        assert float(row[seconds]) > 0 and row[status] == "✅", row


def test_screenshots_of_the_landing_page_and_a_chapter(browser, site):
    open_page(browser, site, "index.html")
    assert "CPU core" in browser.find_element(By.TAG_NAME, "main").text  # the building machine, glued
    landing = screenshot(browser, "landing")
    open_page(browser, site, "notebooks/04_1_speedup.html")
    browser.execute_async_script(TYPESET)
    chapter = screenshot(browser, "chapter_04_1_speedup")
    assert landing.stat().st_size > 10_000 and chapter.stat().st_size > 10_000

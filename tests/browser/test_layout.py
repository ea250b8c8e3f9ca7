"""Code and math in the web book read whole: on a 1280px laptop nothing scrolls sideways, and on a
390px phone nothing is cut off or widens the page (a block wider than the phone scrolls inside itself)."""
from __future__ import annotations

import pytest
from conftest import PAGES, TYPESET, open_page, screenshot
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

LAPTOP = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
WIDE = {"width": 1920, "height": 1080, "deviceScaleFactor": 1, "mobile": False}  # the page's contents beside it
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
EQUATION_PAGE = "notebooks/06_1_pipeline_schedules.html"  # its bubble equation is the book's widest

# The blocks of the article that overflow its column, each with what the reader loses. Hidden input
# cells are opened first: a reader opens them. `whole` asks that code and math fit without scrolling.
_OVERFLOWS = """
const whole = arguments[0];
document.querySelectorAll("main details").forEach(d => { d.open = true; });
const column = document.querySelector("main .bd-article, main .bd-search-container");
const edge = column.getBoundingClientRect().right - parseFloat(getComputedStyle(column).paddingRight) + 1;
const name = el => el.tagName.toLowerCase() + [...el.classList].map(c => "." + c).join("");
const text = el => (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 50);
const sideways = el => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
const scroller = el => el !== column
    && ((sideways(el) && el.scrollWidth > el.clientWidth) || scroller(el.parentElement));
const found = [];
for (const el of column.querySelectorAll(
    "pre, div.math, mjx-container[display='true'], table, img, figure, .explorer, .cell_output > *")) {
  const box = el.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;  // not displayed
  if (scroller(el.parentElement)) continue;  // inside a box that scrolls (a wide table): that box is checked
  const hidden = el.scrollWidth - el.clientWidth;
  const scrolls = sideways(el);
  if (box.right > edge) found.push(`${name(el)} ends ${Math.round(box.right - edge)}px past the column: ${text(el)}`);
  else if (hidden > 1 && !scrolls) found.push(`${name(el)} cuts off or spills ${hidden}px: ${text(el)}`);
  else if (hidden > 1 && whole && el.matches("pre, div.math, mjx-container"))
    found.push(`${name(el)} scrolls sideways by ${hidden}px: ${text(el)}`);
}
return found;
"""


def _view(browser, viewport: dict) -> None:
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", viewport)


def _ready(browser, site, page) -> None:
    open_page(browser, site, page)
    browser.set_script_timeout(30)
    browser.execute_async_script(TYPESET)
    browser.execute_async_script("document.fonts.ready.then(arguments[arguments.length - 1])")


@pytest.mark.parametrize("viewport", [LAPTOP, WIDE], ids=["1280px", "1920px"])
@pytest.mark.parametrize("page", PAGES)
def test_code_and_math_fit_a_laptop(browser, site, page, viewport):
    _view(browser, viewport)
    _ready(browser, site, page)
    assert browser.execute_script(_OVERFLOWS, True) == [], page


@pytest.mark.parametrize("page", PAGES)
def test_code_and_math_are_whole_on_a_phone(browser, site, page):
    _view(browser, PHONE)
    _ready(browser, site, page)
    assert browser.execute_script(_OVERFLOWS, False) == [], page
    overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{page} is {overflow}px wider than the phone"


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_screenshots_of_the_widest_listing_and_equation(browser, site, viewport):
    """For a reader's eye (CI keeps them): the page's widest listing, then its equation."""
    _view(browser, viewport)
    _ready(browser, site, EQUATION_PAGE)
    widest = browser.execute_script(
        "const longest = pre => Math.max(...pre.textContent.split('\\n').map(line => line.length));"
        "return [...document.querySelectorAll('main div.highlight-python pre, main div.cell_input pre')]"
        "  .filter(pre => pre.offsetParent).sort((a, b) => longest(b) - longest(a))[0]")
    for what, element in (("listing", widest), ("equation", browser.find_element(By.CSS_SELECTOR, "main div.math"))):
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        shot = screenshot(browser, f"{what}_06_1_{viewport['width']}px")
        assert shot.stat().st_size > 10_000


def test_the_pages_contents_stand_beside_the_code_on_a_wide_screen(browser, site):
    """From 1664px the page's contents are a column again, right of the article, and the code still fits."""
    _view(browser, WIDE)
    _ready(browser, site, EQUATION_PAGE)
    article, contents = (browser.execute_script(
        f"const b = document.querySelector('{css}').getBoundingClientRect(); return [b.left, b.right]")
        for css in ("main .bd-article", "#pst-secondary-sidebar"))
    assert article[1] <= contents[0] < contents[1] <= WIDE["width"], (article, contents)
    screenshot(browser, "contents_beside_1920px")


@pytest.mark.parametrize("viewport, toggle, drawer", [
    (LAPTOP, "secondary-toggle", "pst-secondary-sidebar-modal"),  # 1280px: the contents give way to the code
    (PHONE, "secondary-toggle", "pst-secondary-sidebar-modal"),
    (PHONE, "primary-toggle", "pst-primary-sidebar-modal"),  # the chapters' list
], ids=["contents-laptop", "contents-phone", "chapters-phone"])
def test_the_headers_buttons_open_the_drawers(browser, site, viewport, toggle, drawer):
    """Where a sidebar is a drawer, the article header's button opens it, and its links show on screen."""
    _view(browser, viewport)
    _ready(browser, site, EQUATION_PAGE)
    browser.find_element(By.CSS_SELECTOR, f".bd-header-article button.{toggle}").click()
    dialog = browser.find_element(By.ID, drawer)
    WebDriverWait(browser, 5).until(lambda d: dialog.get_attribute("open") is not None)
    WebDriverWait(browser, 5).until(lambda d: d.execute_script(
        "const b = arguments[0].getBoundingClientRect(); return b.left >= 0 && b.right <= window.innerWidth", dialog))
    links = [a for a in dialog.find_elements(By.CSS_SELECTOR, "nav a") if a.is_displayed()]
    assert len(links) >= 3, f"{drawer}: {len(links)} links on screen"
    screenshot(browser, f"{toggle}_{viewport['width']}px")

"""Fixtures for the browser tests: Debian's chromium under Selenium, cut off from the internet.

The browser resolves every host but 127.0.0.1 to nothing, so a page that needs a CDN
fails here as it would offline, and every request it makes is read from its network log:
one that leaves 127.0.0.1 fails the test that made it, or, if no test asked, the module.
Screenshots go to ``_build/screenshots`` (CI artifacts).
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html"))  # another build, to debug
SHOTS = ROOT / "_build" / "screenshots"
PAGES = sorted(str(p.relative_to(SITE)) for p in SITE.rglob("*.html") if "_static" not in p.parts)
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
OFFLINE = "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


def pytest_configure(config):
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", DRIVER)) if not path]
    if missing:
        raise pytest.UsageError(f"the browser tests need {' and '.join(missing)}: "
                                "apt-get install chromium chromium-driver (.ci/run does)")


@pytest.fixture(scope="module")
def browser():
    """A fresh chromium for each test module, so one module's pages never log into another's."""
    profile = tempfile.mkdtemp(prefix="book-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                 f"--host-resolver-rules={OFFLINE}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    left = offsite_requests(driver)
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
    assert left == [], f"requests that left 127.0.0.1: {left}"


@pytest.fixture(scope="session")
def site():
    """The built book, served on 127.0.0.1 at an OS-chosen port."""
    if not (SITE / "index.html").is_file():
        raise pytest.UsageError(f"{SITE} has no built book: run `make book` first")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def console_errors(driver) -> list[str]:
    """The page's console errors since the last call (each call drains the log)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def offsite_requests(driver) -> list[str]:
    """Every URL the browser asked for off 127.0.0.1 since the last call (each call drains the log)."""
    urls = (json.loads(e["message"])["message"] for e in driver.get_log("performance"))
    asked = (m["params"]["request"]["url"] for m in urls if m["method"] == "Network.requestWillBeSent")
    return [u for u in asked if urlsplit(u).scheme in ("http", "https", "ws", "wss")
            and urlsplit(u).hostname != "127.0.0.1"]


# Resolves once MathJax has typeset the page (or at once if the page has no math).
TYPESET = """
const done = arguments[arguments.length - 1];
const summary = () => {
  const maths = [...document.querySelectorAll("span.math, div.math")];
  done({math: maths.length, raw: maths.filter(m => !m.querySelector("mjx-container")).length,
        errors: document.querySelectorAll("mjx-merror").length});
};
if (!document.querySelector("span.math, div.math")) { summary(); }
else {
  const t0 = Date.now();
  const wait = () => (window.MathJax && MathJax.startup && MathJax.startup.promise)
      ? MathJax.startup.promise.then(summary)
      : (Date.now() - t0 > 20000 ? done({math: -1, raw: -1, errors: -1}) : setTimeout(wait, 50));
  wait();
}
"""


def open_page(browser, site, page):
    browser.get(f"{site}/{page}")
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def screenshot(driver, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _state(explorer) -> str:
    return explorer.find_element(By.CSS_SELECTOR, ".readout").text + explorer.get_attribute("innerHTML")


def _move(browser, control) -> None:
    """Move one control as a reader would: keys on a slider, a new option, a click."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", control)
    kind = control.tag_name, control.get_attribute("type")
    if kind == ("input", "range"):
        at_max = float(control.get_attribute("value")) >= float(control.get_attribute("max"))
        control.send_keys(Keys.HOME if at_max else Keys.END)
    elif kind[0] == "select":
        choice = Select(control)
        now = [o.get_attribute("value") for o in choice.options].index(choice.first_selected_option.get_attribute("value"))
        choice.select_by_index((now + 1) % len(choice.options))
    else:
        control.click()


def move_every_control(driver, explorer) -> list[str]:
    """Move each control of an explorer once; the controls that did not change what it shows."""
    controls = explorer.find_elements(By.CSS_SELECTOR, "input, select")
    if not controls:
        return ["(no controls)"]
    dead = []
    for control in controls:
        before = _state(explorer)
        _move(driver, control)
        if _state(explorer) == before:
            dead.append(control.get_attribute("outerHTML")[:120])
    return dead

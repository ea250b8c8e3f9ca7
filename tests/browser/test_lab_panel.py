"""Chapter 8.5's launch panel, clicked in JupyterLab: a choice that cannot run gets one line, a layout
runs on the reader's ranks and joins the table, and Stop kills a run and leaves nothing behind."""
import time

from conftest import screenshot
from lab_kit import lab, run_notebook, shut_down, unexpected_errors  # noqa: F401
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

NOTEBOOK = "08_5_plan.ipynb"


def choose(panel, key: str, value) -> None:
    Select(panel.find_element(By.CSS_SELECTOR, f".book-run-{key} select")).select_by_visible_text(str(value))


def status(panel) -> str:
    return panel.find_element(By.CSS_SELECTOR, ".book-run-status").text


def click(panel, key: str) -> None:
    panel.find_element(By.CSS_SELECTOR, f".book-run-{key}").click()


def bar_text(driver) -> str:
    """The run's progress line, read in one step: the bar is redrawn as the run goes, and an element
    found in one call can be gone by the next (a StaleElementReferenceException, seen under load)."""
    return driver.execute_script(
        "const bar = document.querySelector('.book-run-panel progress'); return bar ? bar.parentElement.innerText : ''")


def table_rows(panel) -> int:
    return len(panel.find_elements(By.CSS_SELECTOR, ".book-run-table tr")) - 1  # the header


def test_the_panel_runs_a_layout_refuses_a_wrong_one_and_stops_a_long_one(browser, lab):
    state, _ = run_notebook(browser, lab, NOTEBOOK, until="panel.show()")
    assert not unexpected_errors(state), state
    panel = WebDriverWait(browser, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output .book-run-panel"))[0]
    assert table_rows(panel) == -1  # no table before the first run

    choose(panel, "nprocs", 4)  # dp 2 x tp 2 x pp 2 on 4 ranks
    click(panel, "go")
    WebDriverWait(browser, 30).until(lambda d: "processes" in status(panel))
    assert "dp * pp * tp = 2 * 2 * 2 = 8, but the job has 4 processes" in status(panel)
    assert "\n" not in status(panel) and table_rows(panel) == -1

    choose(panel, "dp", 1)
    choose(panel, "recompute", "full")
    click(panel, "go")
    WebDriverWait(browser, 240, poll_frequency=0.5).until(lambda d: "run 1 done" in status(panel))
    assert table_rows(panel) == 1
    row = panel.find_element(By.CSS_SELECTOR, ".book-run-table tr:nth-child(2)").text
    assert "dp 1 × tp 2 × pp 2" in row and "recompute full" in row and "yes" in row, row
    figure = panel.find_element(By.CSS_SELECTOR, "img")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", figure)
    screenshot(browser, "jupyterlab_08_5_panel")

    panel.find_element(By.CSS_SELECTOR, ".book-run-steps input").clear()
    panel.find_element(By.CSS_SELECTOR, ".book-run-steps input").send_keys("50\t")
    click(panel, "go")
    WebDriverWait(browser, 120, poll_frequency=0.2).until(lambda d: "/50" in bar_text(d))
    click(panel, "stop")
    WebDriverWait(browser, 60).until(lambda d: "stopped" in status(panel))
    assert "every rank was killed" in status(panel) and table_rows(panel) == 1
    time.sleep(1)
    assert shut_down(lab, state["kernel"]) == []

"""JupyterLab, driven through its real UI: a chapter runs top to bottom, live, and leaves nothing behind."""
from conftest import move_every_control, screenshot
from lab_kit import assert_the_run_is_in_the_prose, lab, run_notebook, shut_down, unexpected_errors  # noqa: F401
from selenium.webdriver.common.by import By


def test_chapter_1_runs_live_in_jupyterlab_and_leaves_nothing(browser, lab):
    state, seen = run_notebook(browser, lab, "01_background.ipynb")
    failed = [c["index"] for c in state["cells"] if "error" in c["outputs"]]
    expected = [c["index"] for c in state["cells"] if "raises-exception" in c["tags"]]
    assert failed == expected and expected, (failed, expected)
    assert seen == {"rank_lines": True, "progress_bar": True}, seen
    figures = browser.execute_script(
        "return [...document.querySelectorAll('.jp-OutputArea-output img')].map(i => i.complete && i.naturalWidth > 0)")
    assert figures and all(figures), figures
    assert_the_run_is_in_the_prose(browser)  # the reader's own numbers, as the web book shows them
    screenshot(browser, "jupyterlab_01_background")
    assert shut_down(lab, state["kernel"]) == []


def test_the_amdahl_explorer_reacts_in_jupyterlab(browser, lab):
    """4.1's cells up to its first explorer: a live output, no kernel round trip, moved by the reader."""
    state, _ = run_notebook(browser, lab, "04_1_speedup.ipynb", until="widgets.amdahl_explorer(")
    assert not unexpected_errors(state), state
    explorers = browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output .explorer[data-explorer]")
    assert explorers, "4.1's explorer did not render"
    for explorer in explorers:
        assert move_every_control(browser, explorer) == []
    screenshot(browser, "jupyterlab_04_1_explorer")
    assert shut_down(lab, state["kernel"]) == []

"""The similarity report as a TA reads it: headless Chromium opens index.html, follows a pair to
its side-by-side page and a shared fragment to its other side. Screenshots go to
$REPORT_SCREENSHOT_DIR (default: a pytest temporary folder); their paths are printed.

The browser comes from tests/test_reports_browser.py (tests/chromium.py's Chromium, with its request log).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from graders.assignment import load
from graders.cli import main

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.by import By  # noqa: E402
import chromium  # noqa: E402
import test_reports_browser as reports_browser  # noqa: E402
from test_reports_browser import PHONE, full_page_png, open_page  # noqa: E402

browser, screenshot_dir = reports_browser.browser, reports_browser.screenshot_dir  # its fixtures, for this module

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "fixtures" / "similarity"))
import make_corpus  # noqa: E402

pytestmark = [pytest.mark.slow, *chromium.SKIP]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    batch = make_corpus.build_batch(tmp_path_factory.mktemp("corpus"), load("bert"))
    assert main(["similarity", str(batch), "--corpus", str(REPO / "fixtures" / "wild" / "bert")]) == 0
    return batch / "similarity"


def scrolls_sideways_on_a_phone(driver) -> bool:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    try:
        return driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth + 1")
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_the_index_ranks_the_pairs_and_loads_nothing(browser, report, screenshot_dir, capsys):
    index = report / "index.html"
    requests = open_page(browser, index)
    assert [url for url in requests if url != index.as_uri()] == [], "the report made network requests"
    visible = browser.find_element(By.TAG_NAME, "body").text
    assert "Evidence to look at, not a verdict" in visible and "plagiar" not in visible.lower()
    first = browser.find_elements(By.CSS_SELECTOR, "table.wide tr")[1].text
    assert "look at this" in first and "100%" in first
    histogram = browser.find_element(By.CSS_SELECTOR, "svg.histogram")
    assert histogram.is_displayed() and "marked from 50%" in histogram.text
    assert "annotated_public shares" in visible and "with corpus entry annotated_transformer" in visible
    shots = [full_page_png(browser, screenshot_dir / "similarity-index-desktop.png", 1280, 900, mobile=False)]
    assert not scrolls_sideways_on_a_phone(browser), "the index scrolls sideways on a phone"
    shots.append(full_page_png(browser, screenshot_dir / "similarity-index-phone.png", *PHONE, mobile=True))
    with capsys.disabled():
        print("\n" + "\n".join(f"screenshot: {shot}" for shot in shots))


def test_a_pair_shows_its_shared_fragments_side_by_side_and_links_them(browser, report, screenshot_dir, capsys):
    open_page(browser, report / "index.html")
    browser.find_element(By.LINK_TEXT, "compact & compact_notebook").click()
    assert browser.current_url.endswith("pairs/compact~compact_notebook.html")
    visible = browser.find_element(By.TAG_NAME, "body").text
    assert "compact_notebook: attention.py (from compact_notebook.ipynb)" in visible
    assert "cell " in visible  # the notebook side names each line's cell

    fragment = browser.find_elements(By.CSS_SELECTOR, "table a[href='#b-f1']")[0]
    where = fragment.text
    assert where.startswith("compact_notebook.ipynb cell "), where
    fragment.click()
    assert browser.current_url.endswith("#b-f1")
    target = browser.find_element(By.ID, "b-f1")
    assert "shared" in target.get_attribute("class")
    assert browser.execute_script("const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight",
                                  target)
    # the fragment's number beside the line leads back to the same fragment on the other side
    target.find_element(By.CSS_SELECTOR, "a[href='#a-f1']").click()
    back = browser.find_element(By.ID, "a-f1")
    assert browser.current_url.endswith("#a-f1") and "shared" in back.get_attribute("class")
    code = [row.find_element(By.CSS_SELECTOR, "td.src").text.strip() for row in (back, target)]
    assert code[0] and code[0].split("(")[0] == code[1].split("(")[0], code
    given = browser.find_elements(By.CSS_SELECTOR, "#a-attention\\.py tr.given td.src")
    assert any("super().__init__()" in row.text for row in given), "the template's lines are not marked given"

    shots = [full_page_png(browser, screenshot_dir / "similarity-pair-desktop.png", 1280, 900, mobile=False)]
    assert not scrolls_sideways_on_a_phone(browser), "the pair page scrolls sideways on a phone (its code boxes scroll)"
    with capsys.disabled():
        print("\n" + "\n".join(f"screenshot: {shot}" for shot in shots))

"""The HTML report as a person sees it: headless Chromium renders it and we read what shows.

Driven by Selenium and Debian's chromium + chromium-driver (same source package, so driver and
browser versions always match). Requests are observed through ChromeDriver's performance log
(the DevTools Network events of the page); a control test proves the log does see a request.

Skipped where selenium, /usr/bin/chromium or chromedriver is missing. Screenshots go to
$REPORT_SCREENSHOT_DIR (default: a pytest temporary folder); their paths are printed.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

import chromium
import report_samples
from graders.reports import render_html
from graders.reports.summary import format_points

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # a browser's start and a page load each: left out of the inner loop (README, "Contributing")
    *chromium.SKIP,
]

DESKTOP = (1280, 900)
PHONE = (390, 844)
BROWSER_SAMPLES = ["buggy", "hostile", "template_not_implemented", "self_check_all_passing", "rejected", "full_size",
                   "notebook_handin"]
SCREENSHOT_SAMPLES = {"buggy", "hostile", "self_check_all_passing", "rejected", "notebook_handin"}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium.start(tmp_path_factory.mktemp("chromium-profile"), DESKTOP, performance_log=True)
    # Leave the start-up tab (its chrome:// loads would be counted against the first report).
    driver.get("about:blank")
    driver.get_log("performance")
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory) -> Path:
    folder = os.environ.get("REPORT_SCREENSHOT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("report-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_page(driver, path: Path) -> list[str]:
    """Load a file and return the URLs of every request the page made."""
    driver.get_log("performance")  # drop the events of earlier pages
    driver.get(path.as_uri())
    requests = []
    for entry in driver.get_log("performance"):
        event = json.loads(entry["message"])["message"]
        if event["method"] == "Network.requestWillBeSent":
            requests.append(event["params"]["request"]["url"])
    return requests


def full_page_png(driver, path: Path, width: int, height: int, mobile: bool) -> Path:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path


def test_the_request_log_sees_requests(browser, tmp_path):
    """Control: without it, 'no request seen' could mean the log is broken."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><img src="http://127.0.0.1:9/pixel.png">')
    requests = open_page(browser, page)
    assert page.as_uri() in requests
    assert "http://127.0.0.1:9/pixel.png" in requests


@pytest.mark.parametrize("name", BROWSER_SAMPLES)
def test_report_shows_what_matters_and_loads_nothing(browser, name, tmp_path, screenshot_dir, capsys):
    results = report_samples.SAMPLES[name]()
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(results), encoding="utf-8")

    requests = open_page(browser, page)
    assert [url for url in requests if url != page.as_uri()] == [], "the report made network requests"

    body = browser.find_element(By.TAG_NAME, "body")
    visible = body.text  # WebDriver's rendered text: hidden elements are left out
    if results["status"] == "rejected":
        assert "Submission rejected" in visible
        assert results["reason"] in visible
    total = " ".join(browser.find_element(By.CSS_SELECTOR, ".total").text.split())
    assert f"{format_points(results['score'])} / {format_points(results['max_score'])} points" in total
    for part in results["parts"]:
        assert part["title"] in visible
    for check in report_samples.failing_checks(results):
        assert report_samples.shown_summary_line(check) in visible, check["id"]
    assert all(element.is_displayed() for element in browser.find_elements(By.CSS_SELECTOR, ".diagnosis"))
    assert "all tests passed" not in visible.lower()
    if results["mode"] == "self-check":
        assert "public checks passed" in visible

    # Nothing from the data became markup: no script element, no alert, no external image.
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.TAG_NAME, "img") == []

    if name in SCREENSHOT_SAMPLES:
        for label, (width, height), mobile in (("desktop", DESKTOP, False), ("phone", PHONE, True)):
            shot = full_page_png(browser, screenshot_dir / f"report-{name}-{label}.png", width, height, mobile)
            with capsys.disabled():  # shown even when the test passes, so CI logs say where to look
                print(f"\nscreenshot: {shot}")


@pytest.mark.parametrize("name", ["buggy", "hostile", "notebook_handin"])
def test_report_fits_a_phone_screen(browser, name, tmp_path):
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report_samples.SAMPLES[name]()), encoding="utf-8")
    open_page(browser, page)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert overflow <= 0, f"the page is {overflow}px wider than a phone screen"


def test_printed_report_cuts_nothing_off(browser, tmp_path):
    page = tmp_path / "buggy.html"
    page.write_text(render_html(report_samples.buggy()), encoding="utf-8")
    open_page(browser, page)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        clipped = browser.execute_script(
            "return [...document.querySelectorAll('pre')]"
            ".filter(p => p.scrollHeight > p.clientHeight + 1).length"
        )
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    assert clipped == 0, "some text blocks would be cut off when printed"


def test_batch_summary_loads_nothing_and_runs_nothing(browser, tmp_path):
    from test_html_pages import SCRIPT, hostile_batch

    page = hostile_batch(tmp_path / "batch")
    requests = open_page(browser, page)
    assert [url for url in requests if url != page.as_uri()] == [], "the summary made network requests"
    assert "Batch summary" in browser.find_element(By.TAG_NAME, "h1").text
    assert SCRIPT in browser.find_element(By.TAG_NAME, "body").text  # shown as text
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.TAG_NAME, "svg")  # the histogram still draws


def _class_batch(out: Path) -> Path:
    """A batch whose summary has wide tables: long unbroken ids, many columns, 30 students."""
    from graders.batch import store
    from graders.batch.gradebook import rebuild

    for number in range(30):
        score = float(number % 11) * 4.5
        checks = [{"id": f"answers.square_mask_and_positional_encoding_{i}", "title": "a long title " * 4,
                   "status": "passed" if i < number % 5 else "failed", "score": 1.0, "max_score": 1.0,
                   "visibility": "public", "message": "",
                   "diagnosis": {"id": f"diagnosis_with_a_long_identifier_{i}", "text": "x" * 120}} for i in range(5)]
        results = {"schema_version": 1, "status": "graded", "reason": None, "mode": "instructor", "score": score,
                   "max_score": 45.0, "submission": {"sha256": "0" * 64, "name": "s.zip", "kind": "zip", "notes": []},
                   "versions": {"grader": "0.1.0"}, "timings": {"total_s": 1.0},
                   "parts": [{"id": "attention", "title": "Attention", "score": score, "max_score": 45.0,
                              "checks": checks}],
                   "batch": {"input_sha256": "0" * 64, "wall_s": 1.5}}
        store.publish(out, f"student_with_a_very_long_identifier_{number:03d}", results, {"key": str(number)})
    return rebuild(out)[1]


def _at_phone_width(browser, script):
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        return browser.execute_script(script)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_batch_summary_fits_a_phone_and_its_tables_scroll_in_their_own_box(browser, tmp_path, screenshot_dir, capsys):
    page = _class_batch(tmp_path / "batch")
    open_page(browser, page)
    overflow = _at_phone_width(
        browser, "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the summary is {overflow}px wider than a phone screen"
    boxes = _at_phone_width(
        browser, "return [...document.querySelectorAll('table')].map(t => [t.parentElement.className, "
                 "t.parentElement.getBoundingClientRect().right <= window.innerWidth])")
    assert boxes and all(box == ["table-scroll", True] for box in boxes)
    shot = full_page_png(browser, screenshot_dir / "summary-phone.png", PHONE[0], PHONE[1], True)
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")


@pytest.mark.parametrize("width", [DESKTOP[0], PHONE[0]])
def test_histogram_labels_sit_under_bin_edges_without_overlapping(browser, tmp_path, width):
    page = _class_batch(tmp_path / "batch")
    open_page(browser, page)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width == PHONE[0]},
    )
    try:
        labels, bars = browser.execute_script(
            "const svg = document.querySelector('svg.histogram');"
            "const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };"
            "return [[...svg.querySelectorAll('text.axis')].map(t => [t.textContent, ...box(t)]),"
            "        [...svg.querySelectorAll('rect.bar')].map(box)];")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert len(bars) == 10 and len(labels) >= 3
    pitch = bars[1][0] - bars[0][0]
    edges = [bars[0][0] - (bars[1][0] - bars[0][1]) / 2 + i * pitch for i in range(11)]
    for text, left, right, _, _ in labels:
        centre = (left + right) / 2
        assert min(abs(centre - edge) for edge in edges) < 1.5, f"label {text} is not under a bin edge"
    for (t1, _, right, _, _), (t2, left, _, _, _) in zip(labels, labels[1:]):
        assert right < left, f"labels {t1} and {t2} overlap"


@pytest.mark.parametrize("page_kind", ["report", "summary"])
def test_the_policy_stops_markup_that_slipped_past_escaping(browser, tmp_path, page_kind):
    """Were escaping ever to fail, the page's policy alone would keep a script from running and
    an image from loading (a control page without the policy shows the injection would work)."""
    from test_html_pages import hostile_batch

    if page_kind == "report":
        html = render_html(report_samples.buggy())
    else:
        html = hostile_batch(tmp_path / "batch").read_text(encoding="utf-8")
    injected = ('<script>document.title = "script ran"</script>'
                '<img src="http://127.0.0.1:9/leak.png" onerror="document.title = \'handler ran\'">')
    attacked = html.replace("<body>", "<body>" + injected, 1)
    assert attacked != html
    without_policy = attacked.replace('http-equiv="Content-Security-Policy"', 'name="no-policy"', 1)
    for name, text, blocked in (("with", attacked, True), ("without", without_policy, False)):
        page = tmp_path / f"{page_kind}-{name}-policy.html"
        page.write_text(text, encoding="utf-8")
        browser.get_log("performance")
        browser.get(page.as_uri())
        events = [json.loads(entry["message"])["message"] for entry in browser.get_log("performance")]
        # DevTools lists a request the policy blocks, then reports it failed as "csp".
        sent = {e["params"]["requestId"] for e in events if e["method"] == "Network.requestWillBeSent"
                and e["params"]["request"]["url"] == "http://127.0.0.1:9/leak.png"}
        blocked_by_policy = {e["params"]["requestId"] for e in events if e["method"] == "Network.loadingFailed"
                             and e["params"].get("blockedReason") == "csp"}
        leaked = bool(sent - blocked_by_policy)
        ran = browser.title in ("script ran", "handler ran")
        assert (leaked, ran) == ((False, False) if blocked else (True, True)), name

"""Headless Chromium through Selenium, for the tests that look at pages as a person would.

Debian's chromium and chromium-driver (one source package, so their versions always match),
both paths given explicitly so that Selenium Manager never looks online. `SKIP` marks a test
to skip where either is missing.
"""

from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SKIP = [
    pytest.mark.chromium,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt-get install -y chromium)"),
    pytest.mark.skipif(CHROMEDRIVER is None, reason="no chromedriver (apt-get install -y chromium-driver)"),
]


def start(profile_dir, window=(1280, 900), *, performance_log=False):
    """A new headless Chromium with its own profile (its own cookies and storage)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",
        f"--window-size={window[0]},{window[1]}",
    ):
        options.add_argument(flag)
    if performance_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))

"""Headless Debian Chromium through Selenium and chromedriver, offline: for the report's browser test
and the screenshot in docs/report.md. Needs selenium (the dev extra) and the chromium + chromium-driver
packages (scripts/setup.sh installs them when run as root)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

# As root on a closed network: no sandbox, no GPU, and none of Chromium's own connections.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


class BrowserMissing(RuntimeError):
    """selenium, chromium or chromedriver is not installed; the message says how to install it."""


def headless_chromium(
    profile_dir: Path, width: int = 1280, height: int = 900, console_log: bool = False
) -> Any:
    """A started ``selenium`` Chrome driver on a fresh profile in ``profile_dir``."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise BrowserMissing("selenium is not installed: pip install -e '.[dev]'") from None
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        raise BrowserMissing(
            "headless Chromium is needed: apt-get install chromium chromium-driver "
            "(scripts/setup.sh installs them when run as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*FLAGS, f"--user-data-dir={profile_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    before = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager try the network
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=driver))
    finally:
        if before is None:
            del os.environ["SE_OFFLINE"]
        else:
            os.environ["SE_OFFLINE"] = before

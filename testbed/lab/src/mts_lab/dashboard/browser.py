"""Debian's Chromium, headless, driven by Debian's chromedriver (selenium).

One way to start it for the dashboard's browser test and its benchmark. Selenium Manager is
kept offline: the driver is the distribution's, never a download.
"""

from __future__ import annotations

import os
import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


class BrowserMissingError(RuntimeError):
    pass


def chromium(width: int = 1400, height: int = 2600) -> webdriver.Chrome:
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(binary):
            raise BrowserMissingError(
                f"{binary} is missing: `make system` installs chromium and chromium-driver"
            )
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def sign_in(browser: WebDriver, url: str, token: str, timeout: float = 60) -> None:
    """Open the dashboard and sign in (waits for the dialog, which opens after a fetch)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    field = WebDriverWait(browser, timeout).until(
        expected_conditions.visibility_of_element_located((By.ID, "token"))
    )
    field.send_keys(token)
    browser.find_element(By.ID, "signin-button").click()

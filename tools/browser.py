"""Headless Chromium for the docs' screenshots and the page's browser tests.

The browser and its driver come from the system (Debian's ``chromium`` and ``chromium-driver``,
the same version), never downloaded: Selenium is given both paths, so its driver manager has
nothing to fetch. ``ask`` drives the page ``ragexp serve`` shows at ``/`` as a person would:
types a question, presses Ask, waits for the answer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver")


class BrowserMissing(RuntimeError):
    """No Chromium or no chromedriver on this machine."""


def _first(names: tuple[str, ...], what: str) -> str:
    for name in names:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    raise BrowserMissing(f"no {what} found (looked for {', '.join(names)}): "
                         f"`apt-get install chromium chromium-driver` (Debian) first")


def chromium() -> str:
    """Path of the Chromium executable; ``BrowserMissing`` when there is none."""
    return _first(BROWSERS, "Chromium")


def chromedriver() -> str:
    """Path of chromedriver (Debian's ``chromium-driver``); ``BrowserMissing`` when absent."""
    return _first(DRIVERS, "chromedriver")


def driver(width: int = 1200, height: int = 900):
    """A headless Chromium under Selenium WebDriver, ``width`` x ``height`` CSS pixels; the
    caller quits it (``with driver() as d:``). Raises ``BrowserMissing``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver()))


def ask(d, question: str, timeout_s: float = 60):
    """Type ``question`` into the page's box, press Ask and wait until the answer is shown (or an
    error is); returns the result element. Raises ``RuntimeError`` with the page's status line
    when the page shows an error instead."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown() -> int:  # answers the page has rendered so far
        return int(d.find_element(By.ID, "result").get_attribute("data-shown") or 0)

    box = d.find_element(By.ID, "question")
    box.clear()
    box.send_keys(question)
    before = shown()
    d.find_element(By.ID, "ask").click()
    WebDriverWait(d, timeout_s).until(
        lambda _: shown() > before
        or d.find_element(By.ID, "status").get_attribute("class") == "error")
    if d.find_element(By.ID, "status").get_attribute("class") == "error":
        raise RuntimeError(f"the page showed an error: {d.find_element(By.ID, 'status').text}")
    return d.find_element(By.ID, "result")


def screenshot_answer(url: str, question: str, out: Path, width: int = 1000) -> None:
    """Open the page at ``url``, ask ``question`` and save a PNG of the whole page to ``out``."""
    with driver(width, 900) as d:
        d.get(url)
        ask(d, question)
        height, chrome = d.execute_script("return [document.documentElement.scrollHeight, "
                                          "window.outerHeight - window.innerHeight]")
        d.set_window_size(width, height + chrome)
        d.save_screenshot(str(out))

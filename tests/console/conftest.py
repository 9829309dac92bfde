"""The console tier: one real `jr2ray up --llm none` per module and one headless Debian Chromium (V1-V3).

The notes writer is driven externally (JR2RAY_NOTES_DRIVER=external in the up's environment), so the test plays it
over HTTP while the Console plays the editor.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))

from up_instance import up_fixture  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


up = up_fixture("console-home")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    pytest.importorskip("selenium")
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(f"the console tier needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1500,1250", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS

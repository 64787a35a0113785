"""The web console (GET /console) in a real headless browser (Debian's chromium and chromium-driver, through
selenium): log in with an API key, add a few turns, ask, and see the answer with its evidence and token bill.
``ENGRAM_CONSOLE_SCREENSHOT=path`` also saves the page there (docs/console.png was made this way)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import ADMIN_KEY, auth_headers

webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[dev]' (selenium)")
DRIVER = shutil.which("chromedriver")
USER = "console-user"


@pytest.fixture(scope="module")
def browser():
    if DRIVER is None or shutil.which("chromium") is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    flags = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100")
    for flag in flags:
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)  # NOTE: no Selenium Manager download
    yield driver
    driver.quit()


def test_log_in_add_turns_ask_and_see_the_evidence(service, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 300)  # an ask runs small models on two CPU cores
    browser.get(f"{service}/console")
    assert "Engram Cluster" in browser.title
    wait.until(ec.text_to_be_present_in_element((By.ID, "health-status"), "ok"))

    browser.find_element(By.ID, "api-key").send_keys("not-a-key")
    browser.find_element(By.ID, "login").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "login-state"), "401"))  # a wrong key is refused

    user = browser.find_element(By.ID, "user-id")
    user.clear()
    user.send_keys(USER)
    key = browser.find_element(By.ID, "api-key")
    key.clear()
    key.send_keys(ADMIN_KEY)
    browser.find_element(By.ID, "login").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "login-state"), "key accepted"))

    browser.find_element(By.ID, "turns").send_keys(
        "Ann: My sister Maya moved to Porto last spring.\nAnn: I visit Maya in Porto every August.\n"
        "Bo: I am learning to bake sourdough bread.")
    browser.find_element(By.ID, "ingest").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "ingest-result"), "3 of 3 stored"))

    browser.find_element(By.ID, "question").send_keys("Where does Maya live?")
    browser.find_element(By.ID, "ask").click()
    wait.until(ec.presence_of_element_located((By.ID, "answer")))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.evidence")
    assert rows and any("Porto" in r.text for r in rows)
    assert "tokens: assistants" in browser.find_element(By.ID, "tokens").text
    stored = httpx.get(f"{service}/v1/memories", params={"user_id": USER}, headers=auth_headers(ADMIN_KEY)).json()
    assert any(m["id"] in rows[0].text for m in stored["memories"])  # the evidence names the stored turn ids

    browser.find_element(By.ID, "load-memories").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "button.history")))
    browser.find_element(By.CSS_SELECTOR, "button.history").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "history"), "ADD"))

    shot = Path(os.environ.get("ENGRAM_CONSOLE_SCREENSHOT") or tmp_path / "console.png")
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    assert httpx.delete(f"{service}/v1/users/{USER}", headers=auth_headers(ADMIN_KEY)).status_code == 200

"""The page at ``GET /`` of ``basketgnn serve``, in a real browser against the real server.

One server (``python -m basketgnn serve`` as a subprocess, on a free loopback port, serving an
untrained checkpoint: tests/support/cli.py) and one headless Chromium (Selenium, driven through
Debian's chromedriver so that Selenium Manager never downloads a browser) serve the module.
Each test loads the page afresh, types as a user would and reads the rendered DOM; the API's
own answers (httpx) are what the page must show. Without Chromium or its driver the module is
skipped, naming the packages to install.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from tests.support.cli import make_checkpoint
from tests.support.server import start_server

#: Seconds the server may take to answer /ready, and the page to render an answer.
SERVER_START_S = 90
PAGE_WAIT_S = 20
K = 4
INSTALL = "apt-get install chromium chromium-driver"


def _browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver), or skip naming what is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = [
        name for name, path in (("chromium", browser), ("chromedriver", driver)) if path is None
    ]
    if missing:
        pytest.skip(
            f"the page's browser test needs Chromium and its driver ({' and '.join(missing)} not found on PATH): {INSTALL}"
        )
    return str(browser), str(driver)


@pytest.fixture(scope="module")
def browser_paths() -> tuple[str, str]:
    return _browser_paths()


@pytest.fixture(scope="module")
def server(browser_paths, tmp_path_factory):
    """(base URL, BasketData): ``basketgnn serve`` on an untrained checkpoint, stopped at the
    end of the module."""
    folder = tmp_path_factory.mktemp("serve-page")
    checkpoint, data = make_checkpoint(folder)
    s = start_server("--checkpoint", str(checkpoint), "--threads", "1", log=folder / "server.log",
                     timeout=SERVER_START_S)  # fmt: skip
    try:
        yield s.url, data
    finally:
        s.stop()


@pytest.fixture(scope="module")
def driver(browser_paths):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = browser_paths
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield d
    d.quit()


@pytest.fixture
def page(server, driver):
    """The page freshly loaded: (driver, base URL, BasketData)."""
    url, data = server
    driver.get(f"{url}/")
    return driver, url, data


def _type(driver, element_id: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def _rows(driver) -> list:
    """The recommended items' rows once the page has rendered them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, PAGE_WAIT_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#items tr.item"),
        "no recommended items were rendered",
    )


def test_customer_lookup_shows_the_apis_basket_reasons_and_timeline(page):
    from selenium.webdriver.common.by import By

    driver, url, data = page
    customer = str(data.user_ids[3])
    _type(driver, "customer", customer)
    _type(driver, "k", str(K))
    driver.find_element(By.ID, "lookup").click()
    rows = _rows(driver)

    api = httpx.get(
        f"{url}/v1/customers/{customer}/next-basket", params={"k": K}, timeout=30
    ).json()
    expected = [item["item_id"] for item in api["items"]]
    assert len(rows) == K
    assert [r.get_attribute("data-item-id") for r in rows] == expected
    assert [r.find_element(By.CSS_SELECTOR, "td.item").text for r in rows] == expected
    scores = [float(r.find_element(By.CSS_SELECTOR, "td.score").text) for r in rows]
    assert scores == pytest.approx([item["score"] for item in api["items"]], abs=6e-5)
    for row in rows:
        kinds = {
            li.get_attribute("data-kind") for li in row.find_elements(By.CSS_SELECTOR, "li.reason")
        }
        assert {"score", "repeat"} <= kinds, (row.get_attribute("data-item-id"), kinds)
    assert driver.find_element(By.ID, "error").text == ""

    history = httpx.get(
        f"{url}/v1/customers/{customer}/history", params={"last": 20}, timeout=30
    ).json()
    shown = [
        [chip.text for chip in basket.find_elements(By.CSS_SELECTOR, ".chip")]
        for basket in driver.find_elements(By.CSS_SELECTOR, "#timeline .basket")
    ]
    assert shown == [b["items"] for b in reversed(history["baskets"])]  # newest first
    assert len(shown) == min(20, history["n_baskets"]) > 0
    hits = {chip.text for chip in driver.find_elements(By.CSS_SELECTOR, "#timeline .chip.hit")}
    assert hits == {i for b in shown for i in b} & set(expected)
    assert (
        f"(last {len(shown)} of {history['n_baskets']})"
        in driver.find_element(By.ID, "timeline-title").text
    )


def test_pasted_history_names_unknown_items_in_the_warnings(page):
    from selenium.webdriver.common.by import By

    driver, url, data = page
    known = [str(i) for i in data.item_ids[:3]]
    _type(driver, "k", str(K))
    _type(driver, "history", json.dumps([known[:2], ["NO-SUCH-ITEM", known[2]]]))
    driver.find_element(By.ID, "recommend").click()
    rows = _rows(driver)

    assert len(rows) == K
    warnings = driver.find_element(By.ID, "warnings").text
    assert "NO-SUCH-ITEM" in warnings and "history" in warnings
    assert driver.find_element(By.ID, "error").text == ""
    new = driver.find_elements(By.CSS_SELECTOR, '#timeline .basket[data-new="true"]')
    assert len(new) == 2


def test_unknown_customer_shows_the_404_message(page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver, url, data = page
    # A stored customer first: their answer must not stay on screen under the error.
    _type(driver, "customer", str(data.user_ids[0]))
    driver.find_element(By.ID, "lookup").click()
    _rows(driver)

    answer = httpx.get(f"{url}/v1/customers/NO-SUCH-CUSTOMER/history", timeout=30)
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    _type(driver, "customer", "NO-SUCH-CUSTOMER")
    driver.find_element(By.ID, "lookup").click()
    error = WebDriverWait(driver, PAGE_WAIT_S).until(
        lambda d: d.find_element(By.ID, "error").text, "no error was shown"
    )
    assert message in error and "history box" in error  # the page's fix, not the API's
    assert driver.find_elements(By.CSS_SELECTOR, "tr.item") == []
    assert driver.find_elements(By.CSS_SELECTOR, "#timeline .basket") == []

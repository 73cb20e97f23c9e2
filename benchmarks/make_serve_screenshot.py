"""The README's screenshot of ``basketgnn serve``'s page: docs/serve-page.png.

Trains nothing: it serves the demo's trained checkpoint (``make demo`` writes
runs/demo/dnntsp/best.pt), looks up customer C000003 with k=5 in a 1280x900 headless Chromium
and saves the page. Needs the dev extra (selenium, httpx) and Debian's Chromium and driver
(``apt-get install chromium chromium-driver``); Selenium Manager downloads nothing.

    .venv/bin/python benchmarks/make_serve_screenshot.py [--checkpoint runs/demo/dnntsp/best.pt]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=PROJECT / "runs/demo/dnntsp/best.pt")
    ap.add_argument("--customer", default="C000003")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--size", default="1280x900", help="the window's width x height in pixels")
    ap.add_argument("--out", type=Path, default=PROJECT / "docs/serve-page.png")
    args = ap.parse_args()
    if not args.checkpoint.is_file():
        sys.exit(f"{args.checkpoint} not found: run `make demo` first (or pass --checkpoint)")
    browser, driver_path = (
        shutil.which("chromium") or shutil.which("chromium-browser"),
        shutil.which("chromedriver"),
    )
    if browser is None or driver_path is None:
        sys.exit("Chromium and chromedriver are needed: apt-get install chromium chromium-driver")
    width, height = (int(n) for n in args.size.lower().split("x"))

    sys.path.insert(0, str(PROJECT))
    from basketgnn.serve.launch import ServedProcess

    with tempfile.TemporaryDirectory() as work:
        server = ServedProcess(["--checkpoint", str(args.checkpoint)], Path(work) / "server.log",
                               env={"PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))})  # fmt: skip
        try:
            try:
                server.start()
            except RuntimeError as e:
                sys.exit(f"basketgnn serve did not start: {e}")
            _screenshot(server.url, browser, driver_path, args.customer, args.k, width, height, args.out)
        finally:
            server.stop(10)
    print(f"wrote {args.out} ({width}x{height}, customer {args.customer}, k={args.k})")


def _screenshot(
    url: str,
    browser: str,
    driver_path: str,
    customer: str,
    k: int,
    width: int,
    height: int,
    out: Path,
) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        # The page's own area is exactly width x height (a window size would include its frame).
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(f"{url}/")
        driver.find_element(By.ID, "customer").send_keys(customer)
        box = driver.find_element(By.ID, "k")
        box.clear()
        box.send_keys(str(k))
        driver.find_element(By.ID, "lookup").click()
        WebDriverWait(driver, 60).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#items tr.item")
        )
        error = driver.find_element(By.ID, "error").text
        if error:
            raise SystemExit(f"the page shows an error: {error}")
        driver.execute_script("document.activeElement.blur()")  # no focus ring in the picture
        out.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(out)):
            raise SystemExit(f"the screenshot could not be written to {out}")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()

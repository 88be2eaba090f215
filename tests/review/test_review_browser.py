"""End to end in real Chromium: open the page, accept one item with the keyboard (confirmed once), undo and accept
it again, edit another; a link with another token does not sign the reviewer out, and no other site may frame the
page."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest
from review_support import TOKENS, ServedMetrics, make_round

from flawforge.blobstore import LocalBlobStore
from flawforge.review.store import ReviewStore

CHROMIUM = os.environ.get("FLAWFORGE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FLAWFORGE_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOT = os.environ.get("FLAWFORGE_REVIEW_SCREENSHOT")  # where to save a picture of the page, if set
TOKEN_KEY = "flawforge-review-token"  # where the page keeps the reviewer's token (review.js)

pytestmark = pytest.mark.browser


@pytest.fixture
def browser():
    """Debian's Chromium through its chromedriver; Selenium is pointed at both so it never downloads."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        message = f"browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (required in CI)", pytrace=False)
        pytest.skip(message)
    profile = tempfile.mkdtemp(prefix="flawforge-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_review_an_item_with_the_keyboard_and_edit_another(browser, tmp_path, candidates, questions, shared_data):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    blob_dir = tmp_path / "blobs"
    items = make_round(ReviewStore(LocalBlobStore(blob_dir)), candidates, questions, size=1, reviewers_per_item=1)
    with ServedMetrics(blob_dir) as served:
        wait = WebDriverWait(browser, 15)
        browser.get(f"{served.url}/review/?round=r1#token={TOKENS['ana']}")

        def current_item() -> str:
            wait.until(lambda d: d.find_element(By.ID, "review").is_displayed()
                       and d.find_element(By.ID, "review").get_attribute("data-item-id"))
            return browser.find_element(By.ID, "review").get_attribute("data-item-id")

        first = current_item()
        assert first == items[0].item_id
        assert browser.find_element(By.ID, "question").text == items[0].question
        highlighted = browser.find_element(By.CSS_SELECTOR, "#flawed li.erroneous").text
        lines = items[0].candidate.flawed_solution.splitlines()
        assert highlighted == lines[items[0].flawed_line_index].strip()
        assert browser.find_element(By.ID, "reviewer").text == "Reviewer: ana"
        assert "0 done" in browser.find_element(By.ID, "progress").text
        assert TOKENS["ana"] not in browser.current_url  # the token left the address bar
        if SCREENSHOT:
            browser.save_screenshot(SCREENSHOT)

        # The tab's first one-key decision asks; declined, nothing is sent.
        browser.find_element(By.TAG_NAME, "body").send_keys("a")
        asked = wait.until(shown.alert_is_present())
        assert "accept" in asked.text
        asked.dismiss()
        wait.until(lambda d: d.find_element(By.ID, "status").text == "Nothing was sent.")
        assert current_item() == first and served.client("ana").get("/rounds/r1/decisions").json() == []
        browser.find_element(By.TAG_NAME, "body").send_keys("a")
        wait.until(shown.alert_is_present()).accept()
        wait.until(lambda d: current_item() != first)
        second = current_item()
        assert "1 done" in browser.find_element(By.ID, "progress").text

        # Undo takes the accept back: the page shows its item again, to be decided anew.
        browser.find_element(By.CSS_SELECTOR, ".actions button.undo").click()
        wait.until(lambda d: current_item() == first)
        assert "withdrawn" in browser.find_element(By.ID, "status").text
        assert "0 done" in browser.find_element(By.ID, "progress").text
        assert served.client("ana").get("/rounds/r1/decisions").json() == []
        browser.find_element(By.TAG_NAME, "body").send_keys("a")  # the tab confirmed a key decision already
        wait.until(lambda d: current_item() == second)

        # A link carrying ben's token leaves ana signed in, says so, and drops the token from the address bar.
        browser.get("about:blank")  # the link opens the page afresh (a mere fragment change would not load it)
        browser.get(f"{served.url}/review/?round=r1#token={TOKENS['ben']}")
        wait.until(lambda d: "another token" in d.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "reviewer").text == "Reviewer: ana"
        assert browser.execute_script(f"return localStorage.getItem('{TOKEN_KEY}')") == TOKENS["ana"]
        assert TOKENS["ben"] not in browser.current_url
        assert current_item() == second  # her open claim came back

        browser.find_element(By.TAG_NAME, "body").send_keys("e")
        box = wait.until(shown.visibility_of_element_located((By.ID, "edit-box")))
        generated = items[1].candidate.flawed_solution
        assert box.get_attribute("value") == generated
        box.send_keys(Keys.CONTROL, Keys.END)
        box.send_keys(" (checked)")
        box.send_keys(Keys.CONTROL, Keys.ENTER)  # not a one-key decision, and the tab confirmed one already
        wait.until(lambda d: current_item() not in (first, second))
        page = httpx.get(f"{served.url}/review/")
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["content-security-policy"] == "frame-ancestors 'none'"

        decisions = served.client("ana").get("/rounds/r1/decisions").json()
    assert [(d["item_id"], d["kind"], d["reviewer"]) for d in decisions] == [(first, "accept", "ana"),
                                                                             (second, "edit", "ana")]
    edit = decisions[1]
    assert edit["edited_solution"] == generated + " (checked)"
    assert [(c["op"], c["edited_lines"]) for c in edit["line_diff"]] == [
        ("replace", [generated.splitlines()[-1] + " (checked)"])]
    assert edit["edited_lines"] == ["FA"]

"""The console (`/_azq/ui`) in a real browser: Debian's chromium, headless, driven through
Debian's chromedriver by Selenium. It loads, shows queues and their counts move as the test puts
and receives through the official SDK, opens a queue and lists its messages (a leased one with
its dequeue count), and, with --admin, sends, receives, deletes and clears from the page. Over
HTTPS (--cert auto) it loads and refreshes too. Screenshots go to the test's directory, or to
docs/ (the ones README shows) when AZQ_UPDATE_SCREENSHOTS=1.
"""

import os
import shutil
import ssl
import time
import urllib.request
from pathlib import Path

import pytest
from azure.storage.queue import QueueServiceClient
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By

from conftest import REPO, require
from support import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, wait_until

def screenshot(driver, tmp_path, name):
    path = tmp_path / name
    driver.save_screenshot(str(path))
    if os.environ.get("AZQ_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(path, REPO / "docs" / name)
    return path


def cell_texts(driver, row_selector):
    """The texts of each row's cells, read in one script: the page rebuilds its tables every
    second, so reading cell by cell over WebDriver would race with it."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((row) => [...row.cells].map((cell) => cell.innerText.trim()));",
        row_selector)


def queue_row(driver, name):
    for cells in cell_texts(driver, "#queues tbody tr"):
        if len(cells) > 6 and cells[1] == name:
            # account, queue, messages, visible, leased, delayed, expired
            return dict(zip(["messages", "visible", "leased", "delayed", "expired"],
                            map(int, cells[2:7])))
    return None


def click(driver, selector):
    """Clicks what `selector` finds, again when the page replaced it as it was clicked (its
    tables are rebuilt every second)."""

    def attempt():
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return True
        except StaleElementReferenceException:
            return False

    wait_until(attempt, f"a click on {selector}")


def open_queue(driver, name):
    """Clicks the queue's row (again, if the page replaced the row as it was clicked) until the
    queue's page shows."""

    def click():
        try:
            for row in driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr"):
                if row.get_attribute("data-queue") == name:
                    row.click()
        except (StaleElementReferenceException, WebDriverException):
            pass
        return driver.find_element(By.ID, "queue-page").is_displayed()

    wait_until(click, f"the page of {name}")


def metric(server, name):
    """The sum of series `name` over its labels in the server's /_azq/metrics."""
    with urllib.request.urlopen(f"{server.url}/_azq/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.split("{", 1)[0].split(" ", 1)[0] == name)


def service_client(server):
    """An SDK client of `server`; over HTTPS it trusts the --cert auto certificate the server
    presents (the test started that server), as README tells users to."""
    verify = True
    if server.scheme == "https":
        host, port = server.address.rsplit(":", 1)
        verify = str(server.directory / "azq.pem")
        Path(verify).write_text(ssl.get_server_certificate((host, int(port))))
    return QueueServiceClient(server.account_url, credential={
        "account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
        connection_verify=verify, **CLIENT_KWARGS)


def test_the_console_shows_queues_move_and_opens_one(start_azq, browser, tmp_path):
    server = start_azq("--inMemoryPersistence", "--admin")
    queue = service_client(server).create_queue("orders")
    for index in range(3):
        queue.send_message(f"order {index}")
    browser.get(f"{server.url}/_azq/ui")
    assert browser.title == "azq console"
    wait_until(lambda: queue_row(browser, "orders") == {
        "messages": 3, "visible": 3, "leased": 0, "delayed": 0, "expired": 0}, "3 visible")
    leased = next(iter(queue.receive_messages(max_messages=1, visibility_timeout=300)))
    queue.send_message("later", visibility_timeout=600)
    queue.send_message("order 3")
    wait_until(lambda: queue_row(browser, "orders") == {
        "messages": 5, "visible": 3, "leased": 1, "delayed": 1, "expired": 0},
        "the lease and the delayed put on the page")
    assert "admin actions on" in browser.find_element(By.ID, "admin-state").text
    # Charts and tiles come from /_azq/stats: a few seconds of a producer and a consumer on
    # another queue (leases that run out, polls of an empty queue) give them lines.
    service = service_client(server)
    payments = service.create_queue("payments")
    idle = service.create_queue("payments-dlq")
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        for index in range(4):
            payments.send_message(f"payment {index}")
        for message in payments.receive_messages(max_messages=3, visibility_timeout=1):
            payments.delete_message(message)
        list(idle.receive_messages(max_messages=1))
        time.sleep(0.2)
    wait_until(lambda: browser.find_element(By.ID, "tile-messages").text != "5", "the tile")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#chart-requests polyline"),
               "a line in the requests chart")

    wait_until(lambda: queue_row(browser, "payments-dlq"), "the other queues listed")
    screenshot(browser, tmp_path, "console-overview.png")
    open_queue(browser, "orders")
    wait_until(lambda: len(cell_texts(browser, "#messages tbody tr")) == 5, "five messages listed")
    rows = cell_texts(browser, "#messages tbody tr")
    by_id = {cells[1]: cells for cells in rows}
    assert leased.id in by_id, rows
    # The leased message is there, invisible, with its dequeue count.
    assert by_id[leased.id][2] == "leased" and by_id[leased.id][3] == "1", by_id[leased.id]
    assert sorted(cells[2] for cells in rows) == ["delayed", "leased", "visible", "visible",
                                                  "visible"]
    screenshot(browser, tmp_path, "console-queue.png")

    # The page's own actions.
    browser.find_element(By.ID, "send-text").send_keys("from the console")
    browser.find_element(By.ID, "send-count").clear()
    browser.find_element(By.ID, "send-count").send_keys("3")
    browser.find_element(By.CSS_SELECTOR, "#send-form button").click()
    wait_until(lambda: browser.find_element(By.ID, "action-result").text, "the send's answer")
    assert browser.find_element(By.ID, "action-result").text == "sent 3"
    wait_until(lambda: len(cell_texts(browser, "#messages tbody tr")) == 8, "eight after sending")
    assert queue.get_queue_properties().approximate_message_count == 8
    browser.find_element(By.CSS_SELECTOR, "#receive-form button").click()
    wait_until(lambda: "received 1" in browser.find_element(By.ID, "action-result").text,
               "a receive")
    wait_until(lambda: sum(cells[2] == "leased" for cells in
                           cell_texts(browser, "#messages tbody tr")) == 2, "two leased")
    # Delete the message the test leased, whatever its lease.
    click(browser, f'#messages tr[data-id="{leased.id}"] button')
    wait_until(lambda: len(cell_texts(browser, "#messages tbody tr")) == 7, "seven after a delete")
    browser.find_element(By.ID, "clear-button").click()
    browser.switch_to.alert.accept()
    wait_until(lambda: browser.find_element(By.ID, "page-info").text == "no messages", "cleared")
    assert queue.get_queue_properties().approximate_message_count == 0


def test_without_admin_the_console_is_read_only(start_azq, browser):
    server = start_azq("--inMemoryPersistence")
    service_client(server).create_queue("quiet")
    browser.get(f"{server.url}/_azq/ui#/queue/devstoreaccount1/quiet")
    wait_until(lambda: "read-only" in browser.find_element(By.ID, "admin-state").text, "read-only")
    assert not browser.find_element(By.ID, "send-form").is_displayed()
    assert browser.find_element(By.ID, "admin-note").is_displayed()


def test_a_text_on_disk_only_is_read_back_for_the_page(start_azq, browser, tmp_path):
    """With --text-memory 0 a written text leaves memory: the queue's page reads it back and
    shows it in its text column (leaving it on disk), and a client still gets the text."""
    server = start_azq("--location", str(tmp_path / "data"), "--text-memory", "0")
    queue = service_client(server).create_queue("cold")
    queue.send_message("kept on disk")
    wait_until(lambda: metric(server, "azq_texts_on_disk") == 1, "the text on disk only")
    browser.get(f"{server.url}/_azq/ui#/queue/devstoreaccount1/cold")
    # Columns: number, ID, state, dequeue count, three times, bytes, text.
    wait_until(lambda: [cells[7:9] for cells in cell_texts(browser, "#messages tbody tr")]
               == [["12 B", "kept on disk"]], "the text read back")
    assert metric(server, "azq_texts_on_disk") == 1
    assert [message.content for message in queue.peek_messages()] == ["kept on disk"]


def test_the_console_works_over_https(start_azq, browser):
    server = start_azq("--inMemoryPersistence", "--cert", "auto")
    assert server.url.startswith("https://")
    service_client(server).create_queue("secure")
    browser.get(f"{server.url}/_azq/ui")
    wait_until(lambda: queue_row(browser, "secure") is not None, "the queue over HTTPS")
    first = browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed")
    wait_until(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed")
               != first, "a refresh a second later")
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors


SECRET_ACCOUNT = "secretacct"
SECRET_KEY = "c2VjcmV0IGtleSBvZiB0aGUgcGF5cm9sbCBhY2NvdW50LCBub3QgcHVibGlj"
PAYROLL = "the payroll file is at s3://x"


def account_client(server, account, key):
    return QueueServiceClient(f"{server.url}/{account}", credential={
        "account_name": account, "account_key": key}, **CLIENT_KWARGS)


def body_text(driver):
    return driver.find_element(By.TAG_NAME, "body").text


def test_a_private_account_shows_only_after_signing_in(start_azq, browser):
    """Issue 41: an account with a private key is not in the console until the user signs in
    with its key; a wrong key shows nothing more; signing out hides it again. The session is an
    HttpOnly, SameSite=Strict cookie."""
    server = start_azq("--inMemoryPersistence", "--admin", env={
        "AZURITE_ACCOUNTS": f"{SECRET_ACCOUNT}:{SECRET_KEY};{DEV_ACCOUNT}:{DEV_KEY}"})
    account_client(server, SECRET_ACCOUNT, SECRET_KEY).create_queue("ledger").send_message(PAYROLL)
    service_client(server).create_queue("open-q")
    browser.get(f"{server.url}/_azq/ui")
    wait_until(lambda: queue_row(browser, "open-q") is not None, "the open account's queue")
    assert queue_row(browser, "ledger") is None
    assert browser.find_element(By.ID, "sign-in-form").is_displayed()

    def sign_in(key):
        browser.find_element(By.ID, "sign-in-account").clear()
        browser.find_element(By.ID, "sign-in-account").send_keys(SECRET_ACCOUNT)
        browser.find_element(By.ID, "sign-in-key").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()

    sign_in(DEV_KEY)
    alert = wait_until(lambda: _alert(browser), "the refusal")
    assert "wrong account name or key" in alert.text
    alert.accept()
    time.sleep(1.5)
    assert queue_row(browser, "ledger") is None

    sign_in(SECRET_KEY)
    wait_until(lambda: queue_row(browser, "ledger") == {
        "messages": 1, "visible": 1, "leased": 0, "delayed": 0, "expired": 0}, "the ledger")
    assert "signed in as secretacct" in browser.find_element(By.ID, "who").text
    cookie = browser.get_cookie("azq_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    assert browser.execute_script("return document.cookie") == ""
    open_queue(browser, "ledger")
    wait_until(lambda: PAYROLL in body_text(browser), "the message on the queue's page")

    browser.get(f"{server.url}/_azq/ui")
    wait_until(lambda: queue_row(browser, "ledger") is not None, "the ledger again")
    click(browser, "#sign-out")
    wait_until(lambda: queue_row(browser, "ledger") is None and queue_row(browser, "open-q"),
               "the ledger hidden after signing out")
    assert browser.get_cookie("azq_session") is None


def _alert(driver):
    try:
        return driver.switch_to.alert
    except Exception:  # noqa: BLE001 (NoAlertPresentException until it shows)
        return None


ATTACK_PAGE = """<!doctype html>
<html><body>
<iframe name="sink"></iframe>
<form id="form" method="POST" action="{target}/_azq/reset" target="sink" enctype="text/plain">
<input name='{{"a":"' value='"}}'></form>
<script>
fetch("{target}/_azq/admin/devstoreaccount1/kept/clear", {{
  method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}})
  .catch(() => null)
  .then(() => {{
    document.body.dataset.fetched = "1";
    document.querySelector("iframe").onload = () => {{ document.body.dataset.posted = "1"; }};
    document.getElementById("form").submit();
  }});
</script>
</body></html>
"""


def test_a_cross_site_page_and_a_rebinding_name_reach_nothing(start_azq, browser, tmp_path):
    """Issue 41: a page on another site (localhost vs 127.0.0.1) fires a form POST to
    /_azq/reset and a no-cors fetch to clear a queue, in a browser where the console is open;
    both are refused and the queue keeps its message. A DNS-rebinding name (rebind.test, mapped
    to 127.0.0.1 as the attacker's DNS would) reads no queue."""
    import http.server
    import threading

    server = start_azq("--inMemoryPersistence", "--admin")
    queue = service_client(server).create_queue("kept")
    queue.send_message("kept text")
    browser.get(f"{server.url}/_azq/ui")
    wait_until(lambda: queue_row(browser, "kept") is not None, "the console")

    site = tmp_path / "attacker"
    site.mkdir()
    (site / "attack.html").write_text(ATTACK_PAGE.format(target=server.url))
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *args, directory=str(site))
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://localhost:{attacker.server_address[1]}/attack.html")
        wait_until(lambda: browser.execute_script(
            "return document.body.dataset.posted === '1' && document.body.dataset.fetched === '1'"),
            "the attack page's form and fetch")
    finally:
        attacker.shutdown()
    assert [message.content for message in queue.peek_messages()] == ["kept text"]
    assert [q.name for q in service_client(server).list_queues()] == ["kept"]

    port = server.address.rsplit(":", 1)[1]
    browser.get(f"http://rebind.test:{port}/_azq/inspect")
    text = body_text(browser)
    assert "kept" not in text.replace("rebind", "") and "DNS" in text, text

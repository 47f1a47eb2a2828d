"""Fixtures of the observability suite: a real azq (AZQ_BIN, the release build) and, for the
dashboard tests, a real Prometheus (Debian's `prometheus`) scraping it with the scrape
configuration of deploy/prometheus/prometheus.yml, and a real Chromium (Debian's `chromium`
through Debian's `chromedriver`, the `browser` fixture) for the console and azq-loadgen's HTML
report.

scripts/test.sh installs chromium, chromium-driver and prometheus from apt where it can; a test
whose program is missing is skipped with the reason (the script prints one SKIP line then).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"azq listening on (https?)://([^ ]+) ")
START_TIMEOUT_S = 30


class Azq:
    """One azq process on 127.0.0.1 with a free port; stopped with SIGTERM."""

    def __init__(self, arguments, directory, env=None):
        self.directory = Path(directory)
        binary = os.environ.get("AZQ_BIN", str(REPO / "target" / "release" / "azq"))
        self.process = subprocess.Popen(
            [binary, "--queueHost", "127.0.0.1", "--queuePort", "0", "--shards", "2", *arguments],
            cwd=directory,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        self.lines = []
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"azq exited: {self.process.stderr.read()}")
            self.lines.append(line)
            match = READY.search(line)
            if match:
                self.scheme, self.address = match.group(1), match.group(2)
                break
        else:
            raise AssertionError("azq did not print its ready line")
        self.url = f"{self.scheme}://{self.address}"
        self.account_url = f"{self.url}/devstoreaccount1"

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def start_azq(tmp_path):
    """Factory: `start_azq(*arguments, env=None)` starts an azq (with `env` added to the
    environment) that the test's end stops."""
    started = []

    def start(*arguments, env=None):
        server = Azq(list(arguments), tmp_path, env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def require(program):
    """The path of `program`, or a skip naming it."""
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"{program} is not installed (scripts/test.sh installs it from apt as root)")
    return path


WINDOW = (1280, 900)


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium through chromedriver (Selenium), or a skip naming what is missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/test.sh installs it from apt as root)")
    driver_path = require("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # Headless and with nothing that would reach the network (no registry but ours exists):
    # without these, chromium's background requests make page loads hang here.
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--ignore-certificate-errors", f"--user-data-dir={tmp_path / 'chromium'}",
                     # A name that resolves to loopback, as a DNS-rebinding page's would.
                     "--host-resolver-rules=MAP rebind.test 127.0.0.1",
                     f"--window-size={WINDOW[0]},{WINDOW[1]}"]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()

"""azq-loadgen's `--html` report in a real browser: a short workers run against a real azq
writes the report and its JSON; headless Chromium opens the file with the network unused and
logs no error, every chart (an inline SVG) is drawn with a size, and the tables' cells show the
JSON report's numbers. loadgen/tests/against_azq.rs parses the same kind of file without a
browser.
"""

import json
import os
import subprocess
from pathlib import Path

from selenium.webdriver.common.by import By

from conftest import REPO

RUN_TIMEOUT_S = 60


def loadgen_binary():
    """AZQ_LOADGEN_BIN, or the release build beside AZQ_BIN's (scripts/test.sh builds both)."""
    if "AZQ_LOADGEN_BIN" in os.environ:
        return os.environ["AZQ_LOADGEN_BIN"]
    server = Path(os.environ.get("AZQ_BIN", str(REPO / "target" / "release" / "azq")))
    return str(server.with_name("azq-loadgen"))


def test_the_html_report_renders_without_errors(start_azq, browser, tmp_path):
    server = start_azq("--inMemoryPersistence")
    report_json, report_html = tmp_path / "run.json", tmp_path / "run.html"
    subprocess.run(
        [loadgen_binary(), "--endpoint", server.account_url, "--quiet",
         "--scenario", "workers", "--producers", "1", "--consumers", "2", "--rate", "50",
         "--work-time", "1ms", "--duration", "2s", "--warmup", "0.5s",
         "--json", str(report_json), "--html", str(report_html)],
        check=True, timeout=RUN_TIMEOUT_S, capture_output=True)
    report = json.loads(report_json.read_text())
    browser.get(report_html.as_uri())
    assert browser.title == "azq-loadgen report: workers"
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    ids = [chart.get_attribute("id") for chart in charts]
    assert ids[:2] == ["latency", "throughput-depth"], ids
    assert len([i for i in ids if i.startswith("series-")]) == 3 + len(report.get("series", []))
    for chart in charts:
        svg = chart.find_element(By.TAG_NAME, "svg")
        size = svg.size
        assert size["width"] > 100 and size["height"] > 100, (chart.get_attribute("id"), size)
        assert svg.find_elements(By.TAG_NAME, "polyline"), chart.get_attribute("id")
    # Read in one script: every cell that names a JSON value, with its text.
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('[data-json]'))"
        ".map(cell => [cell.dataset.json, cell.textContent]);")
    assert len(cells) >= 60, len(cells)
    for pointer, text in cells:
        value = report
        for token in pointer.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            value = value[int(token)] if isinstance(value, list) else value.get(token)
            if value is None:
                break
        expected = ("n/a" if value is None else value if isinstance(value, str)
                    else json.dumps(value))
        assert text == expected or float(text) == float(expected), (pointer, text, expected)
    verdicts = browser.find_element(By.ID, "verdicts").text
    assert "errors:" in verdicts and "workers:" in verdicts, verdicts

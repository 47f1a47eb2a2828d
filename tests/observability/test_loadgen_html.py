"""azq-loadgen's `--html` report in a real browser: a short shaped, autoscaled workers run
against a real azq writes the report and its JSON; headless Chromium opens the file with the
network unused and logs no error; the page leads with the answer (the headline block first in
<main>, the SLO's verdict in it, then the one chart with arrivals, queue depth and replicas on a
shared time axis, then the latency charts) and keeps the raw tables in closed <details>; every
chart (an inline SVG) is drawn with a size, and the tables' cells show the JSON report's
numbers. A screenshot of the top of the page is saved beside the report (AZQ_SCREENSHOT_DIR
keeps a copy) for a person to look at. loadgen/tests/against_azq.rs parses the same kind of
file without a browser.
"""

import json
import os
import shutil
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


def json_at(report, pointer):
    """The value at a JSON pointer (RFC 6901), or None."""
    value = report
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        value = value[int(token)] if isinstance(value, list) else value.get(token)
        if value is None:
            break
    return value


def test_the_html_report_leads_with_the_answer_and_renders_without_errors(
        start_azq, browser, tmp_path):
    server = start_azq("--inMemoryPersistence")
    report_json, report_html = tmp_path / "run.json", tmp_path / "run.html"
    subprocess.run(
        [loadgen_binary(), "--endpoint", server.account_url, "--quiet",
         "--scenario", "workers", "--producers", "1", "--work-time", "20ms",
         "--shape", "step:20/s,80/s@1s,20/s@2s", "--duration", "4s", "--warmup", "0.5s",
         "--autoscale", "min=1,max=4,polling=1s,sync=1s,tolerance=0,cold-start=200ms",
         "--slo", "e2e-p99=60s",
         "--json", str(report_json), "--html", str(report_html)],
        check=True, timeout=RUN_TIMEOUT_S, capture_output=True)
    report = json.loads(report_json.read_text())
    browser.get(report_html.as_uri())
    assert browser.title == "azq-loadgen report: workers"
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors

    # The answer first: <main> opens with the headline, then the overview, then latency.
    children = browser.execute_script(
        "return Array.from(document.querySelector('main').children)"
        ".map(element => element.id || element.tagName.toLowerCase());")
    assert children[:3] == ["headline", "overview", "latency-section"], children
    assert browser.execute_script(
        "return document.querySelector('h1').parentElement.nextElementSibling.tagName") == "MAIN"
    headline = browser.find_element(By.ID, "headline")
    assert headline.location["y"] < 300, headline.location
    answer = browser.find_element(By.ID, "answer")
    assert "SLO end-to-end p99 <= 60.0 s met" in answer.text, answer.text
    assert "pass" in answer.get_attribute("class").split()
    numbers = browser.find_element(By.ID, "numbers").text
    for label in ["Worker-seconds", "Backlog peak", "Drain time", "Errors", "Workers"]:
        assert label in numbers, numbers
    assert report["headline"]["slo"]["met"] is True, report["headline"]
    assert f"{report['headline']['worker_seconds']:.1f}" in numbers, numbers

    # The overview: arrivals with the shape's target, depth, and the replicas, one time axis.
    overview = browser.find_element(By.CSS_SELECTOR, "figure#overview svg")
    overview_text = overview.text
    for strip in ["puts per s (arrivals)", "target per s (puts, --shape)", 
                  "messages in the queues", "replicas asked for", "replicas ready"]:
        assert strip in overview_text, overview_text
    assert len(overview.find_elements(By.TAG_NAME, "polyline")) >= 5
    assert overview.size["height"] > 400, overview.size

    # The raw tables and the printed table are folded: inside <details> left closed.
    folded = browser.execute_script(
        "return Array.from(document.querySelectorAll('table[id^=raw-], #text-table'))"
        ".map(element => { const details = element.closest('details');"
        " return [element.id, details !== null && !details.open]; });")
    assert len(folded) >= 4, folded
    assert all(closed for _, closed in folded), folded
    assert browser.find_element(By.ID, "run").is_displayed()
    assert not browser.find_element(By.ID, "raw-settings").is_displayed()

    # Evidence for a person: the top of the page as Chromium draws it.
    screenshot = tmp_path / "report-top.png"
    browser.save_screenshot(str(screenshot))
    if "AZQ_SCREENSHOT_DIR" in os.environ:
        shutil.copy(screenshot, Path(os.environ["AZQ_SCREENSHOT_DIR"]) / "loadgen-report.png")

    # Every chart, the folded ones opened, is drawn with a size.
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true);")
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    ids = [chart.get_attribute("id") for chart in charts]
    assert ids[:2] == ["overview", "latency"], ids
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
        value = json_at(report, pointer)
        expected = ("n/a" if value is None else value if isinstance(value, str)
                    else json.dumps(value))
        assert text == expected or float(text) == float(expected), (pointer, text, expected)


def test_a_simulated_report_and_a_sweep_lead_with_the_answer(browser, tmp_path):
    """`--simulate` (no server): the same report, marked simulated in its header, leading with
    the headline and the shared-axis chart; `--sweep`: the answer (the cheapest point meeting
    the SLO) first, then the table with that row marked, then one chart per measure."""
    simulated_json, simulated_html = tmp_path / "simulated.json", tmp_path / "simulated.html"
    subprocess.run(
        [loadgen_binary(), "--simulate", "--quiet", "--scenario", "workers",
         "--work-time", "lognormal:p50=80ms,p99=300ms",
         "--shape", "spike:base=20/s,peak=120/s,at=10s,for=10s", "--duration", "40s",
         "--warmup", "5s", "--autoscale", "max=20,polling=1s,sync=1s,cooldown=10s,cold-start=1s",
         "--slo", "e2e-p99=10s", "--json", str(simulated_json), "--html", str(simulated_html)],
        check=True, timeout=RUN_TIMEOUT_S, capture_output=True)
    report = json.loads(simulated_json.read_text())
    assert report["runtime"] == "simulated", report["runtime"]
    browser.get(simulated_html.as_uri())
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors
    children = browser.execute_script(
        "return Array.from(document.querySelector('main').children)"
        ".map(element => element.id || element.tagName.toLowerCase());")
    assert children[:3] == ["headline", "overview", "latency-section"], children
    marked = browser.find_element(By.ID, "simulated")
    assert marked.is_displayed() and "Simulated in virtual time" in marked.text, marked.text
    assert report["simulation"] in marked.text, (report["simulation"], marked.text)
    overview_text = browser.find_element(By.CSS_SELECTOR, "figure#overview svg").text
    for strip in ["messages in the queues", "replicas asked for", "replicas ready"]:
        assert strip in overview_text, overview_text

    sweep_json, sweep_html = tmp_path / "sweep.json", tmp_path / "sweep.html"
    subprocess.run(
        [loadgen_binary(), "--quiet", "--scenario", "workers", "--rate", "50",
         "--arrival", "poisson", "--work-time", "exp:mean=30ms", "--duration", "60s",
         "--warmup", "5s", "--slo", "e2e-p99=300ms", "--sweep", "consumers=1,2,3,5",
         "--json", str(sweep_json), "--html", str(sweep_html)],
        check=True, timeout=RUN_TIMEOUT_S, capture_output=True)
    sweep = json.loads(sweep_json.read_text())
    cheapest = sweep["cheapest"]
    assert cheapest is not None and sweep["points"][cheapest]["slo_met"] is True, sweep
    browser.get(sweep_html.as_uri())
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors
    answer = browser.find_element(By.ID, "answer")
    assert answer.text == sweep["answer"], (answer.text, sweep["answer"])
    table = browser.find_element(By.ID, "points")
    assert answer.location["y"] < table.location["y"] < 400, (answer.location, table.location)
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == len(sweep["points"]) == 4
    marked = [index for index, row in enumerate(rows)
              if "cheapest" in (row.get_attribute("class") or "")]
    assert marked == [cheapest], marked
    assert rows[cheapest].text.startswith(sweep["points"][cheapest]["settings"]["consumers"])
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert [chart.get_attribute("id") for chart in charts] == [
        "end-to-end", "worker-seconds", "backlog-peak", "drain-time"]
    for chart in charts:
        svg = chart.find_element(By.TAG_NAME, "svg")
        assert svg.size["width"] > 100 and svg.size["height"] > 100, chart.get_attribute("id")
        assert chart.location["y"] > table.location["y"], chart.get_attribute("id")
    # A bar per point that has a value (a missing one is written "none").
    bars = charts[1].find_elements(By.CSS_SELECTOR, "rect[fill]")
    assert len(bars) >= len(sweep["points"]), len(bars)
    screenshot = tmp_path / "sweep.png"
    browser.save_screenshot(str(screenshot))
    if "AZQ_SCREENSHOT_DIR" in os.environ:
        shutil.copy(screenshot, Path(os.environ["AZQ_SCREENSHOT_DIR"]) / "loadgen-sweep.png")

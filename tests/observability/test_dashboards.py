"""Every query of deploy/grafana/azq.json, run against a real Prometheus scraping a real azq
under traffic, returns data; every alert rule of deploy/prometheus/alerts.yml evaluates; and
the compose example names only files that exist.

The Prometheus configuration is deploy/prometheus/prometheus.yml itself, with its target
replaced by the test server's address and a one-second scrape interval. The traffic makes every
series move: puts, gets, deletes and updates, empty gets, redeliveries (a lease that runs out),
throttling (--queue-rate-limit with a short burst, which a burst of puts from several
connections exceeds) and an injected fault (--faults), on a server that keeps its
data on disk (the log's flushes).
"""

import json
import math
import re
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueServiceClient

from conftest import REPO, Azq, require
from support import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, wait_until

DASHBOARD = REPO / "deploy" / "grafana" / "azq.json"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
# Grafana's variables, as the dashboard would fill them with every job and instance.
VARIABLES = {"$__rate_interval": "15s", "$job": ".*", "$instance": ".*"}
TRAFFIC_QUEUES = ["work", "idle", "slow", "hot", "faulty"]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def dashboard_queries():
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["expr"]))
    return queries


def fill(expression):
    for name, value in VARIABLES.items():
        expression = expression.replace(name, value)
    return expression


class Traffic(threading.Thread):
    """Keeps every series of the dashboard moving until stopped."""

    def __init__(self, account_url):
        super().__init__(daemon=True)
        self.service = QueueServiceClient(account_url, credential={
            "account_name": DEV_ACCOUNT, "account_key": DEV_KEY}, **CLIENT_KWARGS)
        for name in TRAFFIC_QUEUES:
            self.service.create_queue(name)
        self.pool = ThreadPoolExecutor(max_workers=8)
        self.stopping = threading.Event()
        self.rounds = 0
        self.errors = []

    def client(self, name):
        return self.service.get_queue_client(name)

    def patient(self, call):
        """`call()`, again while the queue's rate limit answers 503: a round makes more requests
        on the work queue than its burst (100 ms of 50/s) holds, and a fast machine sends them
        all at once, so without waiting its deletes would never be reached."""
        for _ in range(200):
            try:
                return call()
            except HttpResponseError as error:
                if error.status_code != 503:
                    raise
                time.sleep(0.025)
        return call()

    def hot_put(self, _):
        try:
            self.client("hot").send_message("over the limit")
        except HttpResponseError:
            pass

    def run(self):
        work, idle, slow = self.client("work"), self.client("idle"), self.client("slow")
        faulty = self.client("faulty")
        while not self.stopping.is_set():
            try:
                for index in range(3):
                    self.patient(lambda: work.send_message(f"job {self.rounds}.{index}"))
                for message in self.patient(lambda: list(
                        work.receive_messages(messages_per_page=3, max_messages=3))):
                    self.patient(lambda: work.update_message(message, visibility_timeout=0))
                for message in self.patient(lambda: list(
                        work.receive_messages(messages_per_page=3, max_messages=3))):
                    self.patient(lambda: work.delete_message(message))
                self.patient(lambda: list(idle.receive_messages(max_messages=1)))
                self.patient(lambda: slow.send_message("leased, never deleted"))
                # A one-second lease that runs out: the next rounds deliver it again.
                self.patient(lambda: list(
                    slow.receive_messages(max_messages=32, visibility_timeout=1)))
                # Far above the queue limit, from several connections at once: the bucket runs
                # dry and the rest are throttled.
                list(self.pool.map(self.hot_put, range(48)))
                try:
                    faulty.send_message("may fail")
                except HttpResponseError:
                    pass
            except HttpResponseError as error:
                # Any queue may meet the rate limit (a burst of 100 ms); anything else is wrong.
                if error.status_code != 503:
                    self.errors.append(repr(error))
            except Exception as error:  # noqa: BLE001 - kept for the assertion below
                self.errors.append(repr(error))
            self.rounds += 1
            time.sleep(0.3)

    def stop(self):
        self.stopping.set()
        self.join(timeout=30)
        self.pool.shutdown()


class Prometheus:
    def __init__(self, directory, target):
        config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        config["rule_files"] = [str(ALERTS)]
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [target]}]
        path = directory / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(directory / "prometheus.log", "w")
        self.process = subprocess.Popen(
            [require("prometheus"), f"--config.file={path}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path, **parameters):
        url = f"{self.url}{path}?{urllib.parse.urlencode(parameters)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    def query(self, expression):
        answer = self.get("/api/v1/query", query=expression)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def ready(self):
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """One azq under traffic and one Prometheus scraping it, for every test of the module."""
    require("prometheus")
    tmp_path = tmp_path_factory.mktemp("scraped")
    rules = tmp_path / "faults.json"
    rules.write_text(json.dumps([{"queue": "faulty", "operation": "PutMessage",
                                  "probability": 0.5, "action": {"error": "ServerBusy"}}]))
    data = tmp_path / "azq-data"
    data.mkdir()
    # --metrics queues: the dashboard's depth panel and the depth alert need the queues' names.
    server = Azq(["--location", str(data), "--metrics", "queues", "--queue-rate-limit", "50",
                  "--rate-burst", "100ms", "--faults", str(rules), "--seed", "7"], tmp_path)
    prometheus = Prometheus(tmp_path, server.address)
    traffic = Traffic(server.account_url)
    traffic.start()
    try:
        wait_until(prometheus.ready, "Prometheus ready", timeout_s=60)
        wait_until(lambda: prometheus.query('up{job="azq"} == 1'), "azq scraped", timeout_s=60)
        # Enough scrapes for every 15 s rate to have several samples, with traffic all along.
        wait_until(lambda: prometheus.query(
            'count_over_time(azq_requests_total{operation="PutMessage",status="201"}[1m]) >= 8'),
            "eight scrapes of the traffic", timeout_s=90)
        yield prometheus, traffic
    finally:
        traffic.stop()
        prometheus.stop()
        server.stop()
    assert not traffic.errors, traffic.errors[:3]


def test_every_dashboard_query_returns_data(scraped):
    prometheus, _ = scraped
    queries = dashboard_queries()
    assert len(queries) >= 20
    empty = []
    for title, expression in queries:
        result = prometheus.query(fill(expression))
        values = [float(sample["value"][1]) for sample in result]
        if not any(math.isfinite(value) for value in values):
            empty.append((title, fill(expression), result))
    assert not empty, "queries without data:\n" + "\n".join(map(str, empty))


def test_azure_names_are_there(scraped):
    prometheus, _ = scraped
    types = {sample["metric"]["response_type"] for sample in prometheus.query(
        'sum by (response_type) (azq_requests_total)')}
    assert {"Success", "ServerBusyError"} <= types, types
    wanted = ["puts", "delivered", "redelivered", "empty_gets", "deletes", "updates"]

    def events():
        return {sample["metric"]["event"]: float(sample["value"][1]) for sample in
                prometheus.query("sum by (event) (azq_message_events_total)")}

    # The traffic does every kind of event all along, but a scrape can come before a slow
    # machine's consumers did some kind for the first time: wait for a scrape that has them all.
    seen = wait_until(lambda: all(events().get(event, 0) > 0 for event in wanted) and events(),
                      "a scrape with every kind of message event", timeout_s=60)
    for event in wanted:
        assert seen.get(event, 0) > 0, seen
    assert float(prometheus.query("sum(azq_wal_flushes_total)")[0]["value"][1]) > 0


def test_every_alert_rule_evaluates(scraped):
    prometheus, _ = scraped
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) >= 5
    for rule in rules:
        prometheus.query(rule["expr"])
    # Prometheus loaded the same file and evaluates it.
    loaded = prometheus.get("/api/v1/rules")["data"]["groups"]
    assert sum(len(group["rules"]) for group in loaded) == len(rules)
    # The throttling alert's condition holds under this traffic (its `for:` keeps it pending).
    assert prometheus.query(next(rule["expr"] for rule in rules if rule["alert"] == "AzqThrottling"))


def test_compose_example_names_files_that_exist():
    compose_path = REPO / "deploy" / "grafana" / "compose.yaml"
    compose = yaml.safe_load(compose_path.read_text())
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (compose_path.parent / source).exists(), source
    for provisioning in (REPO / "deploy" / "grafana" / "provisioning").rglob("*.yaml"):
        yaml.safe_load(provisioning.read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "azq-overview"
    # Azure's metric names appear as panel titles.
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    for name in ["Transactions", "SuccessE2ELatency", "SuccessServerLatency", "QueueMessageCount",
                 "ResponseType", "ApiName"]:
        assert name in titles, name
    assert re.search(r"job_name: azq", PROMETHEUS_CONFIG.read_text())

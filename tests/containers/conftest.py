"""Fixtures of the container suite: podman, the image under test, containers that clean up.

scripts/container-test.sh builds the image and sets the environment: AZQ_IMAGE (the image),
AZQ_TEST_LABEL (a label on every container, so a failed run's leftovers can be removed),
CONTAINERS_CONF / CONTAINERS_STORAGE_CONF (its private podman setup) and DOCKER_HOST (podman's
Docker-compatible socket, for testcontainers-python). Without AZQ_IMAGE every test is skipped:
run the suite through the script.

Host ports are always chosen by podman (`-p 127.0.0.1::PORT`), never fixed, so runs on a shared
machine do not collide.
"""

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import pytest

IMAGE = os.environ.get("AZQ_IMAGE")
LABEL = os.environ.get("AZQ_TEST_LABEL", "azq-container-test")
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
# Bounds on every wait; generous for a 2-core machine shared with compilers.
READY_TIMEOUT_S = 30.0
PODMAN_TIMEOUT_S = 120.0
# The SDKs' own retries would hide a server that answers badly; timeouts bound a hung one.
CLIENT_KWARGS = {"retry_total": 0, "connection_timeout": 10, "read_timeout": 30}



def pytest_collection_modifyitems(config, items):
    """Without an image to test, every test is skipped with the reason."""
    if IMAGE is None:
        skip = pytest.mark.skip(reason="AZQ_IMAGE unset: run through scripts/container-test.sh")
        for item in items:
            item.add_marker(skip)


def podman(*arguments, check=True, timeout=PODMAN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs `podman ARGUMENTS`; its output as text. Raises with stderr when it fails and `check`."""
    completed = subprocess.run(
        ["podman", *arguments], capture_output=True, text=True, timeout=timeout
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(arguments)} exited {completed.returncode}: {completed.stderr}"
        )
    return completed


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Container:
    """A container started by the `run` fixture."""

    name: str
    ports: dict = field(default_factory=dict)

    def logs(self) -> str:
        completed = podman("logs", self.name, check=False)
        return completed.stdout + completed.stderr

    def inspect(self) -> dict:
        return json.loads(podman("inspect", self.name).stdout)[0]

    def running(self) -> bool:
        return self.inspect()["State"]["Running"]

    def host_port(self, container_port: int) -> int:
        """The host port podman mapped `container_port` to (looked up afresh: a restart may
        change it)."""
        answer = podman("port", self.name, f"{container_port}/tcp").stdout.strip().splitlines()
        return int(answer[0].rsplit(":", 1)[1])

    def url(self, container_port: int = 10001, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.host_port(container_port)}/{DEV_ACCOUNT}"

    def connection_string(self, scheme: str = "http") -> str:
        """The development account on the three ports, as Testcontainers modules build it."""
        return (
            f"DefaultEndpointsProtocol={scheme};AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint={self.url(10000, scheme)};QueueEndpoint={self.url(10001, scheme)};"
            f"TableEndpoint={self.url(10002, scheme)};"
        )

    def wait_for_log(self, text: str, timeout_s: float = READY_TIMEOUT_S, times: int = 1) -> str:
        """Waits until the logs contain `text` (`times` times: a restarted container's logs
        keep its earlier runs'); the logs. Fails early when the container exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            logs = self.logs()
            if logs.count(text) >= times:
                return logs
            state = self.inspect()["State"]
            if not state["Running"] or time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: no {text!r} (running: {state['Running']}, exit code "
                    f"{state.get('ExitCode')}); logs:\n{logs}"
                )
            time.sleep(0.1)

    def wait_for_exit(self, timeout_s: float = READY_TIMEOUT_S) -> int:
        completed = podman("wait", self.name, timeout=timeout_s)
        return int(completed.stdout.strip().splitlines()[-1])

    def healthcheck(self) -> bool:
        """Runs the image's HEALTHCHECK once (podman's timers need systemd, absent here)."""
        return podman("healthcheck", "run", self.name, check=False).returncode == 0


@pytest.fixture
def run():
    """`run(*podman_run_options, command=[...], ports=(10001,))` starts a detached container of
    the image with the given ports published on random loopback host ports; removed at the end.
    With `before_start`, the container is created, handed to `before_start(name)` (to copy files
    in, as Testcontainers does between create and start), then started."""
    started = []

    def start(*options, command=(), ports=(10000, 10001, 10002), name=None, image=None,
              before_start=None):
        name = name or unique("azq-test")
        publish = [argument for port in ports for argument in ("-p", f"127.0.0.1::{port}")]
        arguments = ["--name", name, "--label", LABEL, *publish, *options, image or IMAGE, *command]
        if before_start is None:
            podman("run", "-d", *arguments)
            started.append(name)
        else:
            podman("create", *arguments)
            started.append(name)
            before_start(name)
            podman("start", name)
        return Container(name)

    yield start
    for name in started:
        podman("rm", "-f", "-t", "2", name, check=False)


@pytest.fixture
def volume():
    """`volume()` makes a fresh named volume, removed at the end."""
    made = []

    def make():
        name = unique("azq-test-data")
        podman("volume", "create", "--label", LABEL, name)
        made.append(name)
        return name

    yield make
    for name in made:
        podman("volume", "rm", "-f", name, check=False)

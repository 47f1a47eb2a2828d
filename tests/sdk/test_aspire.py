""".NET Aspire's executable mode: `azq azurite` started as an AppHost's executable resource
starts it (README, "Use it instead of Azurite"), then driven by the official Python SDK through
the connection string that AppHost builds.

What Aspire does (dotnet/aspire, src/Aspire.Hosting): `AddExecutable(name, "azq",
workingDirectory, "azurite", …)` has DCP start the command with those arguments in that
directory, with the AppHost's environment and the resource's own variables; `WithHttpEndpoint(name: "queue", env:
"AZQ_QUEUE_PORT")` with no target port makes DCP choose a free port and put it in that variable
(the endpoint's `TargetPort`, a `portForServing` template DCP expands before the start), and the
process listens on localhost. Clients reach it through DCP's proxy on the endpoint's `Port`;
this test, without DCP (.NET cannot run here), connects to the target port itself, which is what
the proxy forwards to. `WithHttpHealthCheck("/_azq/health", endpointName: "queue")` asks the
health path; DCP stops the process with SIGTERM.
"""

import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from azure.storage.queue import QueueServiceClient

from conftest import server_binary
from support import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, unique_queue_name

# Bounds on the start and the stop: generous for a 2-core machine shared with compilers.
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30


def free_port() -> int:
    """A loopback port free right now, as DCP picks one for an endpoint without a target port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def aspire_connection_string(scheme: str, host: str, port: int) -> str:
    """What the README's AppHost builds for the queue endpoint, as Aspire.Hosting.Azure.Storage's
    own emulator connection string is made (AzureStorageEmulatorConnectionString.cs)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"QueueEndpoint={scheme}://{host}:{port}/{DEV_ACCOUNT};"
    )


def wait_for_line(process: subprocess.Popen, prefix: str) -> list:
    """Reads the process's stdout until a line starts with `prefix`; the lines read."""
    deadline = time.monotonic() + START_TIMEOUT_S
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    process.kill()
    raise AssertionError(f"no line {prefix!r} from azq; it printed:\n" + "\n".join(lines)
                         + process.stderr.read())


def test_azq_azurite_as_an_aspire_executable_resource(tmp_path):
    if os.environ.get("AZQ_TARGET_URL"):
        pytest.skip("AZQ_TARGET_URL is set: this test starts the binary as Aspire would")
    ports = {name: free_port() for name in ("blob", "queue", "table")}
    # The AppHost's environment (DCP passes it on), without the variables this suite's own
    # servers may be configured with, then the endpoints' variables.
    environment = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("AZQ_", "AZURITE_"))
    }
    environment |= {f"AZQ_{name.upper()}_PORT": str(port) for name, port in ports.items()}
    # AddExecutable("storage", "azq", ".", "azurite", "--location", ".azq",
    # "--skipApiVersionCheck"): the working directory is the AppHost's (here a scratch one).
    process = subprocess.Popen(
        [str(server_binary()), "azurite", "--location", ".azq", "--skipApiVersionCheck"],
        cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = wait_for_line(process, "azq listening on ")
        for name, port in ports.items():
            listening = (f"Azurite {name.capitalize()} service is successfully listening at "
                         f"http://127.0.0.1:{port}")
            assert listening in lines, lines
        assert lines[-1].startswith(f"azq listening on http://127.0.0.1:{ports['queue']} ")
        # WithHttpHealthCheck("/_azq/health", endpointName: "queue").
        health = f"http://127.0.0.1:{ports['queue']}/_azq/health"
        with urllib.request.urlopen(health, timeout=10) as answer:
            assert answer.status == 200
        # EndpointProperty.Scheme, IPV4Host (127.0.0.1 for localhost) and Port, here the target
        # port (no DCP proxy in between).
        connection_string = aspire_connection_string("http", "127.0.0.1", ports["queue"])
        with QueueServiceClient.from_connection_string(
            connection_string, **CLIENT_KWARGS
        ) as service:
            queue = service.get_queue_client(unique_queue_name("aspire"))
            queue.create_queue()
            queue.send_message("from an Aspire executable resource")
            [message] = queue.receive_messages(max_messages=1)
            assert message.content == "from an Aspire executable resource"
            queue.delete_message(message)
            queue.delete_queue()
        # The data is where the arguments put it, in the resource's working directory.
        assert (tmp_path / ".azq" / "__azq__").is_dir()
        # DCP stops an executable with SIGTERM: azq drains and exits 0.
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()

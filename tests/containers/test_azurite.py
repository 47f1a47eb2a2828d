"""The image where Azurite's image stood: its commands and start-up lines, what the Testcontainers
modules of Java, .NET and Go wait for (checked directly: those languages are not run here), the
official Python SDK over the three ports as .NET Aspire's health checks use them, and arguments
that do not move the listeners off every address."""

import socket

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.data.tables import TableServiceClient
from azure.storage.blob import (
    AccountSasPermissions,
    BlobServiceClient,
    ResourceTypes,
    generate_account_sas,
)
from azure.storage.queue import QueueServiceClient

from conftest import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, podman, unique

# Azurite's own lines (src/azurite.ts), byte for byte, for the image's default command.
AZURITE_LINES = [
    f"Azurite {service} service is {state} at http://0.0.0.0:{port}"
    for service, port in (("Blob", 10000), ("Queue", 10001), ("Table", 10002))
    for state in ("starting", "successfully listening")
]
# azurite-queue's (src/queue/main.ts).
AZURITE_QUEUE_LINES = [
    "Azurite Queue service is starting on 0.0.0.0:10001",
    "Azurite Queue service successfully listens on http://0.0.0.0:10001",
]
# What the .NET module (and, as regular expressions, the Node and Go modules) wait for.
DOTNET_WAITS = [f"{service} service is successfully listening" for service in ("Blob", "Queue", "Table")]
# The Rust module's wait (testcontainers-modules, azurite).
RUST_WAIT = "Azurite Table service is successfully listening at http://0.0.0.0:10002"
EVERY_ADDRESS = ["--blobHost", "0.0.0.0", "--queueHost", "0.0.0.0", "--tableHost", "0.0.0.0"]


def queue_round_trip(connection_string: str) -> None:
    service = QueueServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
    queue = service.get_queue_client(unique("round-trip"))
    queue.create_queue()
    queue.send_message("hello from a container")
    [message] = queue.receive_messages(max_messages=1)
    assert message.content == "hello from a container"
    queue.delete_message(message)
    queue.delete_queue()


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_default_command_is_azurites(run):
    container = run()
    logs = container.wait_for_log(RUST_WAIT)
    lines = logs.splitlines()
    for line in AZURITE_LINES:
        assert line in lines, logs
    # azq's own ready line stays.
    assert any(line.startswith("azq listening on http://0.0.0.0:10001 (") for line in lines)
    assert container.healthcheck()
    queue_round_trip(container.connection_string())


def test_aspire_health_checks_with_the_real_clients(run):
    # What AddAzureStorage().RunAsEmulator() runs and then asks before the resource is healthy.
    container = run(command=["azurite", "-l", "/data", *EVERY_ADDRESS,
                             "--disableProductStyleUrl", "--skipApiVersionCheck"])
    container.wait_for_log(RUST_WAIT)
    connection_string = container.connection_string()
    blobs = BlobServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
    # AspNetCore.HealthChecks.Azure.Storage.Blobs: one page of at most one container.
    page = next(blobs.list_containers(results_per_page=1).by_page())
    assert list(page) == []
    assert blobs.get_service_properties()["cors"] == []
    queues = QueueServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
    assert next(queues.list_queues(results_per_page=1).by_page()) is not None
    queues.get_service_properties()
    tables = TableServiceClient.from_connection_string(connection_string)
    assert list(tables.list_tables()) == []
    assert list(tables.query_tables("TableName eq 'orders'")) == []
    # What Aspire does once healthy: create the queues declared with AddQueue.
    queue_round_trip(connection_string)


def test_probe_ports_serve_nothing_else_and_check_credentials(run):
    container = run(command=["azurite"])
    container.wait_for_log(RUST_WAIT)
    connection_string = container.connection_string()
    blobs = BlobServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
    with pytest.raises(HttpResponseError) as refused:
        blobs.create_container("pictures")
    assert refused.value.status_code == 501
    assert refused.value.error_code == "NotImplemented"
    assert "serves queues" in str(refused.value)
    tables = TableServiceClient.from_connection_string(connection_string)
    with pytest.raises(HttpResponseError) as refused:
        tables.create_table("orders")
    assert refused.value.status_code == 501
    assert "serves queues" in str(refused.value)
    wrong_key = connection_string.replace(DEV_KEY, "A" * 86 + "==")
    with pytest.raises(ClientAuthenticationError):
        next(BlobServiceClient.from_connection_string(wrong_key, **CLIENT_KWARGS)
             .list_containers().by_page())
    with pytest.raises(ClientAuthenticationError):
        list(TableServiceClient.from_connection_string(wrong_key).list_tables())
    # An account SAS for the blob service lists containers; one for queues only does not.
    from datetime import datetime, timedelta, timezone

    expiry = datetime.now(timezone.utc) + timedelta(hours=1)
    for services, allowed in (("b", True), ("q", False)):
        sas = generate_account_sas(
            DEV_ACCOUNT, DEV_KEY, ResourceTypes(service=True), AccountSasPermissions(list=True),
            expiry, services=services,
        )
        client = BlobServiceClient(container.url(10000), credential=sas, **CLIENT_KWARGS)
        if allowed:
            assert list(next(client.list_containers().by_page())) == []
        else:
            with pytest.raises(HttpResponseError) as refused:
                next(client.list_containers().by_page())
            assert refused.value.status_code == 403


def test_java_module_command_and_port_waits(run):
    # AzuriteContainer (Java) runs the command `azurite --blobHost 0.0.0.0 …` and waits until
    # the three mapped ports accept a connection (HostPortWaitStrategy's external check; its
    # internal check execs /bin/sh, which this image has not, and its result is not used).
    container = run(command=["azurite", *EVERY_ADDRESS])
    container.wait_for_log(RUST_WAIT)
    for port in (10000, 10001, 10002):
        assert port_accepts(container.host_port(port)), port
    queue_round_trip(container.connection_string())


def test_dotnet_and_go_modules_entrypoint_and_waits(run):
    # .NET and Go replace the entrypoint with `azurite` and pass the hosts as the command; .NET
    # waits for the three log messages, Go for each port and each message. Go's internal port
    # check execs /bin/sh and passes on exit codes 126 and 127 (no shell in the image).
    container = run("--entrypoint", "azurite", command=EVERY_ADDRESS)
    logs = container.wait_for_log(RUST_WAIT)
    for wait in DOTNET_WAITS:
        assert wait in logs
    for port in (10000, 10001, 10002):
        assert port_accepts(container.host_port(port)), port
    shell = podman("exec", container.name, "/bin/sh", "-c", "true", check=False)
    assert shell.returncode in (126, 127), shell
    queue_round_trip(container.connection_string())


def test_azurite_queue_and_its_lines(run):
    container = run(command=["azurite-queue", "--queueHost", "0.0.0.0"], ports=(10001,))
    logs = container.wait_for_log(AZURITE_QUEUE_LINES[-1])
    for line in AZURITE_QUEUE_LINES:
        assert line in logs.splitlines()
    assert "Blob service" not in logs
    queue_round_trip(
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"QueueEndpoint={container.url()};"
    )


@pytest.mark.parametrize(
    "command",
    [["--inMemoryPersistence"], ["azurite-queue"], ["azurite", "--inMemoryPersistence"]],
)
def test_extra_arguments_keep_every_address(run, command):
    # The image's environment defaults (AZQ_*_HOST) hold whatever the command is.
    container = run(command=command, ports=(10001,))
    container.wait_for_log("azq listening on http://0.0.0.0:10001 ")
    assert container.healthcheck()
    queue_round_trip(
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"QueueEndpoint={container.url()};"
    )


def test_healthcheck_follows_the_queue_port(run):
    container = run(command=["azurite-queue", "--queuePort", "10010"], ports=(10010,))
    container.wait_for_log("azq listening on http://0.0.0.0:10010 ")
    assert container.healthcheck()
    podman("exec", container.name, "/usr/local/bin/azq", "healthcheck")
    # Asked explicitly for a port nothing listens on, it says no.
    wrong = podman("exec", container.name, "/usr/local/bin/azq", "healthcheck",
                   "--queuePort", "10001", check=False)
    assert wrong.returncode == 1, wrong


def test_published_port_range_as_azurites(run):
    # `docker run -p 10000-10002:10000-10002 IMAGE` on three free consecutive host ports instead
    # of the fixed ones (other runs on this machine may hold 10001).
    first = free_port_range(3)
    container = run("-p", f"127.0.0.1:{first}-{first + 2}:10000-10002", ports=())
    container.wait_for_log(RUST_WAIT)
    queue_round_trip(
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{first}/{DEV_ACCOUNT};"
        f"QueueEndpoint=http://127.0.0.1:{first + 1}/{DEV_ACCOUNT};"
    )
    blobs = BlobServiceClient(f"http://127.0.0.1:{first}/{DEV_ACCOUNT}",
                              credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
                              **CLIENT_KWARGS)
    assert list(next(blobs.list_containers(results_per_page=1).by_page())) == []


def free_port_range(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free right now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                held = socket.socket()
                sockets.append(held)
                held.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for held in sockets:
                held.close()
    raise AssertionError("no free port range")

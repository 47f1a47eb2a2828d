"""testcontainers-python's Azurite module, unchanged but for the image name, through podman's
Docker-compatible socket (DOCKER_HOST); scripts/container-test.sh turns Ryuk off and forces the
host to 127.0.0.1. The module waits for the blob port and sets AZURITE_ACCOUNTS; its connection
string carries a queue round trip and a blob probe."""

from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from conftest import CLIENT_KWARGS, IMAGE, unique


def test_testcontainers_python_azurite_module():
    from testcontainers.community.azurite import AzuriteContainer

    with AzuriteContainer(IMAGE) as azurite:
        connection_string = azurite.get_connection_string()
        assert "BlobEndpoint=http://127.0.0.1:" in connection_string, connection_string
        queues = QueueServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
        queue = queues.get_queue_client(unique("testcontainers"))
        queue.create_queue()
        queue.send_message("through testcontainers-python")
        [message] = queue.receive_messages(max_messages=1)
        assert message.content == "through testcontainers-python"
        blobs = BlobServiceClient.from_connection_string(connection_string, **CLIENT_KWARGS)
        assert list(next(blobs.list_containers(results_per_page=1).by_page())) == []

"""Queue-level operations through the official Python SDK: create, delete, metadata, listing, names, auth.

Each test works on queues of its own (the `queue` fixture or names from unique_queue_name), so the
tests are independent of each other and of their order.
"""

import base64
import os

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.queue import QueueServiceClient

from support import (
    CLIENT_KWARGS,
    collect_pages,
    connection_string,
    error_code,
    status_code,
    unique_queue_name,
)

LISTED_QUEUE_COUNT = 25
LIST_PAGE_SIZE = 7
# ceil(25 / 7) = 4 pages are expected; a few more leave room for a wrong answer to show up in the assert.
LIST_PAGES_MAX = 10


def recording_statuses(statuses):
    """A raw_response_hook that appends each HTTP status the SDK receives to `statuses`."""
    return lambda response: statuses.append(response.http_response.status_code)


@pytest.fixture
def queue_name(service_client, request):
    """A unique queue name that the test may create; whatever exists under it is deleted afterwards."""
    name = unique_queue_name(request.node.name)
    yield name
    try:
        service_client.delete_queue(name)
    except ResourceNotFoundError:
        pass


def test_create_queue_answers_201(service_client, queue_name):
    statuses = []
    client = service_client.get_queue_client(queue_name)
    client.create_queue(raw_response_hook=recording_statuses(statuses))
    assert statuses == [201]
    assert client.get_queue_properties().name == queue_name


# The server answers 204 when the queue already exists with identical metadata, but the SDK's
# create_queue turns any 204 into ResourceExistsError (azure/storage/queue/_deserialize.py), so these
# tests look at the HTTP status behind the exception to tell success from a 409 conflict.


def test_create_existing_queue_with_same_metadata_answers_204(service_client, queue_name):
    client = service_client.get_queue_client(queue_name)
    client.create_queue(metadata={"Owner": "alice", "tier": "1"})
    with pytest.raises(ResourceExistsError) as raised:
        client.create_queue(metadata={"Owner": "alice", "tier": "1"})
    assert status_code(raised.value) == 204
    assert "x-ms-error-code" not in raised.value.response.headers
    assert client.get_queue_properties().metadata == {"Owner": "alice", "tier": "1"}


def test_create_existing_queue_without_metadata_answers_204(service_client, queue_name):
    client = service_client.get_queue_client(queue_name)
    client.create_queue()
    with pytest.raises(ResourceExistsError) as raised:
        client.create_queue()
    assert status_code(raised.value) == 204


def test_create_existing_queue_with_different_metadata_conflicts(service_client, queue_name):
    client = service_client.get_queue_client(queue_name)
    client.create_queue(metadata={"owner": "alice"})
    with pytest.raises(ResourceExistsError) as raised:
        client.create_queue(metadata={"owner": "bob"})
    assert status_code(raised.value) == 409
    assert raised.value.response.headers.get("x-ms-error-code") == "QueueAlreadyExists"
    # The failed create must not have touched the stored metadata.
    assert client.get_queue_properties().metadata == {"owner": "alice"}


def test_delete_queue_removes_it(service_client, queue_name):
    client = service_client.get_queue_client(queue_name)
    client.create_queue()
    client.send_message("goes away with its queue")
    statuses = []
    client.delete_queue(raw_response_hook=recording_statuses(statuses))
    assert statuses == [204]
    with pytest.raises(ResourceNotFoundError) as raised:
        client.get_queue_properties()
    assert error_code(raised.value) == "QueueNotFound"
    assert queue_name not in [q.name for q in service_client.list_queues(name_starts_with=queue_name)]


def test_delete_missing_queue_is_queue_not_found(service_client, queue_name):
    with pytest.raises(ResourceNotFoundError) as raised:
        service_client.delete_queue(queue_name)
    assert status_code(raised.value) == 404
    assert error_code(raised.value) == "QueueNotFound"


def test_get_properties_of_missing_queue_is_queue_not_found(service_client, queue_name):
    with pytest.raises(ResourceNotFoundError) as raised:
        service_client.get_queue_client(queue_name).get_queue_properties()
    assert status_code(raised.value) == 404
    assert error_code(raised.value) == "QueueNotFound"


def test_create_with_metadata_keeps_name_case(service_client, queue_name):
    client = service_client.get_queue_client(queue_name)
    client.create_queue(metadata={"CamelCase": "Value One", "lower": "x", "UPPER_1": "y"})
    assert client.get_queue_properties().metadata == {"CamelCase": "Value One", "lower": "x", "UPPER_1": "y"}


def test_set_metadata_replaces_all_metadata(queue):
    queue.set_queue_metadata({"First": "1", "second": "2"})
    assert queue.get_queue_properties().metadata == {"First": "1", "second": "2"}

    queue.set_queue_metadata({"Third": "3"})
    assert queue.get_queue_properties().metadata == {"Third": "3"}

    queue.set_queue_metadata({})
    assert queue.get_queue_properties().metadata == {}


def test_set_metadata_on_missing_queue_is_queue_not_found(service_client, queue_name):
    with pytest.raises(ResourceNotFoundError) as raised:
        service_client.get_queue_client(queue_name).set_queue_metadata({"a": "b"})
    assert error_code(raised.value) == "QueueNotFound"


def test_properties_carry_approximate_message_count(queue):
    assert queue.get_queue_properties().approximate_message_count == 0
    for index in range(3):
        queue.send_message(f"message {index}")
    assert queue.get_queue_properties().approximate_message_count == 3


@pytest.mark.azurite_deviation(
    "Azurite's marker is the internal insertion id while pages are sorted by name: queues created out of "
    "name order make it return the first page again and again"
)
def test_list_queues_in_pages_is_sorted_and_complete(service_client, request):
    prefix = unique_queue_name(request.node.name[:20]) + "-"
    names = [f"{prefix}{index:02d}" for index in range(LISTED_QUEUE_COUNT)]
    # Created out of order, so a listing that merely replays creation order is caught.
    created = []
    try:
        for name in reversed(names):
            service_client.create_queue(name, metadata={"index": name[-2:]})
            created.append(name)

        pager = service_client.list_queues(name_starts_with=prefix, results_per_page=LIST_PAGE_SIZE)
        pages = [[q.name for q in page] for page in collect_pages(pager.by_page(), LIST_PAGES_MAX)]
        listed = [name for page in pages for name in page]
        assert listed == sorted(names)
        assert [len(page) for page in pages] == [7, 7, 7, 4]
        # include_metadata=True on a paged listing carries each queue's metadata on every page.
        pager = service_client.list_queues(
            name_starts_with=prefix, results_per_page=LIST_PAGE_SIZE, include_metadata=True
        )
        with_metadata = [q for page in collect_pages(pager.by_page(), LIST_PAGES_MAX) for q in page]
        expected = [(name, {"index": name[-2:]}) for name in sorted(names)]
        assert [(q.name, q.metadata) for q in with_metadata] == expected
    finally:
        for name in created:
            service_client.delete_queue(name)


def test_list_queues_with_metadata(service_client, request):
    prefix = unique_queue_name(request.node.name[:20]) + "-"
    created = []
    try:
        for index in range(3):
            name = f"{prefix}{index}"
            service_client.create_queue(name, metadata={"Index": str(index), "Kind": "listed"})
            created.append(name)

        with_metadata = list(service_client.list_queues(name_starts_with=prefix, include_metadata=True))
        assert [q.name for q in with_metadata] == created
        assert [q.metadata for q in with_metadata] == [
            {"Index": str(index), "Kind": "listed"} for index in range(3)
        ]

        without_metadata = list(service_client.list_queues(name_starts_with=prefix))
        assert [q.name for q in without_metadata] == created
        assert all(not q.metadata for q in without_metadata)
    finally:
        for name in created:
            service_client.delete_queue(name)


def test_list_queues_with_unmatched_prefix_is_empty(service_client):
    assert list(service_client.list_queues(name_starts_with=unique_queue_name("nothing-here"))) == []


@pytest.mark.parametrize(
    "name, expected_code",
    [
        ("ab", "OutOfRangeInput"),
        ("a" * 64, "OutOfRangeInput"),
        ("-abc", "InvalidResourceName"),
        ("abc-", "InvalidResourceName"),
        ("ab--cd", "InvalidResourceName"),
        ("Upper", "InvalidResourceName"),
        pytest.param(
            "a|b",
            "InvalidResourceName",
            marks=pytest.mark.azurite_deviation("Azurite accepts '|' in queue names"),
        ),
        ("a_b", "InvalidResourceName"),
    ],
)
def test_invalid_queue_name_is_rejected(service_client, name, expected_code):
    try:
        service_client.create_queue(name)
    except HttpResponseError as error:
        assert (status_code(error), error_code(error)) == (400, expected_code)
    else:
        service_client.delete_queue(name)
        pytest.fail(f"queue {name!r} was created")


def test_boundary_queue_names_are_accepted(service_client):
    for name in ("abc", "a-b", unique_queue_name("x")[:12] + "9" * 51):
        assert len(name) <= 63
        client = service_client.get_queue_client(name)
        client.create_queue()
        try:
            assert client.get_queue_properties().name == name
        finally:
            client.delete_queue()


def test_wrong_account_key_is_authentication_failed(server, queue_name):
    wrong_key = base64.b64encode(os.urandom(64)).decode("ascii")
    with QueueServiceClient.from_connection_string(
        connection_string(server.endpoint, key=wrong_key), **CLIENT_KWARGS
    ) as client:
        with pytest.raises(ClientAuthenticationError) as raised:
            client.create_queue(queue_name)
        assert status_code(raised.value) == 403
        assert error_code(raised.value) == "AuthenticationFailed"

        with pytest.raises(ClientAuthenticationError) as raised:
            list(client.list_queues())
        assert status_code(raised.value) == 403
        assert error_code(raised.value) == "AuthenticationFailed"


def test_use_development_storage_reaches_the_default_port(spawn_server):
    """The literal connection string `UseDevelopmentStorage=true` (what Azurite users configure)
    works unchanged against azq on its default port 10001, on two shards: create with metadata,
    list with metadata, set and get metadata, delete."""
    spawn_server(["--queuePort", "10001"])
    with QueueServiceClient.from_connection_string(
        "UseDevelopmentStorage=true", **CLIENT_KWARGS
    ) as client:
        names = [unique_queue_name(f"devstorage-{index}") for index in range(6)]
        for name in names:
            client.create_queue(name, metadata={"Origin": "devstorage"})
        prefix = os.path.commonprefix(names)
        listed = {
            queue.name: queue.metadata
            for queue in client.list_queues(name_starts_with=prefix, include_metadata=True)
        }
        assert set(names) <= set(listed)
        assert all(listed[name] == {"Origin": "devstorage"} for name in names)
        queue = client.get_queue_client(names[0])
        queue.set_queue_metadata({"Changed": "yes"})
        assert queue.get_queue_properties().metadata == {"Changed": "yes"}
        for name in names:
            client.delete_queue(name)
        assert not [
            queue.name for queue in client.list_queues(name_starts_with=prefix)
            if queue.name in names
        ]

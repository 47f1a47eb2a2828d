"""The message engine through the official Python SDK: visibility, leases, pop receipts, TTL, limits,
content fidelity and concurrent consumers.

Every test gets its own queue from the `queue` fixture. Waits for time-driven transitions (a lease or
a TTL running out) poll with a deadline instead of sleeping a fixed time, and timeouts are kept at
1-3 s so the module stays fast. No assertion is about how fast the server is.
"""

import datetime
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy, QueueClient

from support import CLIENT_KWARGS, error_code, status_code, unique_queue_name, wait_until

MESSAGE_BYTES_MAX = 65536
GET_MESSAGES_MAX = 32
# Long enough that no lease handed out during a test runs out before the test is done with it.
LONG_LEASE_S = 60

CONCURRENT_MESSAGE_COUNT = 200
CONCURRENT_CONSUMER_COUNT = 8
CONCURRENT_BATCH_SIZE = 4


def peek_all(queue):
    return queue.peek_messages(max_messages=GET_MESSAGES_MAX)


def receive_page(queue, count, visibility_timeout):
    """One Get Messages call (numofmessages=count), as a list. The SDK's plain iterator would keep
    calling until the queue looked empty; by_page() exposes the single request."""
    pager = queue.receive_messages(messages_per_page=count, visibility_timeout=visibility_timeout)
    return list(next(pager.by_page(), []))


def assert_storage_error(raised, status, code):
    assert (status_code(raised.value), error_code(raised.value)) == (status, code)


# --- visibility and leases -------------------------------------------------------------------------


def test_put_with_visibility_timeout_hides_message_until_it_runs_out(queue):
    sent = queue.send_message("later", visibility_timeout=2)
    assert sent.next_visible_on - sent.inserted_on == datetime.timedelta(seconds=2)
    assert peek_all(queue) == []
    assert queue.receive_message() is None

    peeked = wait_until(lambda: peek_all(queue), "the message to become visible")
    assert [(m.id, m.content, m.dequeue_count) for m in peeked] == [(sent.id, "later", 0)]


def test_expired_lease_redelivers_with_dequeue_count_2(queue):
    sent = queue.send_message("redeliver me")
    first = queue.receive_message(visibility_timeout=2)
    assert (first.id, first.content, first.dequeue_count) == (sent.id, "redeliver me", 1)
    assert queue.receive_message() is None

    second = wait_until(
        lambda: queue.receive_message(visibility_timeout=LONG_LEASE_S), "the lease to run out"
    )
    assert (second.id, second.content, second.dequeue_count) == (sent.id, "redeliver me", 2)
    assert second.pop_receipt != first.pop_receipt

    # The first consumer's receipt died with its lease.
    with pytest.raises(HttpResponseError) as raised:
        queue.delete_message(first.id, first.pop_receipt)
    assert_storage_error(raised, 400, "PopReceiptMismatch")
    with pytest.raises(HttpResponseError) as raised:
        queue.update_message(first.id, first.pop_receipt, visibility_timeout=0)
    assert_storage_error(raised, 400, "PopReceiptMismatch")

    queue.delete_message(second.id, second.pop_receipt)
    assert peek_all(queue) == []


def test_update_issues_new_pop_receipt_and_invalidates_the_old_one(queue):
    queue.send_message("leased")
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    updated = queue.update_message(received.id, received.pop_receipt, visibility_timeout=LONG_LEASE_S)
    assert updated.pop_receipt and updated.pop_receipt != received.pop_receipt

    with pytest.raises(HttpResponseError) as raised:
        queue.delete_message(received.id, received.pop_receipt)
    assert_storage_error(raised, 400, "PopReceiptMismatch")
    with pytest.raises(HttpResponseError) as raised:
        queue.update_message(received.id, received.pop_receipt, visibility_timeout=0)
    assert_storage_error(raised, 400, "PopReceiptMismatch")

    queue.delete_message(received.id, updated.pop_receipt)
    assert peek_all(queue) == []


def test_update_content_replaces_text(queue):
    queue.send_message("old text")
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    queue.update_message(received.id, received.pop_receipt, content="new text", visibility_timeout=0)

    peeked = peek_all(queue)
    assert [(m.id, m.content, m.dequeue_count) for m in peeked] == [(received.id, "new text", 1)]
    again = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert (again.id, again.content, again.dequeue_count) == (received.id, "new text", 2)


def test_update_with_visibility_timeout_0_makes_message_visible_now(queue):
    queue.send_message("keep my text")
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert queue.receive_message() is None

    # By id, not by QueueMessage: given a QueueMessage the SDK would resend its content as a body.
    updated = queue.update_message(received.id, received.pop_receipt, visibility_timeout=0)
    assert updated.next_visible_on is not None

    again = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert (again.id, again.content, again.dequeue_count) == (received.id, "keep my text", 2)


def test_update_can_shorten_a_lease(queue):
    queue.send_message("shortened")
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    queue.update_message(received.id, received.pop_receipt, visibility_timeout=2)
    assert peek_all(queue) == []

    again = wait_until(
        lambda: queue.receive_message(visibility_timeout=LONG_LEASE_S), "the shortened lease to run out"
    )
    assert (again.id, again.dequeue_count) == (received.id, 2)


def test_peek_does_not_change_dequeue_count(queue):
    sent = queue.send_message("peeked")
    for _ in range(3):
        assert [(m.id, m.dequeue_count) for m in peek_all(queue)] == [(sent.id, 0)]

    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert received.dequeue_count == 1
    # A leased message is invisible to Peek as well.
    assert peek_all(queue) == []

    queue.update_message(received.id, received.pop_receipt, visibility_timeout=0)
    for _ in range(3):
        assert [(m.id, m.dequeue_count) for m in peek_all(queue)] == [(sent.id, 1)]


def test_visible_messages_come_out_in_insertion_order(queue):
    sent = [queue.send_message(f"message {index}").id for index in range(5)]
    assert [m.id for m in peek_all(queue)] == sent
    assert [m.id for m in receive_page(queue, 5, LONG_LEASE_S)] == sent


# --- deletion and clearing -------------------------------------------------------------------------


def test_delete_message_twice_is_message_not_found(queue):
    queue.send_message("once")
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    queue.delete_message(received.id, received.pop_receipt)

    with pytest.raises(ResourceNotFoundError) as raised:
        queue.delete_message(received.id, received.pop_receipt)
    assert_storage_error(raised, 404, "MessageNotFound")
    with pytest.raises(ResourceNotFoundError) as raised:
        queue.update_message(received.id, received.pop_receipt, visibility_timeout=0)
    assert_storage_error(raised, 404, "MessageNotFound")


def test_clear_messages_removes_visible_and_leased_messages(queue):
    for index in range(5):
        queue.send_message(f"message {index}")
    leased = queue.receive_message(visibility_timeout=LONG_LEASE_S)

    queue.clear_messages()

    assert peek_all(queue) == []
    assert queue.receive_message() is None
    assert queue.get_queue_properties().approximate_message_count == 0
    with pytest.raises(ResourceNotFoundError) as raised:
        queue.delete_message(leased.id, leased.pop_receipt)
    assert_storage_error(raised, 404, "MessageNotFound")


def test_message_operations_on_missing_queue_are_queue_not_found(service_client):
    missing = service_client.get_queue_client(unique_queue_name("missing"))
    for operation in (
        lambda: missing.send_message("nowhere"),
        lambda: missing.peek_messages(),
        lambda: missing.receive_message(),
        lambda: missing.clear_messages(),
    ):
        with pytest.raises(ResourceNotFoundError) as raised:
            operation()
        assert_storage_error(raised, 404, "QueueNotFound")


# --- time to live ----------------------------------------------------------------------------------


def test_message_expires_after_its_time_to_live(queue):
    sent = queue.send_message("short-lived", time_to_live=1)
    assert sent.expires_on - sent.inserted_on == datetime.timedelta(seconds=1)

    wait_until(lambda: peek_all(queue) == [], "the message to expire")
    assert queue.receive_message() is None


def test_time_to_live_minus_1_never_expires(queue):
    sent = queue.send_message("forever", time_to_live=-1)
    never = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)
    assert sent.expires_on == never
    assert [m.expires_on for m in peek_all(queue)] == [never]
    assert queue.receive_message(visibility_timeout=LONG_LEASE_S).expires_on == never


@pytest.mark.parametrize(
    "visibility_timeout, time_to_live, code",
    [
        (0, 0, "OutOfRangeQueryParameterValue"),
        (0, -2, "OutOfRangeQueryParameterValue"),
        # The service's recorded answer: "messagettl must be greater than visibilitytimeout" is
        # an invalid value, not an out-of-range one.
        (5, 5, "InvalidQueryParameterValue"),
        (10, 5, "InvalidQueryParameterValue"),
        (604801, None, "OutOfRangeQueryParameterValue"),
    ],
    ids=["ttl-0", "ttl-minus-2", "visibility-equal-to-ttl", "visibility-beyond-ttl", "visibility-over-7-days"],
)
def test_put_with_out_of_range_timeouts_is_rejected(queue, visibility_timeout, time_to_live, code):
    with pytest.raises(HttpResponseError) as raised:
        queue.send_message("bad timing", visibility_timeout=visibility_timeout, time_to_live=time_to_live)
    assert status_code(raised.value) == 400
    assert error_code(raised.value) == code
    assert peek_all(queue) == []


# --- sizes and counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a" * MESSAGE_BYTES_MAX,
        pytest.param(
            "é" * (MESSAGE_BYTES_MAX // 2),
            marks=pytest.mark.azurite_deviation("Azurite rejects multi-byte text just under the limit"),
        ),
        # Escaped on the wire to four times the size; the limit applies to the decoded text.
        "<" * MESSAGE_BYTES_MAX,
    ],
    ids=["ascii", "two-byte-utf8", "xml-escaped"],
)
def test_message_of_65536_bytes_is_accepted(queue, text):
    assert len(text.encode("utf-8")) == MESSAGE_BYTES_MAX
    queue.send_message(text)
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert received.content == text


@pytest.mark.parametrize(
    "text",
    ["a" * (MESSAGE_BYTES_MAX + 1), "é" * (MESSAGE_BYTES_MAX // 2) + "a"],
    ids=["ascii", "two-byte-utf8"],
)
def test_message_of_65537_bytes_is_request_body_too_large(queue, text):
    assert len(text.encode("utf-8")) == MESSAGE_BYTES_MAX + 1
    with pytest.raises(HttpResponseError) as raised:
        queue.send_message(text)
    assert_storage_error(raised, 413, "RequestBodyTooLarge")
    assert peek_all(queue) == []


def test_get_and_peek_return_at_most_32_messages(queue):
    sent = [queue.send_message(f"message {index:02d}").id for index in range(GET_MESSAGES_MAX + 8)]

    peeked = queue.peek_messages(max_messages=GET_MESSAGES_MAX)
    assert [m.id for m in peeked] == sent[:GET_MESSAGES_MAX]

    first = receive_page(queue, GET_MESSAGES_MAX, LONG_LEASE_S)
    assert [m.id for m in first] == sent[:GET_MESSAGES_MAX]
    second = receive_page(queue, GET_MESSAGES_MAX, LONG_LEASE_S)
    assert [m.id for m in second] == sent[GET_MESSAGES_MAX:]
    assert receive_page(queue, GET_MESSAGES_MAX, LONG_LEASE_S) == []


@pytest.mark.parametrize(
    "count",
    [
        pytest.param(0, marks=pytest.mark.azurite_deviation("Azurite answers 400 without an error code")),
        GET_MESSAGES_MAX + 1,
    ],
)
def test_get_messages_with_count_out_of_range_is_rejected(queue, count):
    queue.send_message("still here")
    # The SDK checks max_messages on peek but passes messages_per_page through to numofmessages.
    with pytest.raises(HttpResponseError) as raised:
        receive_page(queue, count, LONG_LEASE_S)
    assert_storage_error(raised, 400, "OutOfRangeQueryParameterValue")
    assert [m.dequeue_count for m in peek_all(queue)] == [0]


def test_get_messages_with_visibility_timeout_0_is_rejected(queue):
    queue.send_message("still here")
    with pytest.raises(HttpResponseError) as raised:
        queue.receive_message(visibility_timeout=0)
    assert_storage_error(raised, 400, "OutOfRangeQueryParameterValue")
    assert [m.dequeue_count for m in peek_all(queue)] == [0]


# --- content fidelity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "<>&'\"",
        "<MessageText>not a tag</MessageText>]]>",
        "café 日本語 🎉",
        "  leading and trailing spaces  ",
        "   ",
        "line one\nline two\ttabbed",
        # The SDK sends <MessageText /> for it: an empty text, not a missing element.
        "",
    ],
    ids=["xml-specials", "xml-lookalike", "non-ascii", "spaces", "only-spaces", "newline-tab", "empty"],
)
def test_text_round_trips_exactly(queue, text):
    sent = queue.send_message(text)
    assert sent.content == text

    peeked = peek_all(queue)
    assert [(m.id, m.content) for m in peeked] == [(sent.id, text)]
    received = queue.receive_message(visibility_timeout=LONG_LEASE_S)
    assert (received.id, received.content) == (sent.id, text)


@pytest.mark.parametrize(
    "text",
    ["control \x01 char", "nul \x00", "non-character \uffff", "\ufffe"],
    ids=["control", "nul", "uffff", "ufffe"],
)
def test_text_no_xml_document_may_hold_is_refused(queue, text):
    # Stored, such a text would make every Get and Peek of the queue unreadable to the SDK's parser.
    with pytest.raises(HttpResponseError) as raised:
        queue.send_message(text)
    assert_storage_error(raised, 400, "InvalidXmlDocument")
    assert peek_all(queue) == []


@pytest.mark.parametrize(
    "payload",
    # 48 KiB of payload is exactly 65536 characters of base64: the largest message that fits.
    [bytes(range(256)), b"\x00", b"\xff\xfe\x00\x01", os.urandom(48 * 1024)],
    ids=["all-byte-values", "nul", "invalid-utf8", "random-48KiB"],
)
def test_binary_round_trips_through_base64_policies(connection_str, queue, payload):
    with QueueClient.from_connection_string(
        connection_str,
        queue.queue_name,
        message_encode_policy=BinaryBase64EncodePolicy(),
        message_decode_policy=BinaryBase64DecodePolicy(),
        **CLIENT_KWARGS,
    ) as binary_queue:
        sent = binary_queue.send_message(payload)
        assert [m.content for m in binary_queue.peek_messages()] == [payload]
        received = binary_queue.receive_message(visibility_timeout=LONG_LEASE_S)
        assert (received.id, received.content) == (sent.id, payload)


# --- concurrency -----------------------------------------------------------------------------------


def test_concurrent_consumers_receive_every_message_exactly_once(connection_str, queue):
    sent_texts = [f"message {index:03d}" for index in range(CONCURRENT_MESSAGE_COUNT)]
    for text in sent_texts:
        queue.send_message(text)

    # Released when every consumer holds a client, so they really compete; the timeout turns a
    # consumer that never arrives into an error instead of a hang.
    start = threading.Barrier(CONCURRENT_CONSUMER_COUNT, timeout=30)

    def consume(_consumer_index):
        """Drain the queue, deleting what it receives; returns (id, text) of each message received.

        All messages were put before the consumers start and every lease outlives the test, so an
        empty answer means the queue is drained.
        """
        received = []
        with QueueClient.from_connection_string(connection_str, queue.queue_name, **CLIENT_KWARGS) as client:
            start.wait()
            for _ in range(CONCURRENT_MESSAGE_COUNT + 1):
                batch = receive_page(client, CONCURRENT_BATCH_SIZE, LONG_LEASE_S)
                if not batch:
                    return received
                for message in batch:
                    assert message.dequeue_count == 1, message
                    received.append((message.id, message.content))
                    client.delete_message(message.id, message.pop_receipt)
        raise AssertionError("consumer kept receiving messages past the number that were sent")

    with ThreadPoolExecutor(max_workers=CONCURRENT_CONSUMER_COUNT) as pool:
        per_consumer = list(pool.map(consume, range(CONCURRENT_CONSUMER_COUNT)))

    received = [item for items in per_consumer for item in items]
    received_ids = [message_id for message_id, _ in received]
    assert len(set(received_ids)) == len(received_ids), "a message was delivered twice"
    assert sorted(text for _, text in received) == sent_texts
    assert peek_all(queue) == []
    assert queue.receive_message() is None

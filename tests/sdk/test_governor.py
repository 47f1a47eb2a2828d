"""Behaving like Azure under load, seen through the Python SDK and Prometheus' own parser.

- A queue over `--queue-rate-limit` answers 503 ServerBusy ("The server is busy."); the SDK's
  retry policy retries it (every attempt is seen by a response hook) until a token is free, and
  nothing is stored twice, since a throttled put changes nothing.
- A fault rule that applies a put and then answers 500 OperationTimedOut makes the SDK retry a
  put that already happened: the queue holds the message twice, as on Azure.
- `/_azq/metrics` parses with `prometheus_client`'s text parser, and its counters move with the
  SDK's traffic.

Each test starts its own server (`spawn_server`) with the options it needs.
"""

import urllib.error
import urllib.request

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import LinearRetry, QueueClient
from prometheus_client.parser import text_string_to_metric_families

from support import CLIENT_KWARGS, connection_string, error_code, status_code, unique_queue_name

# A retry policy with a short fixed back-off (the default waits 15 s and more) and no jitter.
RETRY_ATTEMPTS_MAX = 10
RETRY_BACKOFF_S = 0.3


def retrying_client(server, name):
    """A QueueClient that retries 5xx answers RETRY_ATTEMPTS_MAX times, RETRY_BACKOFF_S apart."""
    kwargs = {**CLIENT_KWARGS}
    del kwargs["retry_total"]
    return QueueClient.from_connection_string(
        connection_string(server.endpoint),
        name,
        # retry_status caps the retries of 5xx answers apart from retry_total (default 3).
        retry_policy=LinearRetry(
            backoff=RETRY_BACKOFF_S,
            random_jitter_range=0,
            retry_total=RETRY_ATTEMPTS_MAX,
            retry_status=RETRY_ATTEMPTS_MAX,
        ),
        **kwargs,
    )


def plain_client(server, name):
    """A QueueClient that never retries."""
    return QueueClient.from_connection_string(connection_string(server.endpoint), name, **CLIENT_KWARGS)


def recording(statuses):
    """A response hook that appends every attempt's HTTP status to `statuses`."""
    return lambda response: statuses.append(response.http_response.status_code)


def admin(server, method, path, body=None):
    """(status, body text) of a request to one of azq's own endpoints."""
    request = urllib.request.Request(
        f"http://{server.host}:{server.port}{path}",
        data=body.encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(server):
    """Every sample of /_azq/metrics as {(name, sorted label items): value}, via the real parser."""
    status, text = admin(server, "GET", "/_azq/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_a_throttled_queue_answers_server_busy_and_the_sdk_retries(spawn_server):
    server = spawn_server(["--queue-rate-limit", "1"])
    name = unique_queue_name("throttled")
    plain = plain_client(server, name)
    plain.create_queue()
    # The bucket holds one second of the rate: one put now, then one a second.
    plain.send_message("first")
    with pytest.raises(HttpResponseError) as refused:
        plain.send_message("refused")
    assert status_code(refused.value) == 503
    assert error_code(refused.value) == "ServerBusy"
    assert "The server is busy." in str(refused.value)

    statuses = []
    retrying_client(server, name).send_message("retried", raw_response_hook=recording(statuses))
    assert statuses[-1] == 201
    assert 503 in statuses and set(statuses[:-1]) == {503}, statuses
    # Refused attempts changed nothing: exactly the two accepted puts are stored. (Peek is a
    # message operation too, so it may have to wait for a token as well.)
    peek_statuses = []
    peeked = retrying_client(server, name).peek_messages(
        max_messages=32, raw_response_hook=recording(peek_statuses)
    )
    assert sorted(message.content for message in peeked) == ["first", "retried"]
    samples = scrape(server)
    refusals = 1 + statuses.count(503) + peek_statuses.count(503)
    assert samples[("azq_throttled_total", (("scope", "queue"),))] == refusals


def test_an_applied_put_answered_timed_out_is_retried_into_a_duplicate(spawn_server):
    server = spawn_server(["--faults-api"])
    name = unique_queue_name("ambiguous")
    plain_client(server, name).create_queue()
    rule = (
        f'{{"queue": "{name}", "operation": "PutMessage", "count": 1,'
        ' "action": {"error": "OperationTimedOut", "apply": true}}'
    )
    assert admin(server, "POST", "/_azq/faults", rule)[0] == 201

    statuses = []
    retrying_client(server, name).send_message("once", raw_response_hook=recording(statuses))
    assert statuses == [500, 201]
    # The first attempt was applied before the client heard 500: the retry made a duplicate.
    texts = [message.content for message in plain_client(server, name).peek_messages(max_messages=32)]
    assert texts == ["once", "once"]
    assert '"fired":1' in admin(server, "GET", "/_azq/faults")[1]


def test_metrics_parse_and_move_with_traffic(spawn_server):
    server = spawn_server(["--metrics", "queues"])
    name = unique_queue_name("metered")
    client = plain_client(server, name)
    before = scrape(server)
    client.create_queue()
    for index in range(7):
        client.send_message(f"m{index}")
    client.receive_message()
    after = scrape(server)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    success = {"response_type": "Success"}
    assert moved("azq_requests_total", operation="PutMessage", status="201", **success) == 7
    assert moved("azq_requests_total", operation="CreateQueue", status="201", **success) == 1
    assert moved("azq_requests_total", operation="GetMessages", status="200", **success) == 1
    assert moved("azq_success_e2e_latency_seconds_count", operation="PutMessage") == 7
    assert moved("azq_message_events_total", event="puts") == 7
    assert moved("azq_message_events_total", event="delivered") == 1
    assert moved("azq_request_duration_seconds_count", operation="PutMessage") == 7
    assert moved("azq_request_duration_seconds_bucket", operation="PutMessage", le="+Inf") == 7
    assert after[("azq_request_duration_seconds_sum", (("operation", "PutMessage"),))] > 0
    shards = {dict(labels)["shard"] for (metric, labels) in after if metric == "azq_queues"}
    assert len(shards) == server.shards
    assert sum(after[("azq_messages", (("shard", shard),))] for shard in shards) == 7
    depth = ("azq_queue_depth", (("account", "devstoreaccount1"), ("queue", name)))
    assert after[depth] == 7

#!/usr/bin/env python3
"""Chaos client, burst and verifier for scripts/soak.sh (standard library only, loopback only).

  soak.py chaos PORT SECONDS     misbehave against azq until SECONDS have passed: open and abandon
                                 connections, send garbage, truncated and oversized requests, and
                                 half-sent heads; every answer the server gives must be an Azure
                                 error (4xx with x-ms-error-code), never a hang past the timeout.
  soak.py burst PORT PREFIX N PAIRS BURST_JSON [FIRST]
                                 put 2 x PAIRS messages into PREFIX-0..N-1 one at a time from one
                                 connection (so each put is a flush of its own, and a flush starts
                                 on a fresh 4 KiB block), with texts sized so that the Put record
                                 (text + PUT_RECORD_OVERHEAD_BYTES) of every other one ends 1, 2 or
                                 3 bytes before a block boundary (then 0 and 4), one or two blocks
                                 long, and the next one, in the same queue, ends at the next offset
                                 of a walk through the block, from its step FIRST (default 0: a
                                 later burst goes on where an earlier one stopped). BURST_JSON
                                 records each acknowledged put (id, queue, text length, SHA-256).
                                 azq-loadgen cannot do this: its --message-bytes is one size.
  soak.py verify PORT PREFIX N LOADGEN_JSON [--burst BURST_JSON]... [--drain] [--label TEXT]
                                 check that no message was lost or duplicated: the queues
                                 PREFIX-0..N-1 hold exactly puts (+ the bursts') - deletes
                                 messages, every message received was deleted exactly once, and
                                 no request failed. With --drain (last, it leases everything),
                                 also receive every message: as many as counted, no id twice, no
                                 load message's put mark (azq-loadgen's per-put token) twice, all
                                 never received before, and every burst message there with its
                                 exact text.

scripts/soak.sh runs verify after the load and a burst, again after a SIGTERM and a restart on
the same data, and once more (with --drain) after a second burst, a kill -9 and a second
restart: each restart must give back exactly what was acknowledged before it (issue 39:
acknowledged messages were once lost at an ordinary restart when a log flush ended 1-3 bytes
before a block boundary). The load's consumers keep its queues nearly empty, so its count
alone says little about a restart; the bursts' puts, written after the load into the same logs,
are what a restart that drops part of a log loses first.
"""

import argparse
import base64
import email.utils
import hashlib
import hmac
import http.client
import json
import random
import socket
import sys
import time
import xml.etree.ElementTree as ElementTree

ACCOUNT = "devstoreaccount1"
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
# Every socket operation of the chaos client is bounded; a server that stops answering fails it.
SOCKET_TIMEOUT_S = 15.0
API_VERSION = "2026-04-06"

# What a Put record adds to its text (src/queue/record.rs, `encode` and `encode_body` of
# MessagePut): header 16, type 1, queue, slot and generation 12, sequence 8, insertion time 8,
# time to live, delay, dequeue count and lease 16, visible time 8, foreign-id flag 1 (a put has
# no foreign id), text length 4. Measured too: a 1,000-byte put ends 1,074 bytes into its block.
PUT_RECORD_OVERHEAD_BYTES = 74
# Every flush starts on a fresh block of this size and pads its last one with zeros.
BLOCK_BYTES = 4096
# The burst's near-end puts in turn: (blocks, bytes of padding after the record).
NEAR_BLOCK_END = [(blocks, padding) for paddings in ((1, 2, 3), (0, 4)) for blocks in (1, 2) for padding in paddings]
# The walk's step through a block's offsets: odd, so coprime with BLOCK_BYTES.
OFFSET_STRIDE = 2531
# Room for a burst message's label at the start of its text.
LABEL_BYTES_MAX = 24
# Get Messages' most per request, and the lease of a drain (longer than the drain).
GET_MESSAGES_MAX = 32
DRAIN_VISIBILITY_S = 3600


def parse_head(head):
    """The status and headers (names in lower case) of a response head, without the blank line
    that ends it."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers


def read_head(sock):
    """The status and headers of one response (bodies here are small and ignored)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, {}
        data += chunk
    return parse_head(data.split(b"\r\n\r\n", 1)[0])


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
    sock.settimeout(SOCKET_TIMEOUT_S)
    return sock


def chaos(port, seconds):
    rng = random.Random(20261122)
    deadline = time.monotonic() + seconds
    counts = {}
    valid_put = (
        b"POST /devstoreaccount1/chaos-queue/messages HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 80\r\n\r\n<QueueMessage><MessageText>x</MessageText></QueueMessage>"
    )
    garbage_answers = 0
    while time.monotonic() < deadline:
        action = rng.choice(["abandon", "garbage", "truncated", "oversized_head", "huge_body", "half_head"])
        counts[action] = counts.get(action, 0) + 1
        sock = connect(port)
        try:
            if action == "abandon":
                pass
            elif action == "garbage":
                garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) + b"\r\n\r\n"
                sock.sendall(garbage)
                try:
                    status, headers = read_head(sock)
                except TimeoutError:
                    sys.exit(f"chaos: no answer within {SOCKET_TIMEOUT_S} s to garbage {garbage!r}")
                # Random bytes may happen to form a request line; any answer must be an Azure error.
                if status is not None:
                    assert 400 <= status < 500 and "x-ms-error-code" in headers, (status, headers)
                    garbage_answers += 1
            elif action == "truncated":
                sock.sendall(valid_put[: rng.randrange(1, len(valid_put))])
            elif action == "oversized_head":
                sock.sendall(b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
                status, headers = read_head(sock)
                assert status == 431 and headers.get("x-ms-error-code"), (status, headers)
            elif action == "huge_body":
                sock.sendall(b"POST /devstoreaccount1/chaos-queue/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
                status, headers = read_head(sock)
                assert status == 413 and headers.get("x-ms-error-code") == "RequestBodyTooLarge", (status, headers)
            elif action == "half_head":
                sock.sendall(b"GET /devstoreaccount1?comp=li")
        except (ConnectionResetError, BrokenPipeError):
            # The server may close a connection that sent garbage before reading all of it.
            counts["reset"] = counts.get("reset", 0) + 1
        finally:
            sock.close()
    print(f"chaos: {sum(counts.values())} actions {counts}, {garbage_answers} garbage answers")


def authorization(method, path, query, body_bytes, date):
    """The SharedKey Authorization header of a request to /ACCOUNT/`path` with `query` (name,
    value pairs), a body of `body_bytes` (XML when not 0), `x-ms-date: date` and this
    API_VERSION."""
    content_length, content_type = (str(body_bytes), "application/xml") if body_bytes else ("", "")
    string_to_sign = "\n".join(
        [method, "", "", content_length, "", content_type, "", "", "", "", "", ""]
        + [f"x-ms-date:{date}", f"x-ms-version:{API_VERSION}", f"/{ACCOUNT}/{ACCOUNT}/{path}"]
        + [f"{name}:{value}" for name, value in sorted(query)]
    )
    signature = base64.b64encode(hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()).decode()
    return f"SharedKey {ACCOUNT}:{signature}"


class Client:
    """Signed (SharedKey) requests to azq on loopback over one keep-alive connection."""

    def __init__(self, port):
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT_S)

    def request(self, method, path, query=(), body=b""):
        """Status, headers (lower-case names) and body of one request to /ACCOUNT/`path`."""
        date = email.utils.formatdate(usegmt=True)
        headers = {"x-ms-date": date, "x-ms-version": API_VERSION}
        if body:
            headers["Content-Type"] = "application/xml"
        headers["Authorization"] = authorization(method, path, query, len(body), date)
        resource = f"/{ACCOUNT}/{path}"
        target = resource + ("?" + "&".join(f"{name}={value}" for name, value in query) if query else "")
        self.connection.request(method, target, body=body or None, headers=headers)
        response = self.connection.getresponse()
        data = response.read()
        return response.status, {name.lower(): value for name, value in response.getheaders()}, data

    def put(self, queue, text):
        """Put Message; the id azq acknowledged."""
        body = f"<QueueMessage><MessageText>{text}</MessageText></QueueMessage>".encode()
        status, _, data = self.request("POST", f"{queue}/messages", body=body)
        if status != 201:
            sys.exit(f"soak FAILED: a burst put to {queue} answered {status}: {data[:300]!r}")
        return ElementTree.fromstring(data).findtext("QueueMessage/MessageId")

    def count(self, queue):
        """The queue's approximate message count."""
        status, headers, data = self.request("GET", queue, query=[("comp", "metadata")])
        if status != 200:
            sys.exit(f"soak FAILED: Get Queue Metadata of {queue} answered {status}: {data[:300]!r}")
        return int(headers["x-ms-approximate-messages-count"])

    def get(self, queue):
        """Get Messages: up to GET_MESSAGES_MAX, leased for DRAIN_VISIBILITY_S."""
        query = [("numofmessages", str(GET_MESSAGES_MAX)), ("visibilitytimeout", str(DRAIN_VISIBILITY_S))]
        status, _, data = self.request("GET", f"{queue}/messages", query=query)
        if status != 200:
            sys.exit(f"soak FAILED: Get Messages of {queue} answered {status}: {data[:300]!r}")
        return [
            {
                "id": message.findtext("MessageId"),
                "text": message.findtext("MessageText") or "",
                "dequeue_count": int(message.findtext("DequeueCount")),
            }
            for message in ElementTree.fromstring(data).findall("QueueMessage")
        ]


def burst_text(length, label):
    """`length` ASCII letters and digits starting with `label` (same bytes on the wire, in the
    XML and in the record)."""
    head = f"{label}x"
    pattern = "0123456789abcdefghijklmnopqrstuvwxyz"
    return (head + pattern * (length // len(pattern) + 1))[:length]


def text_length_ending_at(offset):
    """The text length whose Put record ends `offset` bytes into a block (0: on a boundary)."""
    length = (offset - PUT_RECORD_OVERHEAD_BYTES) % BLOCK_BYTES
    while length < LABEL_BYTES_MAX:
        length += BLOCK_BYTES
    return length


def burst(port, prefix, queues, pairs, burst_json, first=0):
    client = Client(port)
    # Texts unique across bursts: labelled with the report's name.
    name = burst_json.rsplit("/", 1)[-1].split(".")[0]
    messages = []
    started = time.monotonic()
    for pair in range(first, first + pairs):
        queue = f"{prefix}-{pair % queues}"
        blocks, padding = NEAR_BLOCK_END[pair % len(NEAR_BLOCK_END)]
        # The near-end put, then the next flush in the same shard's log.
        lengths = [
            blocks * BLOCK_BYTES - PUT_RECORD_OVERHEAD_BYTES - padding,
            text_length_ending_at((pair + 1) * OFFSET_STRIDE % BLOCK_BYTES),
        ]
        for length in lengths:
            text = burst_text(length, f"{name}n{len(messages)}")
            message_id = client.put(queue, text)
            messages.append(
                {"id": message_id, "queue": queue, "bytes": length, "sha256": hashlib.sha256(text.encode()).hexdigest()}
            )
    with open(burst_json, "w") as burst_file:
        json.dump({"puts": len(messages), "messages": messages}, burst_file)
    print(
        f"burst: {len(messages)} acknowledged puts of {min(m['bytes'] for m in messages)}.."
        f"{max(m['bytes'] for m in messages)} bytes in {time.monotonic() - started:.1f} s, every other "
        "one ending 0-4 bytes before a block boundary"
    )


def put_mark(text):
    """azq-loadgen's put mark (run nonce and put token, after a 16-digit timestamp), or None."""
    if len(text) < 16 + 24 or not text[:16].isdigit():
        return None
    return text[16 : 16 + 24]


def drain_problems(client, prefix, queues, burst_messages, expected):
    """Receives every message; what differs from what was acknowledged."""
    problems = []
    drained = []
    for index in range(queues):
        queue = f"{prefix}-{index}"
        while True:
            got = client.get(queue)
            if not got:
                break
            drained.extend(dict(message, queue=queue) for message in got)
    ids = [message["id"] for message in drained]
    if len(drained) != expected:
        problems.append(f"{len(drained)} messages received by the drain, {expected} acknowledged and not deleted")
    if len(set(ids)) != len(ids):
        problems.append(f"{len(ids) - len(set(ids))} message ids received twice by the drain")
    marks = [mark for mark in (put_mark(message["text"]) for message in drained) if mark is not None]
    if len(set(marks)) != len(marks):
        problems.append(f"{len(marks) - len(set(marks))} load puts stored twice (same put mark)")
    received_before = [message["id"] for message in drained if message["dequeue_count"] != 1]
    if received_before:
        problems.append(f"{len(received_before)} messages had been received before the drain: {received_before[:5]}")
    by_id = {message["id"]: message for message in drained}
    lost = changed = 0
    for message in burst_messages:
        found = by_id.get(message["id"])
        if found is None or found["queue"] != message["queue"]:
            lost += 1
        elif hashlib.sha256(found["text"].encode()).hexdigest() != message["sha256"]:
            changed += 1
    if lost:
        problems.append(f"{lost} of {len(burst_messages)} acknowledged burst puts lost")
    if changed:
        problems.append(f"{changed} burst messages came back with another text")
    print(f"drain: {len(drained)} messages received ({len(marks)} of the load, {len(burst_messages) - lost} of the burst)")
    return problems


def verify(port, prefix, queues, loadgen_json, burst_jsons=(), drain=False, label="after the load"):
    with open(loadgen_json) as report_file:
        report = json.load(report_file)
    burst_messages = []
    for burst_json in burst_jsons:
        with open(burst_json) as burst_file:
            burst_messages += json.load(burst_file)["messages"]
    operations = report["ops"]
    puts = operations["put"]["count"]
    deletes = operations["delete"]["count"]
    received = operations["get"].get("messages", 0)
    errors = report["errors"] + report["connection_errors"] + report["protocol_errors"]
    client = Client(port)
    remaining = sum(client.count(f"{prefix}-{index}") for index in range(queues))
    expected = puts + len(burst_messages) - deletes
    print(
        f"verify ({label}): {puts} put, {received} received, {deletes} deleted, "
        + (f"{len(burst_messages)} put by bursts, " if burst_jsons else "")
        + f"{remaining} still queued, {errors} failed requests"
    )
    problems = []
    if errors:
        problems.append(f"{errors} requests failed")
    if received != deletes:
        problems.append(f"{received} messages received but {deletes} deleted (duplicate or lost deliveries)")
    if remaining != expected:
        burst_part = f" + {len(burst_messages)} by bursts" if burst_jsons else ""
        problems.append(f"{remaining} queued but {puts} put{burst_part} - {deletes} deleted = {expected}")
    if puts == 0 or deletes == 0:
        problems.append("the load did not run")
    if drain:
        problems += drain_problems(client, prefix, queues, burst_messages, expected)
    if problems:
        sys.exit(f"soak FAILED ({label}): " + "; ".join(problems))
    print(f"soak verified ({label}): no message lost, none duplicated")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "chaos":
        chaos(int(sys.argv[2]), float(sys.argv[3]))
        return
    if len(sys.argv) in (7, 8) and sys.argv[1] == "burst":
        first = int(sys.argv[7]) if len(sys.argv) == 8 else 0
        burst(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], first)
        return
    if len(sys.argv) >= 6 and sys.argv[1] == "verify":
        parser = argparse.ArgumentParser(prog="soak.py verify", usage=__doc__)
        for name in ("port", "prefix", "queues", "loadgen_json"):
            parser.add_argument(name)
        parser.add_argument("--burst", action="append", default=[])
        parser.add_argument("--drain", action="store_true")
        parser.add_argument("--label", default="after the load")
        arguments = parser.parse_args(sys.argv[2:])
        verify(
            int(arguments.port),
            arguments.prefix,
            int(arguments.queues),
            arguments.loadgen_json,
            arguments.burst,
            arguments.drain,
            arguments.label,
        )
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()

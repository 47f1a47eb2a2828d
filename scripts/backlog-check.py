#!/usr/bin/env python3
"""The backlog check's client for scripts/backlog-check.sh (standard library only, loopback only).

  backlog-check.py fill PORT PREFIX QUEUES MESSAGES BYTES LEDGER
      Creates queues PREFIX-0 .. PREFIX-(QUEUES-1) and puts MESSAGES texts of BYTES into them,
      message n into queue n % QUEUES, its text a function of n alone (`text`: n, then hex
      digits drawn from n), pipelined on one connection a queue. Every put must answer 201;
      each acknowledged one is written to LEDGER (queue, message ID, n), one line each.
  backlog-check.py verify PORT PREFIX QUEUES BYTES LEDGER
      Receives every message of those queues (Get Messages, 32 at a time, leased for an hour,
      until each answers none; a 503 is asked again) and checks them against LEDGER exactly:
      every acknowledged put received once, in its own queue, with its own text byte for byte,
      for the first time; nothing else received. Exits non-zero with what differs.
  backlog-check.py clear PORT PREFIX QUEUES
      Clears those queues (Clear Messages).

The texts and the ledger are this script's own, not azq-loadgen's: a text that changed, moved
to another message or queue, or came back twice is told apart from every other.
"""

import email.utils
import hashlib
import re
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree

from soak import ACCOUNT, API_VERSION, Client, SOCKET_TIMEOUT_S, authorization, parse_head

# Puts in flight on each queue's connection.
PIPELINE = 64
GET_MESSAGES_MAX = 32
LEASE_S = 3600
# How often a Get answered 503 (a server still reading texts back) is asked again, and the pause.
BUSY_RETRIES_MAX = 100
BUSY_PAUSE_S = 0.1
MESSAGE_ID = re.compile(rb"<MessageId>([^<]+)</MessageId>")


def text(number, length):
    """Message `number`'s text: its decimal digits and a dot, then hex digits drawn from it,
    `length` characters in all."""
    head = f"{number:010d}."
    seed = hashlib.blake2b(number.to_bytes(8, "little"), digest_size=32).hexdigest()
    tail = (seed * (length // len(seed) + 1))[: max(length - len(head), 0)]
    return (head + tail)[:length]


def queue_name(prefix, index):
    return f"{prefix}-{index}"


class Responses:
    """HTTP/1.1 responses read one after another from a socket (Content-Length bodies)."""

    def __init__(self, connection):
        self.connection = connection
        self.buffer = b""

    def next(self):
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self.receive()
        status, headers = parse_head(self.buffer[:end])
        length = int(headers.get("content-length", 0))
        while len(self.buffer) < end + 4 + length:
            self.receive()
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        return status, body

    def receive(self):
        chunk = self.connection.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk


def fill_queue(port, prefix, index, queues, messages, length, ledger, failures):
    """Puts this queue's share of the messages, PIPELINE at a time; appends (index, id, n) to
    `ledger` for each 201, and a description to `failures` for anything else."""
    name = queue_name(prefix, index)
    numbers = range(index, messages, queues)
    body_bytes = len(put_body(0, length))
    date = email.utils.formatdate(usegmt=True)
    head = (
        f"POST /{ACCOUNT}/{name}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"x-ms-date: {date}\r\nx-ms-version: {API_VERSION}\r\n"
        f"Content-Type: application/xml\r\nContent-Length: {body_bytes}\r\n"
        f"Authorization: {authorization('POST', f'{name}/messages', (), body_bytes, date)}\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as connection:
            responses = Responses(connection)
            sent = answered = 0
            while answered < len(numbers):
                batch = []
                while sent < len(numbers) and sent - answered < PIPELINE:
                    batch.append(head + put_body(numbers[sent], length))
                    sent += 1
                if batch:
                    connection.sendall(b"".join(batch))
                status, body = responses.next()
                number = numbers[answered]
                answered += 1
                found = MESSAGE_ID.search(body)
                if status != 201 or found is None:
                    failures.append(f"put {number} into {name} answered {status}: {body[:200]!r}")
                    return
                ledger.append((index, found.group(1).decode(), number))
    except (OSError, ValueError, IndexError) as error:
        failures.append(f"puts into {name}: {error!r}")


def put_body(number, length):
    return f"<QueueMessage><MessageText>{text(number, length)}</MessageText></QueueMessage>".encode()


def fill(port, prefix, queues, messages, length, ledger_path):
    client = Client(port)
    for index in range(queues):
        status, _, data = client.request("PUT", queue_name(prefix, index))
        if status not in (201, 204):
            sys.exit(f"backlog check FAILED: Create Queue answered {status}: {data[:300]!r}")
    ledgers = [[] for _ in range(queues)]
    failures = []
    began = time.monotonic()
    threads = [
        threading.Thread(
            target=fill_queue,
            args=(port, prefix, index, queues, messages, length, ledgers[index], failures),
        )
        for index in range(queues)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    with open(ledger_path, "w") as ledger_file:
        for ledger in ledgers:
            ledger_file.writelines(f"{index} {message_id} {number}\n" for index, message_id, number in ledger)
    acknowledged = sum(len(ledger) for ledger in ledgers)
    print(f"backlog fill: {acknowledged} puts acknowledged in {seconds:.1f} s")
    if failures or acknowledged != messages:
        sys.exit(f"backlog check FAILED: the fill: {failures[:3]} ({acknowledged} of {messages} acknowledged)")


def receive_all(port, prefix, index, into, failures):
    """Gets every message of one queue until it answers none; a 503 is asked again."""
    client = Client(port)
    query = [("numofmessages", str(GET_MESSAGES_MAX)), ("visibilitytimeout", str(LEASE_S))]
    busy = 0
    try:
        while True:
            status, _, data = client.request("GET", f"{queue_name(prefix, index)}/messages", query=query)
            if status == 503 and busy < BUSY_RETRIES_MAX:
                busy += 1
                time.sleep(BUSY_PAUSE_S)
                continue
            if status != 200:
                failures.append(f"Get Messages of {queue_name(prefix, index)} answered {status}: {data[:300]!r}")
                return
            got = ElementTree.fromstring(data).findall("QueueMessage")
            if not got:
                return
            into.extend(
                (
                    index,
                    message.findtext("MessageId"),
                    message.findtext("MessageText") or "",
                    message.findtext("DequeueCount"),
                )
                for message in got
            )
    except (OSError, ValueError, ElementTree.ParseError) as error:
        failures.append(f"Get Messages of {queue_name(prefix, index)}: {error!r}")


def verify(port, prefix, queues, length, ledger_path):
    expected = {}
    with open(ledger_path) as ledger_file:
        for line in ledger_file:
            index, message_id, number = line.split()
            expected[message_id] = (int(index), int(number))
    received = [[] for _ in range(queues)]
    failures = []
    threads = [
        threading.Thread(target=receive_all, args=(port, prefix, index, received[index], failures))
        for index in range(queues)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    problems = list(failures)
    seen = set()
    unknown, twice, wrong_queue, wrong_text, received_before = [], 0, 0, [], 0
    for per_queue in received:
        for index, message_id, message_text, dequeue_count in per_queue:
            if message_id in seen:
                twice += 1
                continue
            seen.add(message_id)
            if message_id not in expected:
                unknown.append(message_id)
                continue
            put_index, number = expected[message_id]
            if put_index != index:
                wrong_queue += 1
            if message_text != text(number, length):
                wrong_text.append((message_id, message_text[:40]))
            if dequeue_count != "1":
                received_before += 1
    missing = len(expected) - len(seen & expected.keys())
    total = sum(len(per_queue) for per_queue in received)
    for count, what in [
        (missing, "acknowledged puts not received"),
        (twice, "messages received twice"),
        (len(unknown), "messages received that no acknowledged put made"),
        (wrong_queue, "messages received from another queue than their put's"),
        (len(wrong_text), "messages received with another text than their put's"),
        (received_before, "messages received before (dequeue count not 1)"),
    ]:
        if count:
            problems.append(f"{count} {what}")
    if wrong_text:
        problems.append(f"e.g. {wrong_text[0]}")
    if not expected:
        problems.append("the ledger is empty")
    print(f"backlog check: {total} messages received over {queues} queues, {len(expected)} puts acknowledged")
    if problems:
        sys.exit("backlog check FAILED: " + "; ".join(problems))


def clear(port, prefix, queues):
    client = Client(port)
    for index in range(queues):
        status, _, data = client.request("DELETE", f"{queue_name(prefix, index)}/messages")
        if status != 204:
            sys.exit(f"backlog check FAILED: Clear Messages answered {status}: {data[:300]!r}")


def main():
    arguments = sys.argv[1:]
    if len(arguments) == 7 and arguments[0] == "fill":
        fill(int(arguments[1]), arguments[2], int(arguments[3]), int(arguments[4]), int(arguments[5]), arguments[6])
    elif len(arguments) == 6 and arguments[0] == "verify":
        verify(int(arguments[1]), arguments[2], int(arguments[3]), int(arguments[4]), arguments[5])
    elif len(arguments) == 4 and arguments[0] == "clear":
        clear(int(arguments[1]), arguments[2], int(arguments[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

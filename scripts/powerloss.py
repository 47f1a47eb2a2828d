#!/usr/bin/env python3
"""Power-loss cycles for scripts/powerloss.sh (standard library only, loopback only).

  powerloss.py --azq BIN --faultfs BIN --backend io_uring|portable --cycles N [options]

Each cycle: mount faultfs (tests/faultfs) over the data, start azq on it, check what it
recovered against every acknowledged change, then run mixed load from several clients and, in
the middle of it, kill -9 azq and cut the power (faultfs drops, keeps or tears what was not
synced), in either order: the power first (while azq runs, so a sync in flight is lost) or the
kill first. azq must start every time, with no flag but the run's own (--text-memory, the
same at every start).

The checker. Each client thread owns its queues, so every queue's history is a sequence: each
request either got an answer (acknowledged, or refused with a 4xx) or not (unknown: azq was
killed first, or answered 5xx). A thread stops at its first unknown request, so each queue has
at most one unknown change, the last, and the checker allows either outcome for it (per
message, whole: a put is there or not, a clear took every message or none). Everything
acknowledged must be there after the restart: every put exactly once with its last
acknowledged text unless deleted, no acknowledged delete back, queues, metadata and ACLs as
last set. Messages are found by draining each queue (Get, long lease) once the workload's
leases ran out; they are then made visible again (Update, visibility 0) so they live on into
later cycles, through log segments, snapshots and their clean-up.

Message sizes. Every flush of the log starts on a fresh 4 KiB block and pads its last one
with zeros, so where flushes end depends on the sizes of the records in them. A reader once
lost every acknowledged record after a flush that ended 1 to 3 bytes before a block boundary
(padding shorter than a record's length field), at an ordinary restart (fixed in 631e836).
This test hardly ever got there: its texts were a few fixed sizes up to ~3 KB, and a flush
rarely passed a block. Now the texts of puts and updates (`c<client>n<n>.v<version>:` then
x's, up to 64 KiB) are drawn for the records they make (text_length): 3 in 10 end 1 to 15
bytes before a block boundary (1 to 3 in most of those; a record's size beyond its text is
fixed), which alone in a flush leaves that much padding and followed by another record splits
its header across the boundary; the others are short or spread over every offset within a
block.

The log walk. After each power cut, before azq starts on what it left, LogWalk reads every log
segment in faultfs's directory with its own rules, written from the format (not azq's reader),
and counts what the restart will have to read across: the padding crossed to reach a later
record, by length (1, 2 and 3 bytes each, and a summary of the rest), and record headers split
across a block boundary. A run that left no padding of 1, 2 or 3 bytes, or no split header,
fails: it could not have caught that bug.

--durability write is the control: it must show loss (acknowledged puts missing, deleted
messages back); the run then counts the losses instead of failing and exits 0 only if it saw
some (--expect-loss). It must leave the same boundaries behind: its background sync makes
what was written a moment before the cut durable, and its restart reads it.
"""

import argparse
import base64
import email.utils
import functools
import glob
import hashlib
import hmac
import http.client
import json
import mmap
import operator
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import xml.etree.ElementTree as ElementTree

ACCOUNT = "devstoreaccount1"
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
VERSION = "2026-04-06"
# Every request is bounded; a server that stops answering makes the request unknown (during
# the load) or fails the run (during the check). Generous: on a shared machine under load, a
# synced request through FUSE has been seen to take over 15 s.
REQUEST_TIMEOUT_S = 60.0
# The workload's leases (Get and Update visibility timeouts) last at most this long, so the
# checker can wait until every message is visible again before draining.
LEASE_S_MAX = 2
# The checker's own lease while it drains a queue (released right after with an Update).
DRAIN_LEASE_S = 300
# Live messages per queue above which the workload favours deleting over putting.
MESSAGES_PER_QUEUE_TARGET = 120
QUEUE_PREFIX = "pl"

# The log's format (src/storage/format.rs, src/queue/record.rs), for the walk of the segments
# a power cut left (LogWalk) and for drawing message sizes that put flushes' ends where the
# reader has to step across padding.
BLOCK_BYTES = 4096
SEGMENT_MAGIC = b"AZQWAL\0\x01"
# A record: length (of the body), CRC-32C (of sequence and body), sequence, then the body.
RECORD_HEADER_BYTES = 16
RECORD_BODY_BYTES_MAX = 1 << 20
# A Put, packed (record.rs, `put_packed_state`): its numbers as LEB128 varints.
RECORD_MESSAGE_PUT = 14
PACKED_FOREIGN_ID = 1
PACKED_VISIBLE_AT = 4
# The longest message text azq accepts (src/limits.rs).
MESSAGE_TEXT_BYTES_MAX = 64 * 1024
# Bytes a record takes beyond its message text (record.rs, `encode_body`). A Put here: the
# header; the type byte; the flags; its queue, slot, generation and sequence (varints whose
# widths the server's numbers decide: `Totals.put_numbers_bytes`, learnt from the log walks);
# the insertion time (6 bytes of varint from 2004 to 2109); the TTL (-1: 2^32 - 1, 5 bytes);
# delay, dequeue count and lease (0: a byte each); no visibility time (visible when its delay
# ends, which a flag says) and no foreign ID; the text's length (1 to 3 bytes). An Update with
# a text: the header; the type byte; slot, generation, lease (4 each); visibility time (8);
# the text flag (1); its length (4). LogWalk reads every Put's fields and checks its size:
# were the model wrong, the sizes drawn would miss the block boundaries.
PUT_FIXED_BYTES = RECORD_HEADER_BYTES + 1 + 1 + 6 + 5 + 3
UPDATE_RECORD_BYTES = RECORD_HEADER_BYTES + 1 + 3 * 4 + 8 + 1 + 4


def varint_bytes(value):
    """Bytes of `value` as a LEB128 varint."""
    return max(1, -(-value.bit_length() // 7))


def read_varint(data, at, end):
    """(value, the offset after it) of the varint at `at`, or (None, end) if it runs past `end`."""
    value, shift = 0, 0
    while at < end and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at
    return None, end


class Unknown(Exception):
    """A request with no answer (or a 5xx): its outcome is unknown."""


class Anomaly(Exception):
    """The server answered what no acknowledged history allows."""


class Client:
    """One keep-alive HTTP/1.1 connection signing requests with SharedKey."""

    def __init__(self, port):
        self.port = port
        self.connection = None

    def request(self, method, path, query=None, body=b"", headers=None):
        query = dict(query or {})
        headers = dict(headers or {})
        headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
        headers["x-ms-version"] = VERSION
        if body:
            headers["Content-Type"] = "application/xml"
        canonical_headers = "".join(
            f"{name}:{headers[name]}\n" for name in sorted(h for h in headers if h.startswith("x-ms-"))
        )
        resource = f"/{ACCOUNT}/{ACCOUNT}{path}" + "".join(
            f"\n{name.lower()}:{query[name]}" for name in sorted(query, key=str.lower)
        )
        string_to_sign = (
            f"{method}\n\n\n{len(body) if body else ''}\n\n{headers.get('Content-Type', '')}\n"
            f"\n\n\n\n\n\n{canonical_headers}{resource}"
        )
        signature = base64.b64encode(
            hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()
        ).decode()
        headers["Authorization"] = f"SharedKey {ACCOUNT}:{signature}"
        url = f"/{ACCOUNT}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection(
                    "127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S
                )
            self.connection.request(method, url, body=body, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise Unknown(f"{method} {path}: {error!r}") from None
        if response.status >= 500:
            self.close()
            raise Unknown(f"{method} {path}: {response.status} {data[:200]!r}")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self):
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def text_reads(port):
    """azq's `azq_text_reads_total` over its shards (texts read back from disk so far); the run
    ends saying so where the metrics page does not answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.request("GET", "/_azq/metrics")
        response = connection.getresponse()
        page = response.read().decode()
    except (OSError, http.client.HTTPException) as error:
        raise SystemExit(f"azq's metrics page did not answer: {error!r}") from error
    finally:
        connection.close()
    if response.status != 200:
        raise SystemExit(f"azq's metrics page answered {response.status}")
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in page.splitlines()
        if line.startswith("azq_text_reads_total")
    )


def message_text(token, version, length):
    """The text of `token` at `version`, `length` bytes long (longer only when the token and
    version alone are)."""
    head = f"{token}.v{version}:"
    return head + "x" * (length - len(head))


def text_length(rng, overhead):
    """A message text's length for a record that takes `overhead(text length)` beyond its text.

    Written after a reader that lost the log after a flush ending 1 to 3 bytes before a block
    boundary: every flush starts on a fresh block, so a flush ends there only if its records
    add up to within 3 bytes of a multiple of 4 KiB, which the old sizes (a few fixed ones up to
    3 KB) made rare. Here 3 records in 10 end 1 to 15 bytes before a block boundary if they
    start one (1 to 3 most often): alone in their flush (common: a client waits for its sync
    before it sends more), they leave that much padding, and followed by another record in the
    same flush, they split its header across the boundary. The others are short, or spread
    over every offset within a block."""
    roll = rng.random()
    if roll < 0.3:
        short = rng.randint(1, 3) if rng.random() < 0.75 else rng.randint(4, 15)
        # Mostly one block (cheap to send and to check); sometimes up to the largest text.
        blocks = 1 if rng.random() < 0.95 else rng.randint(2, MESSAGE_TEXT_BYTES_MAX // BLOCK_BYTES)
        record = blocks * BLOCK_BYTES - short
        text = record - overhead(record)
        # The text's length may take a byte less than the record's would.
        return record - overhead(text)
    if roll < 0.5:
        return rng.randint(0, 300)
    return rng.randint(0, BLOCK_BYTES - 1)


def parse_text(text):
    match = re.fullmatch(r"(c\d+n\d+)\.v(\d+):x*", text or "")
    return (match.group(1), int(match.group(2))) if match else (None, None)


def message_list(data):
    """(id, text, pop receipt) of each message of a QueueMessagesList."""
    messages = []
    for element in ElementTree.fromstring(data).iter("QueueMessage"):
        messages.append(
            (
                element.findtext("MessageId"),
                element.findtext("MessageText"),
                element.findtext("PopReceipt"),
            )
        )
    return messages


def acl_body(identifiers):
    parts = ["<?xml version='1.0' encoding='utf-8'?><SignedIdentifiers>"]
    for identifier, permission in identifiers:
        parts.append(
            f"<SignedIdentifier><Id>{identifier}</Id><AccessPolicy>"
            "<Start>2026-01-01T00:00:00Z</Start><Expiry>2027-01-01T00:00:00Z</Expiry>"
            f"<Permission>{permission}</Permission></AccessPolicy></SignedIdentifier>"
        )
    parts.append("</SignedIdentifiers>")
    return "".join(parts).encode()


def parse_acl(data):
    return sorted(
        (element.findtext("Id"), element.findtext("AccessPolicy/Permission"))
        for element in ElementTree.fromstring(data).iter("SignedIdentifier")
    )


class Queue:
    """What the acknowledged history says about one queue."""

    def __init__(self, name):
        self.name = name
        self.exists = False
        self.metadata = {}
        self.acl = []
        # token -> [message id, version, pop receipt]
        self.messages = {}
        # Tokens whose delete (or clear, or queue delete) was acknowledged.
        self.deleted = set()
        # The unknown last change, if any: (kind, details).
        self.pending = None


class Totals:
    def __init__(self):
        self.lock = threading.Lock()
        self.acknowledged = {}
        self.unknown = 0
        self.lost = 0
        self.deleted_back = 0
        self.other_mismatches = 0
        self.restarts = 0
        self.cleanup_notes = 0
        # Texts azq read back from disk while the load ran (azq_text_reads_total before the
        # kill less at the load's start), over every cycle.
        self.load_text_reads = 0
        # Messages the loads' Gets returned, over every cycle.
        self.load_messages_got = 0
        self.faultfs = {}
        self.cuts = {}
        # Bytes of a Put's queue, slot, generation and sequence varints, as the last log walk
        # found them (the server picks those numbers): a byte each until then.
        self.put_numbers_bytes = 4

    def put_overhead(self, text_bytes):
        """Bytes a Put record of a text of `text_bytes` takes beyond it, about: exact but for
        the widths of the numbers the server picks, as the last walk found them."""
        return PUT_FIXED_BYTES + self.put_numbers_bytes + varint_bytes(text_bytes)

    def count(self, kind, number=1):
        with self.lock:
            self.acknowledged[kind] = self.acknowledged.get(kind, 0) + number


class Worker(threading.Thread):
    """A client: mixed load on the queues it owns until azq stops answering or it is told to."""

    def __init__(self, index, port, slots, totals, stop, seed, counter):
        super().__init__(daemon=True)
        self.index = index
        self.client = Client(port)
        self.slots = slots  # list of [Queue] (the slot's current queue is the last)
        self.totals = totals
        self.stop = stop
        self.random = random.Random(seed)
        self.counter = counter  # [next token number]
        self.anomaly = None
        self.lease_until = 0.0

    def run(self):
        try:
            while not self.stop.is_set():
                self.step()
        except Unknown:
            with self.totals.lock:
                self.totals.unknown += 1
        except Anomaly as anomaly:
            self.anomaly = str(anomaly)
        except Exception:  # a bug of the checker itself must fail the run, not end a thread
            self.anomaly = traceback.format_exc()
        finally:
            self.client.close()

    def new_token(self):
        self.counter[0] += 1
        return f"c{self.index}n{self.counter[0]}"

    def step(self):
        slot = self.random.choice(self.slots)
        queue = slot[-1]
        if not queue.exists:
            self.create_queue(slot)
            return
        live = len(queue.messages)
        roll = self.random.random()
        put_share = 0.55 if live < MESSAGES_PER_QUEUE_TARGET else 0.2
        # Clears and queue deletes are rare: a queue lives through a few cycles on average.
        if roll < put_share:
            self.put(queue)
        elif roll < 0.93:
            self.get_and_settle(queue)
        elif roll < 0.96:
            self.set_metadata(queue)
        elif roll < 0.996:
            self.set_acl(queue)
        elif roll < 0.998:
            self.clear(queue)
        else:
            self.recreate(slot)

    def attempt(self, queue, pending, expected, method, path, query=None, body=b"", headers=None):
        """One request that must answer `expected`. Without an answer it raises Unknown (which
        ends the thread) and leaves `pending` as the queue's unknown change."""
        queue.pending = pending
        status, response_headers, data = self.client.request(method, path, query, body, headers)
        queue.pending = None
        if status != expected:
            raise Anomaly(f"{method} {path} {query or ''}: {status} {data[:200]!r}")
        return response_headers, data

    def put(self, queue):
        token = self.new_token()
        text = message_text(token, 0, text_length(self.random, self.totals.put_overhead))
        body = f"<QueueMessage><MessageText>{text}</MessageText></QueueMessage>".encode()
        _, data = self.attempt(
            queue, ("put", token), 201, "POST", f"/{queue.name}/messages", {"messagettl": "-1"}, body
        )
        [(message_id, _, receipt)] = message_list(data)
        queue.messages[token] = [message_id, 0, receipt]
        self.totals.count("put")

    def get_and_settle(self, queue):
        lease = self.random.randint(1, LEASE_S_MAX)
        self.lease_until = time.monotonic() + lease + 1
        count = str(self.random.randint(1, 4))
        # A Get changes leases only, which the checker does not compare: no pending change.
        _, data = self.attempt(
            queue, None, 200, "GET", f"/{queue.name}/messages",
            {"numofmessages": count, "visibilitytimeout": str(lease)},
        )
        got = message_list(data)
        with self.totals.lock:
            self.totals.load_messages_got += len(got)
        for message_id, text, receipt in got:
            token, version = parse_text(text)
            known = queue.messages.get(token)
            if token in queue.deleted:
                raise Anomaly(f"{queue.name}: Get returned {token}, whose delete was acknowledged")
            if known is None or known[0] != message_id or known[1] != version:
                raise Anomaly(f"{queue.name}: Get returned {text[:40]!r} ({message_id}), "
                              f"acknowledged as {known}")
            known[2] = receipt
            # Fewer deletes than puts until the queue holds its target: messages that live
            # through many cycles (and snapshots) are the ones a bug would lose.
            roll = self.random.random()
            if roll < 0.5:
                self.delete(queue, token)
            elif roll < 0.8:
                self.update(queue, token)

    def delete(self, queue, token):
        message_id, _, receipt = queue.messages[token]
        self.attempt(
            queue, ("delete", token), 204, "DELETE", f"/{queue.name}/messages/{message_id}",
            {"popreceipt": receipt},
        )
        del queue.messages[token]
        queue.deleted.add(token)
        self.totals.count("delete")

    def update(self, queue, token):
        message_id, version, receipt = queue.messages[token]
        visibility = self.random.randint(0, LEASE_S_MAX)
        self.lease_until = max(self.lease_until, time.monotonic() + visibility + 1)
        length = text_length(self.random, lambda _: UPDATE_RECORD_BYTES)
        text = message_text(token, version + 1, length)
        body = f"<QueueMessage><MessageText>{text}</MessageText></QueueMessage>".encode()
        headers, _ = self.attempt(
            queue, ("update", token), 204, "PUT", f"/{queue.name}/messages/{message_id}",
            {"popreceipt": receipt, "visibilitytimeout": str(visibility)}, body,
        )
        queue.messages[token] = [message_id, version + 1, headers["x-ms-popreceipt"]]
        self.totals.count("update")

    def set_metadata(self, queue):
        metadata = {f"k{n}": f"v{self.random.randint(0, 999)}" for n in range(self.random.randint(0, 3))}
        self.attempt(
            queue, ("metadata", metadata), 204, "PUT", f"/{queue.name}", {"comp": "metadata"},
            headers={f"x-ms-meta-{k}": v for k, v in metadata.items()},
        )
        queue.metadata = metadata
        self.totals.count("metadata")

    def set_acl(self, queue):
        identifiers = sorted(
            (f"policy{n}", self.random.choice(["r", "ra", "raup", "p"]))
            for n in range(self.random.randint(0, 3))
        )
        self.attempt(
            queue, ("acl", identifiers), 204, "PUT", f"/{queue.name}", {"comp": "acl"},
            acl_body(identifiers),
        )
        queue.acl = identifiers
        self.totals.count("acl")

    def clear(self, queue):
        self.attempt(queue, ("clear",), 204, "DELETE", f"/{queue.name}/messages")
        queue.deleted.update(queue.messages)
        queue.messages.clear()
        self.totals.count("clear")

    def recreate(self, slot):
        queue = slot[-1]
        self.attempt(queue, ("delete queue",), 204, "DELETE", f"/{queue.name}")
        queue.exists = False
        queue.deleted.update(queue.messages)
        queue.messages.clear()
        queue.metadata, queue.acl = {}, []
        self.totals.count("queue delete")
        stem, generation = queue.name.rsplit("g", 1)
        slot.append(Queue(f"{stem}g{int(generation) + 1}"))
        self.create_queue(slot)

    def create_queue(self, slot):
        queue = slot[-1]
        self.attempt(queue, ("create queue",), 201, "PUT", f"/{queue.name}")
        queue.exists = True
        self.totals.count("queue create")


def list_queues(client):
    """name -> metadata of every queue whose name starts with QUEUE_PREFIX."""
    queues, marker = {}, None
    while True:
        query = {"comp": "list", "prefix": QUEUE_PREFIX, "include": "metadata"}
        if marker:
            query["marker"] = marker
        status, _, data = client.request("GET", "/", query)
        if status != 200:
            raise Anomaly(f"list queues: {status} {data[:200]!r}")
        root = ElementTree.fromstring(data)
        for element in root.iter("Queue"):
            found = element.find("Metadata")
            metadata = {} if found is None else {child.tag: child.text or "" for child in found}
            queues[element.findtext("Name")] = metadata
        marker = root.findtext("NextMarker")
        if not marker:
            return queues


class Checker:
    """Compares what azq recovered with the model, adopts what the unknown changes did, and
    counts what is missing or back."""

    def __init__(self, port, totals):
        self.port = port
        self.totals = totals
        self.problems = []

    def problem(self, kind, text):
        with self.totals.lock:
            if kind == "lost":
                self.totals.lost += 1
            elif kind == "deleted back":
                self.totals.deleted_back += 1
            else:
                self.totals.other_mismatches += 1
            self.problems.append(f"{kind}: {text}")

    def check(self, slots):
        """Checks every client's queues, a thread (and a connection) per client."""
        client = Client(self.port)
        listed = list_queues(client)
        client.close()
        known_names = {queue.name for per_client in slots for slot in per_client for queue in slot}
        for name in sorted(set(listed) - known_names):
            self.problem("invented", f"queue {name} was never created")
        per_client_checks = [
            lambda per_client=per_client: self.check_client(per_client, listed) for per_client in slots
        ]
        in_threads(per_client_checks)

    def check_client(self, per_client, listed):
        client = Client(self.port)
        try:
            for slot in per_client:
                for queue in slot:
                    self.check_queue(client, queue, listed)
        finally:
            client.close()

    def check_queue(self, client, queue, listed):
        pending = queue.pending or (None,)
        kind = pending[0]
        present = queue.name in listed
        if present != queue.exists:
            if kind in ("create queue", "delete queue"):
                queue.exists = present
                if not present:
                    queue.deleted.update(queue.messages)
                    queue.messages.clear()
                    queue.metadata, queue.acl = {}, []
            elif present:
                self.problem("deleted back", f"queue {queue.name}, whose delete was acknowledged")
                queue.exists = True
            else:
                self.problem("lost", f"queue {queue.name} ({len(queue.messages)} messages)")
                for token in queue.messages:
                    self.problem("lost", f"{token} (with its queue {queue.name})")
                queue.exists = False
                queue.messages.clear()
        if not queue.exists:
            queue.pending = None
            return
        metadata = listed[queue.name]
        if metadata != queue.metadata:
            if kind == "metadata" and metadata == pending[1]:
                queue.metadata = metadata
            else:
                self.problem("metadata", f"{queue.name}: {metadata}, acknowledged {queue.metadata}")
                queue.metadata = metadata
        status, _, data = client.request("GET", f"/{queue.name}", {"comp": "acl"})
        if status != 200:
            raise Anomaly(f"get ACL of {queue.name}: {status}")
        acl = parse_acl(data)
        if acl != sorted(queue.acl):
            if kind == "acl" and acl == sorted(pending[1]):
                queue.acl = acl
            else:
                self.problem("ACL", f"{queue.name}: {acl}, acknowledged {queue.acl}")
                queue.acl = acl
        self.check_messages(client, queue, kind, pending)
        queue.pending = None

    def drain(self, client, queue):
        """Every message of the queue (all visible by now), leased to the checker."""
        found = {}
        while True:
            status, _, data = client.request(
                "GET",
                f"/{queue.name}/messages",
                {"numofmessages": "32", "visibilitytimeout": str(DRAIN_LEASE_S)},
            )
            if status != 200:
                raise Anomaly(f"drain {queue.name}: {status} {data[:200]!r}")
            batch = message_list(data)
            if not batch:
                return found
            for message_id, text, receipt in batch:
                found[message_id] = (text, receipt)

    def check_messages(self, client, queue, kind, pending):
        found = {}  # token -> list of (id, version, receipt)
        for message_id, (text, receipt) in self.drain(client, queue).items():
            token, version = parse_text(text)
            if token is None:
                self.problem("invented", f"{queue.name}: message {text[:60]!r}")
                continue
            found.setdefault(token, []).append([message_id, version, receipt])
        if kind == "clear":
            before = set(queue.messages)
            kept = before & set(found)
            if kept and kept != before:
                self.problem("clear", f"{queue.name}: an unknown clear kept {len(kept)} of "
                             f"{len(before)} messages")
            if not kept:
                queue.deleted.update(queue.messages)
                queue.messages.clear()
        for token, copies in sorted(found.items()):
            if len(copies) > 1:
                self.problem("duplicate", f"{queue.name}: {token} {len(copies)} times")
            message_id, version, receipt = copies[0]
            known = queue.messages.get(token)
            if token in queue.deleted:
                self.problem("deleted back", f"{queue.name}: {token}")
                queue.deleted.discard(token)
            elif known is None:
                if kind == "put" and pending[1] == token and version == 0:
                    pass  # the unknown put reached the disk
                else:
                    self.problem("invented", f"{queue.name}: {token} v{version}")
            elif known[0] != message_id:
                self.problem("identity", f"{queue.name}: {token} as {message_id}, "
                             f"acknowledged as {known[0]}")
            elif version != known[1]:
                if not (kind == "update" and pending[1] == token and version == known[1] + 1):
                    self.problem("lost" if version < known[1] else "invented",
                                 f"{queue.name}: {token} v{version}, acknowledged v{known[1]}")
            queue.messages[token] = [message_id, version, receipt]
        for token in list(queue.messages):
            if token in found:
                continue
            if kind == "delete" and pending[1] == token:
                queue.deleted.add(token)
            else:
                self.problem("lost", f"{queue.name}: {token} (acknowledged v{queue.messages[token][1]})")
            del queue.messages[token]


def crc32c_table():
    """The byte-at-a-time table of CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    table = CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# crc32c_many works in chunks of this many bytes.
CRC32C_CHUNK_BYTES = 256
# Byte k of each table entry, for bytes.translate.
CRC32C_TABLE_BYTES = [
    bytes((entry >> shift) & 0xFF for entry in CRC32C_TABLE) for shift in (0, 8, 16, 24)
]


def crc32c_through_zeros(count):
    """Tables (one per register byte) of what a register becomes through `count` zero bytes:
    a linear map, so each entry is the XOR of what its bits become alone."""
    bits = []
    for bit in range(32):
        register = 1 << bit
        for _ in range(count):
            register = CRC32C_TABLE[register & 0xFF] ^ (register >> 8)
        bits.append(register)

    def entry(shift, byte):
        return functools.reduce(
            operator.xor, (bits[shift + bit] for bit in range(8) if byte >> bit & 1), 0
        )

    return [[entry(shift, byte) for byte in range(256)] for shift in (0, 8, 16, 24)]


CRC32C_THROUGH_CHUNK = crc32c_through_zeros(CRC32C_CHUNK_BYTES)


def crc32c_many(messages):
    """crc32c of each of `messages` (4 bytes or more each), about 7 times faster: byte by byte,
    Python takes seconds for the few MB of records a cycle writes, on a busy machine more than
    the lease wait between a cut and the restart, which the walk of the log fills.

    Each message is cut into chunks of CRC32C_CHUNK_BYTES, and every chunk of every message
    is taken a byte at a time together: the table lookup is bytes.translate on one byte of the
    32-bit register of every chunk at once (the four bytes kept as four integers), and the XORs
    are on those integers. A CRC is linear, so each chunk starts from a register of 0, and
    chaining them is the register of the chunks before, carried through a chunk of zeros
    (crc32c_through_zeros), XORed with the chunk's own. A message is led by zeros to whole
    chunks (which leave a register of 0 as it is), and its first 4 bytes are inverted: the same
    as starting from all ones, as CRC-32C does."""
    chunk = CRC32C_CHUNK_BYTES
    led = [
        bytes(-len(message) % chunk)
        + (int.from_bytes(message[:4], "little") ^ 0xFFFFFFFF).to_bytes(4, "little")
        + message[4:]
        for message in messages
    ]
    rows = b"".join(led)
    tables = CRC32C_TABLE_BYTES
    # Each chunk's register, a batch of chunks at a time (big integers of a few KB are cheap).
    registers = []
    batch = 4096
    for batch_start in range(0, len(rows), batch * chunk):
        part = rows[batch_start:batch_start + batch * chunk]
        lanes = len(part) // chunk
        byte0 = byte1 = byte2 = byte3 = 0
        for column in range(chunk):
            lookup = byte0 ^ int.from_bytes(part[column::chunk], "little")
            lookup = lookup.to_bytes(lanes, "little")
            byte0 = int.from_bytes(lookup.translate(tables[0]), "little") ^ byte1
            byte1 = int.from_bytes(lookup.translate(tables[1]), "little") ^ byte2
            byte2 = int.from_bytes(lookup.translate(tables[2]), "little") ^ byte3
            byte3 = int.from_bytes(lookup.translate(tables[3]), "little")
        parts = [value.to_bytes(lanes, "little") for value in (byte0, byte1, byte2, byte3)]
        registers += [a | b << 8 | c << 16 | d << 24 for a, b, c, d in zip(*parts)]
    through0, through1, through2, through3 = CRC32C_THROUGH_CHUNK
    crcs = []
    lane = 0
    for message in led:
        register = 0
        for _ in range(len(message) // chunk):
            register = (
                through0[register & 0xFF] ^ through1[(register >> 8) & 0xFF]
                ^ through2[(register >> 16) & 0xFF] ^ through3[register >> 24] ^ registers[lane]
            )
            lane += 1
        crcs.append(register ^ 0xFFFFFFFF)
    return crcs


# The standard check value, and the fast way against the plain one.
assert crc32c(b"123456789") == 0xE3069283
assert crc32c_many([b"123456789", bytes(range(256)) * 3, b"\xff" * 4]) == [
    0xE3069283, crc32c(bytes(range(256)) * 3), crc32c(b"\xff" * 4)
]


class LogWalk:
    """Walks every log segment a power cut left in faultfs's directory, before azq reads it,
    with rules of its own written from the format (none of azq's reader's): from the first block
    on, the record due is there when its length is in range, it fits in the file, its sequence
    is the one due and its CRC matches; when it is not, zeros to the end of the block followed
    by the record due at the next block's start are a flush's padding of that length; anything
    else ends the walk (the written end, or a torn tail).

    It counts what the restart's reader then has to step across: padding of each length
    followed by a later record, above all 1 to 3 bytes (shorter than a length field: the case a
    reader lost the rest of the log at, which the load hardly ever produced before its sizes
    were drawn for it), and record headers split across a block boundary within a flush. Each
    padding and split header is counted once however many cycles its segment lives through.
    The part of a segment walked in an earlier cycle is not walked again (its CRCs are costly
    in Python) while its bytes are unchanged, which a digest tells."""

    def __init__(self, store):
        self.store = store
        # padding length -> how many distinct ones were crossed
        self.paddings = {}
        self.split_headers = 0
        self.seen = set()  # each padding and split header counted: kind, segment, offset
        # segment path -> (offset walked to, sequence due there, records before it, digest)
        self.walked = {}
        self.records = 0  # found over all cycles, a segment counted again each cycle it is there
        self.checked_bytes = 0  # bytes whose CRC the last walk computed
        self.put_sizes_wrong = 0
        self.puts_read = 0
        # The widths of the last Put's queue, slot, generation and sequence (`Totals`).
        self.put_numbers_bytes = None
        self.bad_headers = 0

    def walk(self):
        """Walks every segment; returns (segments, records found, records new, seconds)."""
        started = time.monotonic()
        self.checked_bytes = 0
        segments, found, new = 0, 0, 0
        paths = set()
        # The shards' segments only: not the copies recovery keeps of what it cut (in kept/).
        pattern = os.path.join(self.store, "__azq__", "gen-*", "shard-*", "wal-*.log")
        for path in sorted(glob.glob(pattern)):
            if re.fullmatch(r"wal-\d{20}\.log", os.path.basename(path)):
                paths.add(path)
                total, fresh = self.walk_segment(path)
                segments += 1
                found += total
                new += fresh
        # Segments removed (after a snapshot) are not walked again.
        for path in set(self.walked) - paths:
            del self.walked[path]
        self.records += found
        return segments, found, new, time.monotonic() - started

    def walk_segment(self, path):
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size < BLOCK_BYTES:
                self.bad_headers += 1
                return 0, 0
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return self.walk_records(path, data, size)

    def walk_records(self, path, data, size):
        """(records found, records not walked before) in one segment."""
        header = data[:BLOCK_BYTES]
        header_crc = struct.unpack_from("<I", header, 32)[0]
        if header[:8] != SEGMENT_MAGIC or crc32c(header[:32]) != header_crc:
            self.bad_headers += 1
            return 0, 0
        at, due, records = BLOCK_BYTES, struct.unpack_from("<Q", header, 24)[0], 0
        previous = self.walked.get(path)
        if previous is not None and previous[0] <= size:
            if hashlib.blake2b(data[:previous[0]]).digest() == previous[3]:
                at, due, records = previous[:3]
        walked_before = records
        # Where the records are by their headers, then their CRCs all at once (crc32c_many); a
        # record whose CRC does not match is not there, and the walk goes on from it as the
        # rules say (padding, or the end).
        record_first = True
        while True:
            spans = self.locate(data, size, at, due, record_first)
            messages = [data[start + 8:end] for start, end, _ in spans]
            self.checked_bytes += sum(map(len, messages))
            for (start, end, padding_from), crc in zip(spans, crc32c_many(messages)):
                if crc != struct.unpack_from("<I", data, start + 4)[0]:
                    break
                self.count(path, data, start, end, padding_from)
                at, due, records = end, due + 1, records + 1
            else:
                break
            if padding_from is not None:
                break
            record_first = False
        self.walked[path] = (at, due, records, hashlib.blake2b(data[:at]).digest())
        return records, records - walked_before

    def locate(self, data, size, at, due, record_first):
        """Where the records due from `at` on are, by their headers alone, as (start, end,
        where the padding before it starts or None): up to where neither the record due nor
        padding and then the record due is. With `record_first` false, the record due is
        known not to be at `at`."""
        spans = []
        while True:
            end = self.header(data, size, at, due) if record_first else None
            record_first = True
            padding_from = None
            if end is None:
                # Padding: zeros to the end of the block, and the record due starts the next.
                block_end = -(-at // BLOCK_BYTES) * BLOCK_BYTES
                if block_end == at or data[at:block_end].count(0) != block_end - at:
                    return spans
                end = self.header(data, size, block_end, due)
                if end is None:
                    return spans
                padding_from, at = at, block_end
            spans.append((at, end, padding_from))
            at, due = end, due + 1

    @staticmethod
    def header(data, size, at, due):
        """The end of the record due at `at` if its header is right (length in range, within
        the file, sequence due), else None."""
        if at + RECORD_HEADER_BYTES > size:
            return None
        length, _, sequence = struct.unpack_from("<IIQ", data, at)
        end = at + RECORD_HEADER_BYTES + length
        if 1 <= length <= RECORD_BODY_BYTES_MAX and end <= size and sequence == due:
            return end
        return None

    def count(self, path, data, start, end, padding_from):
        """Counts a valid record: the padding before it, its header split, its size."""
        if padding_from is not None:
            key = ("padding", path, padding_from, start)
            if key not in self.seen:
                self.seen.add(key)
                self.paddings[start - padding_from] = self.paddings.get(start - padding_from, 0) + 1
        elif 0 < -start % BLOCK_BYTES < RECORD_HEADER_BYTES:
            key = ("split", path, start)
            if key not in self.seen:
                self.seen.add(key)
                self.split_headers += 1
        body = start + RECORD_HEADER_BYTES
        if data[body] == RECORD_MESSAGE_PUT:
            self.count_put(data, start, end)

    def count_put(self, data, start, end):
        """Reads the fields of the Put at `start` by the model above (`PUT_FIXED_BYTES`) and
        checks that they and its text take the record exactly, with no visibility time written
        out and no foreign ID (no Put here is delayed, and the shard count never changes)."""
        self.puts_read += 1
        at = start + RECORD_HEADER_BYTES + 1
        flags, at = data[at], at + 1
        numbers = []
        for _ in range(9):
            number, at = read_varint(data, at, end)
            numbers.append(number)
        text_bytes, at = read_varint(data, at, end)
        if None in numbers or text_bytes is None:
            self.put_sizes_wrong += 1
            return
        widths = [varint_bytes(number) for number in numbers]
        put_numbers_bytes = sum(widths[:4])
        modelled = PUT_FIXED_BYTES + put_numbers_bytes + varint_bytes(text_bytes) + text_bytes
        if (flags & (PACKED_FOREIGN_ID | PACKED_VISIBLE_AT) or widths[4:] != [6, 5, 1, 1, 1]
                or at + text_bytes != end or end - start != modelled):
            self.put_sizes_wrong += 1
        else:
            self.put_numbers_bytes = put_numbers_bytes

    def summary(self):
        """Padding lengths crossed: 1, 2 and 3 bytes each, then in ranges."""
        counts = self.paddings
        ranges = ((4, 15), (16, 255), (256, 4095))
        parts = [f"1 byte {counts.get(1, 0)}"]
        parts += [f"{length} bytes {counts.get(length, 0)}" for length in (2, 3)]
        parts += [
            f"{low}-{high} bytes {sum(n for length, n in counts.items() if low <= length <= high)}"
            for low, high in ranges
        ]
        return (f"padding crossed {', '.join(parts)} ({len(counts)} of 4095 lengths); "
                f"split headers {self.split_headers}")


def in_threads(calls):
    """Runs each call in a thread of its own; the first exception of any is raised here."""
    errors = []

    def run(call):
        try:
            call()
        except Exception:  # carried to the caller's thread
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise Anomaly(errors[0])


def release(port, slots, totals, seed):
    """Makes every drained message visible again (most) or deletes it (some), acknowledged."""
    client = Client(port)
    rng = random.Random(seed)
    try:
        release_queues(client, slots, totals, rng)
    finally:
        client.close()


def release_queues(client, slots, totals, rng):
    for slot in slots:
        queue = slot[-1]
        if not queue.exists:
            continue
        for token in list(queue.messages):
            message_id, version, receipt = queue.messages[token]
            if rng.random() < 0.05 or len(queue.messages) > 2 * MESSAGES_PER_QUEUE_TARGET:
                status, _, data = client.request(
                    "DELETE", f"/{queue.name}/messages/{message_id}", {"popreceipt": receipt}
                )
                if status != 204:
                    raise Anomaly(f"release: delete {token}: {status} {data[:200]!r}")
                del queue.messages[token]
                queue.deleted.add(token)
                totals.count("delete")
                continue
            status, headers, data = client.request(
                "PUT",
                f"/{queue.name}/messages/{message_id}",
                {"popreceipt": receipt, "visibilitytimeout": "0"},
            )
            if status != 204:
                raise Anomaly(f"release: update {token}: {status} {data[:200]!r}")
            queue.messages[token][2] = headers["x-ms-popreceipt"]
            totals.count("update (release)")


class Run:
    def __init__(self, arguments):
        self.arguments = arguments
        self.work = arguments.work
        self.store = os.path.join(self.work, "store")
        self.mountpoint = os.path.join(self.work, "mount")
        self.socket = os.path.join(self.work, "faultfs.sock")
        os.makedirs(self.store, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        self.faultfs = None
        self.azq = None
        self.totals = Totals()
        self.log_walk = LogWalk(self.store)
        self.rng = random.Random(arguments.seed)
        # Unbuffered: lines from several threads, all there even if the run dies.
        self.azq_log = open(os.path.join(self.work, "azq.log"), "ab", buffering=0)

    def log(self, text):
        mode = " write" if self.arguments.durability == "write" else ""
        if self.arguments.text_memory is not None:
            mode += f" text-memory {self.arguments.text_memory}"
        now = time.strftime("%H:%M:%S")
        print(f"{now} powerloss[{self.arguments.backend}{mode}]: {text}", flush=True)

    def threads_waiting(self):
        """Where each thread of azq and faultfs waits in the kernel (for a run that hangs)."""
        lines = []
        for name, process in (("azq", self.azq), ("faultfs", self.faultfs)):
            if process is None or process.poll() is not None:
                continue
            for task in sorted(os.listdir(f"/proc/{process.pid}/task")):
                try:
                    with open(f"/proc/{process.pid}/task/{task}/comm") as comm, \
                            open(f"/proc/{process.pid}/task/{task}/wchan") as wchan:
                        lines.append(f"{name} {task} {comm.read().strip()}: {wchan.read().strip()}")
                except OSError:
                    pass
        return "\n".join(lines)

    def faultfs_flags(self, cycle):
        """Odd cycles decline what the backend has fallbacks for."""
        if cycle % 2 == 0:
            return []
        if self.arguments.backend == "io_uring":
            return ["--decline-direct", "--decline-fallocate"]
        return ["--decline-fallocate"]

    def mount(self, cycle):
        flags = self.faultfs_flags(cycle)
        self.faultfs = subprocess.Popen(
            [
                self.arguments.faultfs, "mount", *flags, "--sync-delay-ms",
                str(self.arguments.sync_delay_ms), self.store, self.mountpoint, self.socket,
            ],
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.work, "faultfs.log"), "ab"),
        )
        line = self.faultfs.stdout.readline().decode()
        if "mounted at" not in line:
            raise SystemExit(f"faultfs did not mount: {line!r} (see {self.work}/faultfs.log)")
        return flags

    def control(self, command):
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(60)
            connection.connect(self.socket)
            connection.sendall(command.encode() + b"\n")
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        answer = answer.decode().strip()
        if answer.startswith("error"):
            raise SystemExit(f"faultfs {command}: {answer}")
        return answer

    def start_azq(self, cycle):
        self.azq_log.write(f"\n=== cycle {cycle} ===\n".encode())
        command = [
            self.arguments.azq, "--runtime", self.arguments.backend, "--queuePort", "0",
            "--shards", str(self.arguments.shards), "--location", self.mountpoint,
            "--durability", self.arguments.durability,
        ]
        if self.arguments.text_memory is not None:
            command += ["--text-memory", self.arguments.text_memory]
        self.azq = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stderr_lines = []
        threading.Thread(target=self.pump_stderr, args=(self.azq, stderr_lines), daemon=True).start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.azq.stdout.readline().decode()
            if not line:
                self.azq.wait()
                time.sleep(0.1)
                raise SystemExit(
                    f"azq did not start (exit {self.azq.returncode}) in cycle {cycle}:\n"
                    + "".join(stderr_lines)
                    + f"\nthe data is kept in {self.store}"
                )
            self.azq_log.write(line.encode())
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if match:
                threading.Thread(target=self.pump_stdout, args=(self.azq,), daemon=True).start()
                # What recovery cleaned up, one line each (see ARCHITECTURE.md, Durability).
                self.totals.cleanup_notes += sum(1 for note in stderr_lines if "__azq__" in note)
                return int(match.group(1))
        raise SystemExit("azq did not start within 120 s")

    def pump_stderr(self, process, lines):
        for line in process.stderr:
            text = line.decode(errors="replace")
            lines.append(text)
            self.azq_log.write(line)

    def pump_stdout(self, process):
        for line in process.stdout:
            self.azq_log.write(line)

    def cycle(self, cycle, slots, counters):
        flags = self.mount(cycle)
        port = self.start_azq(cycle)
        self.totals.restarts += 1
        checker = Checker(port, self.totals)
        try:
            checker.check(slots)
        except (Anomaly, Unknown) as error:
            # A request of the check's own thread raises Unknown; one of its per-client threads,
            # an Anomaly naming it.
            if isinstance(error, Anomaly) and "Unknown:" not in str(error):
                raise
            # Time for the pumps to copy what azq printed last into azq.log.
            time.sleep(1)
            exited = self.azq.poll()
            how = "still running" if exited is None else f"exited with status {exited}"
            status = self.control("status")
            raise SystemExit(
                f"FAILED in cycle {cycle}: azq stopped answering while recovered data was checked "
                f"({str(error).strip().splitlines()[-1]}); azq {how}; faultfs: {status}; "
                f"threads:\n{self.threads_waiting()}\nazq's output in {self.work}/azq.log"
            ) from None
        if checker.problems:
            for problem in checker.problems[:30]:
                self.log(f"cycle {cycle}: {problem}")
            if len(checker.problems) > 30:
                self.log(f"cycle {cycle}: ... {len(checker.problems) - 30} more")
            if not self.arguments.expect_loss:
                self.azq.kill()
                self.azq.wait()
                self.control("unmount")
                raise SystemExit(
                    f"FAILED in cycle {cycle}: acknowledged changes lost or deleted messages "
                    f"back; azq's output in {self.work}/azq.log, the data in {self.store}"
                )
        in_threads([
            lambda per_client=per_client, seed=self.rng.random(): release(port, per_client, self.totals, seed)
            for per_client in slots
        ])
        if cycle == self.arguments.cycles:
            return flags, None
        stop = threading.Event()
        workers = [
            Worker(index, port, slots[index], self.totals, stop, self.rng.random(), counters[index])
            for index in range(self.arguments.clients)
        ]
        reads_before = text_reads(port)
        for worker in workers:
            worker.start()
        time.sleep(self.rng.uniform(*self.arguments.load_seconds))
        if self.azq.poll() is not None:
            raise SystemExit(f"azq exited by itself ({self.azq.returncode}) in cycle {cycle}: see {self.work}/azq.log")
        # Read before the power goes: the metrics page touches no file.
        self.totals.load_text_reads += text_reads(port) - reads_before
        # Half the cycles cut the power while azq runs (its next write or sync fails, nothing
        # more becomes durable, and an fsync in flight may be lost), then kill it; the others
        # kill it first (its last I/O ends), then cut.
        power_first = (cycle // 2) % 2 == 1
        if power_first:
            self.control("power-off")
            time.sleep(self.rng.uniform(0, 0.3))
        self.azq.kill()
        killed_at = time.monotonic()
        self.azq.wait()
        stop.set()
        for worker in workers:
            worker.join()
        anomalies = [worker.anomaly for worker in workers if worker.anomaly]
        if anomalies:
            raise SystemExit(f"FAILED in cycle {cycle}: {anomalies}")
        lease_until = max([killed_at + LEASE_S_MAX + 1] + [worker.lease_until for worker in workers])
        status = json.loads(self.control("status"))
        key = "declining" if flags else "plain"
        summary = self.totals.faultfs.setdefault(key, {})
        for name, value in status.items():
            summary[name] = summary.get(name, 0) + value
        how = "drop" if self.arguments.durability == "write" or cycle % 3 == 0 else f"random {self.rng.randrange(1 << 62)}"
        cut = json.loads(self.control(f"cut {how}"))
        self.faultfs.wait()
        for name, value in cut.items():
            self.totals.cuts[name] = self.totals.cuts.get(name, 0) + value
        # What the next start will read, before it reads (and maybe truncates) it. It costs no
        # time while it takes less than what is left of the workload's leases, which the next
        # cycle waits for anyway.
        segments, records, new_records, seconds = self.log_walk.walk()
        if self.log_walk.put_numbers_bytes is not None:
            self.totals.put_numbers_bytes = self.log_walk.put_numbers_bytes
        self.log(
            f"cycle {cycle}{' (' + ' '.join(flags) + ')' if flags else ''}: "
            f"{'power off, kill -9' if power_first else 'kill -9, power off'}, cut {how.split()[0]}: "
            f"writes kept/lost/torn {cut['writes_kept']}/{cut['writes_lost']}/{cut['writes_torn']}, "
            f"names kept/lost {cut['names_kept']}/{cut['names_lost']}; "
            f"direct writes {status['writes_direct']}, O_DIRECT refused {status['direct_declined']}, "
            f"fallocate {status['fallocates']} (refused {status['fallocates_declined']}); "
            f"log walk: {records} records ({new_records} new, "
            f"{self.log_walk.checked_bytes / 1e6:.1f} MB) in {segments} segments, {seconds:.1f} s"
        )
        return flags, lease_until

    def run(self):
        slots = [
            [[Queue(f"{QUEUE_PREFIX}c{index}q{number}g0")] for number in range(self.arguments.queues_per_client)]
            for index in range(self.arguments.clients)
        ]
        counters = [[0] for _ in range(self.arguments.clients)]
        lease_until = 0.0
        for cycle in range(self.arguments.cycles + 1):
            # Every lease the workload took must have run out before the checker drains.
            wait = lease_until - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            _, lease_until = self.cycle(cycle, slots, counters)
        self.azq.send_signal(signal.SIGTERM)
        self.azq.wait()
        self.control("unmount")
        self.faultfs.wait()
        return self.report()

    def report(self):
        totals = self.totals
        acknowledged = sum(totals.acknowledged.values())
        details = ", ".join(f"{count} {kind}" for kind, count in sorted(totals.acknowledged.items()))
        self.log(
            f"{self.arguments.cycles} cycles, {totals.restarts} restarts (each without a repair flag): "
            f"{acknowledged} acknowledged changes checked ({details}), {totals.unknown} unknown; "
            f"lost {totals.lost}, deleted back {totals.deleted_back}, other mismatches "
            f"{totals.other_mismatches}; recovery clean-up lines {totals.cleanup_notes}; "
            f"texts read back from disk during the loads {totals.load_text_reads} (their Gets "
            f"returned {totals.load_messages_got} messages)"
        )
        cuts = totals.cuts
        self.log(
            f"power cuts: unsynced writes kept {cuts.get('writes_kept', 0)}, lost "
            f"{cuts.get('writes_lost', 0)}, torn {cuts.get('writes_torn', 0)}; size changes kept "
            f"{cuts.get('resizes_kept', 0)}, lost {cuts.get('resizes_lost', 0)}; names kept "
            f"{cuts.get('names_kept', 0)}, lost {cuts.get('names_lost', 0)}"
        )
        for key, summary in sorted(totals.faultfs.items()):
            self.log(
                f"faultfs ({key} cycles): {summary.get('writes_direct', 0)} direct writes, "
                f"{summary.get('writes_buffered', 0)} buffered, {summary.get('direct_declined', 0)} "
                f"O_DIRECT refused, {summary.get('fallocates', 0)} fallocate served, "
                f"{summary.get('fallocates_declined', 0)} refused, {summary.get('file_syncs', 0)} "
                f"file syncs, {summary.get('directory_syncs', 0)} directory syncs"
            )
        walk = self.log_walk
        self.log(f"log walks after the cuts: {walk.records} records found (a segment's counted "
                 f"at each cut it is there); {walk.summary()}")
        problems = []
        missing = [f"padding of {length} byte{'s' if length > 1 else ''}"
                   for length in (1, 2, 3) if not walk.paddings.get(length)]
        if not walk.split_headers:
            missing.append("record header split across a block boundary")
        if missing:
            problems.append(
                f"the cuts left no {', no '.join(missing)} for a restart to read across"
            )
        if walk.put_sizes_wrong:
            problems.append(f"{walk.put_sizes_wrong} of {walk.puts_read} Put records are not "
                            "as PUT_FIXED_BYTES models them: the sizes drawn miss the block "
                            "boundaries")
        if not walk.puts_read:
            problems.append("the log walks read no Put record: their model of it is not checked")
        if walk.bad_headers:
            problems.append(f"{walk.bad_headers} segments without a valid header after a cut")
        plain = totals.faultfs.get("plain", {})
        declining = totals.faultfs.get("declining", {})
        if self.arguments.backend == "io_uring":
            if plain and plain.get("writes_direct", 0) == 0:
                problems.append("no O_DIRECT write reached faultfs in the plain cycles")
            if declining and (declining.get("direct_declined", 0) == 0 or declining.get("writes_direct", 0) != 0):
                problems.append("the buffered fallback was not exercised in the declining cycles")
        elif plain.get("writes_direct", 0) or declining.get("writes_direct", 0):
            problems.append("the portable backend wrote with O_DIRECT")
        if declining and declining.get("fallocates_declined", 0) == 0:
            problems.append("no fallocate was refused in the declining cycles")
        if acknowledged == 0:
            problems.append("the load did not run")
        # With --text-memory 0 a text leaves memory once written, so a Get reads back nearly
        # every text it returns (2,692 reads for 2,439 messages in one run: read-ahead adds
        # some); a text still in memory after its flush, or read back and held, is the rest.
        if self.arguments.text_memory == "0" and (
            totals.load_messages_got == 0 or 2 * totals.load_text_reads < totals.load_messages_got
        ):
            problems.append(
                f"{totals.load_text_reads} texts read back from disk during the loads, for "
                f"{totals.load_messages_got} messages their Gets returned (at least half "
                "expected): with --text-memory 0 the texts did not leave memory"
            )
        if self.arguments.expect_loss:
            if totals.lost + totals.deleted_back == 0:
                problems.append("the control run lost nothing: the checker cannot see loss")
            else:
                self.log(f"control: the checker saw {totals.lost} lost and {totals.deleted_back} "
                         "deleted back, as --durability write allows")
        elif totals.lost or totals.deleted_back or totals.other_mismatches:
            problems.append("acknowledged changes were lost")
        for problem in problems:
            self.log(f"FAILED: {problem}")
        return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--azq", required=True)
    parser.add_argument("--faultfs", required=True)
    parser.add_argument("--backend", choices=["io_uring", "portable"], required=True)
    parser.add_argument("--durability", choices=["fsync", "write"], default="fsync")
    parser.add_argument("--expect-loss", action="store_true")
    parser.add_argument("--cycles", type=int, required=True)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--queues-per-client", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, nargs=2, default=[0.5, 2.5])
    parser.add_argument("--sync-delay-ms", type=int, default=2,
                        help="how long each fsync takes on faultfs (a power-off meanwhile fails it)")
    parser.add_argument("--text-memory", default=None,
                        help="azq's --text-memory at every start (0: each text leaves memory "
                             "once written, and the load's Gets read it back)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--work", required=True, help="an empty directory for the data and logs")
    arguments = parser.parse_args()
    if arguments.seed is None:
        arguments.seed = random.randrange(1 << 32)
    # SIGTERM (and SIGINT, which a background job ignores) ends the run through the clean-up
    # below: azq killed, faultfs unmounted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = Run(arguments)
    run.log(f"seed {arguments.seed}, {arguments.cycles} cycles, data in {arguments.work}")
    try:
        status = run.run()
    except SystemExit:
        # A failed cycle: what the cuts had left for the restarts until then.
        if run.log_walk.records:
            run.log(f"log walks after the cuts so far: {run.log_walk.summary()}")
        raise
    finally:
        if run.azq is not None and run.azq.poll() is None:
            run.azq.kill()
        if run.faultfs is not None and run.faultfs.poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", run.mountpoint], check=False)
            run.faultfs.kill()
    sys.exit(status)


if __name__ == "__main__":
    main()

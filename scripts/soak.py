#!/usr/bin/env python3
"""Chaos client and verifier for scripts/soak.sh (standard library only, loopback only).

  soak.py chaos PORT SECONDS     misbehave against azq until SECONDS have passed: open and abandon
                                 connections, send garbage, truncated and oversized requests, and
                                 half-sent heads; every answer the server gives must be an Azure
                                 error (4xx with x-ms-error-code), never a hang past the timeout.
  soak.py verify PORT PREFIX N LOADGEN_JSON
                                 check that no message was lost or duplicated: the queues
                                 PREFIX-0..N-1 hold exactly puts - deletes messages, every message
                                 received was deleted exactly once, and no request failed.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import random
import socket
import sys
import time

ACCOUNT = "devstoreaccount1"
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
# Every socket operation of the chaos client is bounded; a server that stops answering fails it.
SOCKET_TIMEOUT_S = 15.0


def signed_get_metadata(queue):
    date = email.utils.formatdate(usegmt=True)
    path = f"/{ACCOUNT}/{queue}"
    string_to_sign = (
        "GET\n\n\n\n\n\n\n\n\n\n\n\n"
        f"x-ms-date:{date}\nx-ms-version:2026-04-06\n/{ACCOUNT}{path}\ncomp:metadata"
    )
    signature = base64.b64encode(
        hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    return (
        f"GET {path}?comp=metadata HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-date: {date}\r\n"
        f"x-ms-version: 2026-04-06\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\n\r\n"
    ).encode()


def read_head(sock):
    """The status and headers of one response (bodies here are small and ignored)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, {}
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(head[0].split()[1]), headers


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


def verify(port, prefix, queues, loadgen_json):
    with open(loadgen_json) as report_file:
        report = json.load(report_file)
    operations = report["ops"]
    puts = operations["put"]["count"]
    deletes = operations["delete"]["count"]
    received = operations["get"].get("messages", 0)
    errors = report["errors"] + report["connection_errors"] + report["protocol_errors"]
    remaining = 0
    for index in range(queues):
        sock = connect(port)
        sock.sendall(signed_get_metadata(f"{prefix}-{index}"))
        status, headers = read_head(sock)
        sock.close()
        assert status == 200, status
        remaining += int(headers["x-ms-approximate-messages-count"])
    print(
        f"verify: {puts} put, {received} received, {deletes} deleted, {remaining} still queued, "
        f"{errors} failed requests"
    )
    problems = []
    if errors:
        problems.append(f"{errors} requests failed")
    if received != deletes:
        problems.append(f"{received} messages received but {deletes} deleted (duplicate or lost deliveries)")
    if remaining != puts - deletes:
        problems.append(f"{remaining} queued but {puts} put - {deletes} deleted = {puts - deletes}")
    if puts == 0 or deletes == 0:
        problems.append("the load did not run")
    if problems:
        sys.exit("soak FAILED: " + "; ".join(problems))
    print("soak verified: no message lost, none duplicated")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "chaos":
        chaos(int(sys.argv[2]), float(sys.argv[3]))
    elif len(sys.argv) == 6 and sys.argv[1] == "verify":
        verify(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

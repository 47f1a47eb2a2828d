#!/usr/bin/env python3
"""The raw bytes of one real azq Put Message response, for the ceiling of scripts/bench-ceiling.sh.

  put-response.py PORT FILE     create queue `ceiling` on the azq at 127.0.0.1:PORT, put one 1 KiB
                                message with SharedKey, write the response (head and body, byte
                                for byte) to FILE

Standard library only; loopback only; every socket operation is bounded by a timeout.
"""

import base64
import email.utils
import hashlib
import hmac
import socket
import sys

ACCOUNT = "devstoreaccount1"
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
VERSION = "2026-04-06"
SOCKET_TIMEOUT_S = 15.0


def signed(method, path, body):
    date = email.utils.formatdate(usegmt=True)
    content_type = "application/xml" if body else ""
    string_to_sign = (
        f"{method}\n\n\n{len(body) if body else ''}\n\n{content_type}\n\n\n\n\n\n\n"
        f"x-ms-date:{date}\nx-ms-version:{VERSION}\n/{ACCOUNT}/{ACCOUNT}{path}"
    )
    signature = base64.b64encode(
        hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    head = (
        f"{method} /{ACCOUNT}{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-date: {date}\r\n"
        f"x-ms-version: {VERSION}\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    if body:
        head += f"Content-Type: {content_type}\r\n"
    return (head + "\r\n").encode() + body


def response(sock):
    """One whole response, head and Content-Length body, as the bytes that arrived."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("put-response.py: azq closed the connection")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("put-response.py: azq closed the connection")
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length]


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
    sock.settimeout(SOCKET_TIMEOUT_S)
    sock.sendall(signed("PUT", "/ceiling", b""))
    created = response(sock)
    if not created.startswith((b"HTTP/1.1 201", b"HTTP/1.1 204")):
        sys.exit(f"put-response.py: Create Queue answered {created[:40]!r}")
    text = base64.b64encode(b"x" * 768).decode()  # 1 KiB of base64, as azq-loadgen puts
    body = f"<QueueMessage><MessageText>{text}</MessageText></QueueMessage>".encode()
    sock.sendall(signed("POST", "/ceiling/messages", body))
    put = response(sock)
    if not put.startswith(b"HTTP/1.1 201"):
        sys.exit(f"put-response.py: Put Message answered {put[:200]!r}")
    with open(path, "wb") as file:
        file.write(put)


if __name__ == "__main__":
    main()

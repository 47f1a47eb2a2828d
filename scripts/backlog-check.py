#!/usr/bin/env python3
"""The backlog check's client for scripts/backlog-check.sh (standard library only, loopback only).

  backlog-check.py verify PORT PREFIX QUEUES FILL_JSON MESSAGE_BYTES
      Receives every message of queues PREFIX-0 .. PREFIX-(QUEUES-1) (Get Messages, 32 at a time,
      leased for an hour, until each answers none) and checks them against azq-loadgen's fill
      report FILL_JSON: as many as its puts acknowledged, none failed; every text exactly as
      azq-loadgen wrote it (MESSAGE_BYTES long: a 16-digit timestamp, its put mark, then x's),
      one run's nonce, no put mark twice, none a retry; no message ID twice; every message
      received for the first time. Exits non-zero with what differs.
  backlog-check.py clear PORT PREFIX QUEUES
      Clears those queues (Clear Messages).
"""

import json
import re
import sys
import threading

from soak import Client

# azq-loadgen's put text: the send time (16 decimal digits), the put mark (the run's nonce 8 hex
# digits, the put's token 16, the attempt 2: scripts/../loadgen/src/wire/mark.rs), then x's.
TEXT = re.compile(r"\A\d{16}([0-9a-f]{8})([0-9a-f]{16})([0-9a-f]{2})(x*)\Z")


def receive_all(port, queue, into):
    client = Client(port)
    while True:
        got = client.get(queue)
        if not got:
            break
        into.extend(got)


def verify(port, prefix, queues, fill_json, message_bytes):
    with open(fill_json) as report_file:
        report = json.load(report_file)
    puts = report["ops"]["put"]["count"]
    errors = report["errors"] + report["connection_errors"] + report["protocol_errors"]
    received = [[] for _ in range(queues)]
    threads = [
        threading.Thread(target=receive_all, args=(port, f"{prefix}-{index}", received[index]))
        for index in range(queues)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    messages = [message for per_queue in received for message in per_queue]
    problems = []
    if errors:
        problems.append(f"the fill had {errors} failed requests")
    if puts == 0:
        problems.append("the fill put nothing")
    if len(messages) != puts:
        problems.append(f"{len(messages)} messages received, {puts} puts acknowledged")
    ids = {message["id"] for message in messages}
    if len(ids) != len(messages):
        problems.append(f"{len(messages) - len(ids)} message IDs received twice")
    nonces, tokens, malformed, retries = set(), set(), [], 0
    for message in messages:
        text = message["text"]
        match = TEXT.match(text)
        if match is None or len(text) != message_bytes:
            malformed.append(text)
            continue
        nonce, token, attempt, _ = match.groups()
        nonces.add(nonce)
        tokens.add(token)
        retries += attempt != "00"
    if malformed:
        problems.append(f"{len(malformed)} texts not as azq-loadgen wrote them, e.g. {malformed[0][:80]!r}")
    if len(nonces) > 1:
        problems.append(f"texts of {len(nonces)} runs' nonces, one expected")
    well_formed = len(messages) - len(malformed)
    if len(tokens) != well_formed:
        problems.append(f"{well_formed - len(tokens)} puts stored twice (the same put mark)")
    if retries:
        problems.append(f"{retries} texts written by a retried put (the fill had no failures)")
    received_before = sum(1 for message in messages if message["dequeue_count"] != 1)
    if received_before:
        problems.append(f"{received_before} messages had been received before")
    print(f"backlog check: {len(messages)} messages received over {queues} queues, "
          f"{puts} puts acknowledged by the fill")
    if problems:
        sys.exit("backlog check FAILED: " + "; ".join(problems))


def clear(port, prefix, queues):
    client = Client(port)
    for index in range(queues):
        status, _, data = client.request("DELETE", f"{prefix}-{index}/messages")
        if status != 204:
            sys.exit(f"backlog check FAILED: Clear Messages of {prefix}-{index} answered {status}: {data[:300]!r}")


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "verify":
        verify(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    elif len(sys.argv) == 5 and sys.argv[1] == "clear":
        clear(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

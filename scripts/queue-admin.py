"""Two queue calls for the benchmark scripts, signed with SharedKey by hand (no SDK needed):

    queue-admin.py PORT QUEUE count    prints the queue's approximate message count
    queue-admin.py PORT QUEUE clear    Clear Messages, then prints the count (0)

The development account (devstoreaccount1) over path-style URLs on loopback; used by
scripts/store-growth.sh to drain and clear queues between its memory checks.
"""
import base64
import email.utils
import hashlib
import hmac
import http.client
import sys

ACCOUNT = "devstoreaccount1"
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
VERSION = "2021-12-02"


def call(port, method, queue, path, query):
    """One signed request; returns (status, headers)."""
    date = email.utils.formatdate(usegmt=True)
    headers = {"x-ms-date": date, "x-ms-version": VERSION}
    canonical_headers = "".join(f"{name}:{headers[name]}\n" for name in sorted(headers))
    resource = f"/{ACCOUNT}/{ACCOUNT}/{queue}{path}"
    for name, value in sorted(query.items()):
        resource += f"\n{name}:{value}"
    # VERB, then eleven standard headers (all empty here), then x-ms-* and the resource.
    string_to_sign = method + "\n" * 12 + canonical_headers + resource
    signature = base64.b64encode(
        hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    headers["Authorization"] = f"SharedKey {ACCOUNT}:{signature}"
    target = f"/{ACCOUNT}/{queue}{path}"
    if query:
        target += "?" + "&".join(f"{name}={value}" for name, value in query.items())
    connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    connection.request(method, target, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, response


def count(port, queue):
    status, response = call(port, "GET", queue, "", {"comp": "metadata"})
    if status != 200:
        sys.exit(f"Get Queue Metadata: status {status}")
    return int(response.getheader("x-ms-approximate-messages-count"))


def main():
    port, queue, action = sys.argv[1:4]
    if action == "clear":
        status, _ = call(port, "DELETE", queue, "/messages", {})
        if status != 204:
            sys.exit(f"Clear Messages: status {status}")
    elif action != "count":
        sys.exit(f"unknown action {action}: expected count or clear")
    print(count(port, queue))


if __name__ == "__main__":
    main()

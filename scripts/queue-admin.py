"""Two queue calls for the benchmark scripts, signed with SharedKey (no SDK needed):

    queue-admin.py PORT QUEUE count    prints the queue's approximate message count
    queue-admin.py PORT QUEUE clear    Clear Messages, then prints the count (0)

The development account (devstoreaccount1) over path-style URLs on loopback, through the
power-loss checker's signed client (scripts/powerloss.py); used by scripts/store-growth.sh to
drain and clear queues between its memory checks.
"""
import sys

from powerloss import Client


def count(client, queue):
    status, headers, _ = client.request("GET", f"/{queue}", {"comp": "metadata"})
    if status != 200:
        sys.exit(f"Get Queue Metadata: status {status}")
    return int(headers["x-ms-approximate-messages-count"])


def main():
    port, queue, action = sys.argv[1:4]
    client = Client(int(port))
    if action == "clear":
        status, _, _ = client.request("DELETE", f"/{queue}/messages")
        if status != 204:
            sys.exit(f"Clear Messages: status {status}")
    elif action != "count":
        sys.exit(f"unknown action {action}: expected count or clear")
    print(count(client, queue))
    client.close()


if __name__ == "__main__":
    main()

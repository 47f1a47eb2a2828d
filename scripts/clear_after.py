"""Clears a queue at a set time and prints how long the call took; used by bench-clear-stall.sh.

    clear_after.py PORT QUEUE SECONDS

Imports the SDK and connects first, then waits until SECONDS after its start, so that its own
start-up falls before the moment being measured. Loopback only.
"""
import sys
import time

started = time.monotonic()

from azure.storage.queue import QueueClient  # noqa: E402 (timed from before the import)

DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

port, name, delay_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
connection = (
    f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
    f"QueueEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
)
queue = QueueClient.from_connection_string(connection, name)
before = queue.get_queue_properties().approximate_message_count
time.sleep(max(0.0, started + delay_s - time.monotonic()))
clear_started = time.monotonic()
queue.clear_messages()
elapsed_ms = (time.monotonic() - clear_started) * 1000
after = queue.get_queue_properties().approximate_message_count
assert after == 0, f"{after} messages left"
print(f"{elapsed_ms:.1f} ms (cleared {before} messages)")

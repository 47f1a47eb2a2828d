#!/usr/bin/env bash
# How far a shard's files go past its --max-disk share under operations the limit never refuses
# (issue 40): one durable shard (the default, --durability fsync) with SHARE, filled with puts of
# 256 bytes until it refuses them (503), then CLIENTS clients each lease 32 messages and update
# them without a text, again and again with each new pop receipt, for DURATION seconds. The data
# directory (du) and azq_disk_bytes are sampled twice a second; prints the updates made, both
# maxima and the share. Server on SERVER_CPU, azq-loadgen on CLIENT_CPU, loopback only, bounded
# in time; the data is under a temporary directory, removed at the end.
#
#   scripts/bench-disk-share.sh [azq flags...]      e.g. --runtime io_uring
#
# Environment (defaults in brackets):
#   BIN [target/release]  the build to measure (azq and azq-loadgen); built when it is the default
#   SHARE [384M], FILL [600000] puts offered, CLIENTS [8], DURATION [120] seconds of updates,
#   SERVER_CPU [0], CLIENT_CPU [1]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${BIN:-target/release}
share=${SHARE:-384M}
fill=${FILL:-600000}
clients=${CLIENTS:-8}
duration=${DURATION:-120}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
if [[ -z ${BIN:-} ]]; then
  cargo build --release -p azq -p azq-loadgen --bins >&2
fi

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
work=$(mktemp -d /tmp/azq-bench-disk-share.XXXXXX)
updater=
cleanup() {
  [[ -n $updater ]] && kill "$updater" 2>/dev/null
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

: >"$work/azq.out"
taskset -c "$server_cpu" "$bin/azq" --queueHost 127.0.0.1 --queuePort 0 --shards 1 \
  --cpus "$server_cpu" --silent --location "$work/data" --max-disk "$share" "$@" \
  >"$work/azq.out" 2>"$work/azq.err" &
server_pid=$!
server_port=$(azq_ready_port "$work/azq.out" 60)

# The fill: refusals are expected once the share is reached, so no error bound.
timeout --kill-after=10 600 "$bin/azq-loadgen" \
  --endpoint "http://127.0.0.1:$server_port/devstoreaccount1" --cpus "$client_cpu" \
  --message-bytes 256 --quiet --scenario put --connections 16 --pipeline 8 --queue-prefix full \
  --requests "$fill" --warmup 0s --max-error-rate 100% --json "$work/fill.json" >/dev/null
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(f\"filled: {d['requests'] - d['errors']} puts stored, {d['errors']} refused\")" \
  "$work/fill.json"

# The updates: signed with the development account's key (scripts/powerloss.py's client).
PYTHONPATH=scripts taskset -c "$client_cpu" python3 - "$server_port" "$duration" "$clients" \
  >"$work/updates.txt" <<'PY' &
import re, sys, threading, time
from powerloss import Client

port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
end = time.time() + seconds
counts = [0] * clients

def updater(index):
    client = Client(port)
    _, _, body = client.request(
        "GET", "/full-0/messages", {"numofmessages": "32", "visibilitytimeout": "3600"})
    ids = re.findall(rb"<MessageId>([^<]+)</MessageId>", body)
    receipts = re.findall(rb"<PopReceipt>([^<]+)</PopReceipt>", body)
    held = [[i.decode(), r.decode()] for i, r in zip(ids, receipts)]
    while time.time() < end:
        for message in held:
            status, headers, _ = client.request(
                "PUT", f"/full-0/messages/{message[0]}",
                {"popreceipt": message[1], "visibilitytimeout": "3600"})
            if status != 204:
                sys.exit(f"Update Message: status {status}")
            message[1] = headers["x-ms-popreceipt"]
            counts[index] += 1

threads = [threading.Thread(target=updater, args=(i,)) for i in range(clients)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sum(counts))
PY
updater=$!

max_du=0
max_metric=0
while kill -0 "$updater" 2>/dev/null; do
  du=$(du -sb "$work/data" | cut -f1)
  metric=$(curl -s "http://127.0.0.1:$server_port/_azq/metrics" |
    awk '/^azq_disk_bytes\{/ { printf "%d", $2 }')
  ((du > max_du)) && max_du=$du
  ((${metric:-0} > max_metric)) && max_metric=$metric
  sleep 0.5
done
wait "$updater"
updater=
kill -0 "$server_pid" 2>/dev/null || { cat "$work/azq.err" >&2; exit 1; }

echo "updates without a text: $(cat "$work/updates.txt") by $clients clients in ${duration} s"
echo "data directory at most $((max_du >> 20)) MiB, azq_disk_bytes at most" \
  "$((max_metric >> 20)) MiB; the share: $share"

#!/usr/bin/env bash
# Soak test: azq-loadgen's mixed load (producers put, consumers get and delete within the lease)
# against a 2-shard azq for SECONDS, while a chaos client opens and abandons connections and sends
# garbage, truncated and oversized requests. Then it proves that no message was lost or
# duplicated (scripts/soak.py verify) and that SIGTERM still stops the server with exit 0.
#
#   scripts/soak.sh [SECONDS]      default 600 (10 minutes); scripts/test.sh runs 60
#
# Loopback only; bounded by SECONDS plus start-up and verification.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
seconds=${1:-600}
queues=2
prefix=azqsoak
work=$(mktemp -d)
azq_pid=""
cleanup() {
  if [[ -n "$azq_pid" ]] && kill -0 "$azq_pid" 2>/dev/null; then kill -KILL "$azq_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen

target/release/azq --queuePort 0 --shards 2 --silent --inMemoryPersistence > "$work/azq.out" 2> "$work/azq.err" &
azq_pid=$!
port=$(azq_ready_port "$work/azq.out" 30) || { cat "$work/azq.err"; exit 1; }
echo "soak: azq on port $port, ${seconds}s of mixed load with chaos"

python3 scripts/soak.py chaos "$port" "$seconds" &
chaos_pid=$!

# Two queues, one per producer, three consumers on each (azq-loadgen spreads lanes over queues
# by index). Consumers take 16 messages per Get and delete each well within the 300 s lease, so a message
# can only come back if the server loses a lease or a delete: any failed request fails the soak.
target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
  --scenario mixed --producers 2 --consumers 6 --batch 16 --visibility-timeout 300 \
  --queues "$queues" --queue-prefix "$prefix" --message-bytes 512 \
  --duration "${seconds}s" --warmup 0s --max-error-rate 0 --json "$work/load.json" --quiet

wait "$chaos_pid"
python3 scripts/soak.py verify "$port" "$prefix" "$queues" "$work/load.json"

kill -TERM "$azq_pid"
status=0
wait "$azq_pid" || status=$?
azq_pid=""
if [[ "$status" -ne 0 ]]; then
  echo "soak FAILED: azq exited with $status after SIGTERM"; cat "$work/azq.err"; exit 1
fi
echo "soak passed: ${seconds}s, azq exited 0 on SIGTERM"

#!/usr/bin/env bash
# What a Clear Messages of a deep queue costs the other queues of its shard: an open-loop put
# load on a small queue measures latency while, halfway through, a client clears a queue of
# DEPTH messages on the same shard. Prints the put latency percentiles and how long the Clear
# call took; one line per binary, so an older build can be compared in the same run.
#
#   scripts/bench-clear-stall.sh [AZQ_BINARY ...]     (default: target/release/azq)
#
# Environment (defaults in brackets):
#   SERVER_CPU [0]      CPU azq is pinned to (one shard)
#   CLIENT_CPU [1]      CPU azq-loadgen and the clearing client are pinned to (the client
#                       competes with the load generator's polling there; the DEPTH=1
#                       baseline carries the same bias)
#   DEPTH      [1000000] messages in the queue that is cleared (1 KiB each)
#   RATE       [10000]  puts/s of the measured load
#   OUT_DIR    [target/bench-clear-stall]  JSON reports
#
# Clears with the Python SDK from .venv (scripts/clear_after.py; scripts/test.sh installs the
# SDK). DEPTH=1 gives the baseline: the same run with a Clear that has nothing to free.
# Loopback only, bounded in time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
depth=${DEPTH:-1000000}
rate=${RATE:-10000}
out_dir=${OUT_DIR:-target/bench-clear-stall}
run_timeout_s=300
mkdir -p "$out_dir"
binaries=("$@")
if [[ ${#binaries[@]} -eq 0 ]]; then
  cargo build --release --workspace --bins >&2
  binaries=(target/release/azq)
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "no .venv: run scripts/test.sh --sdk-only once to install the Python SDK" >&2
  exit 2
fi

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
load_pid=
clear_pid=
# On any exit, the clients too: a failed Clear must not leave the load running.
stop_all() {
  for pid in $load_pid $clear_pid; do
    kill "$pid" 2>/dev/null || true
  done
  stop_server
}
trap stop_all EXIT

loadgen() {
  timeout --kill-after=10 "$run_timeout_s" taskset -c "$client_cpu" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpu" --quiet "$@"
}

index=0
for binary in "${binaries[@]}"; do
  port=$(free_port)
  taskset -c "$server_cpu" "$binary" --queueHost 127.0.0.1 --queuePort "$port" --shards 1 --inMemoryPersistence \
    --cpus "$server_cpu" --silent >/dev/null &
  server_pid=$!
  wait_for_port "$port"
  echo "==> $binary: filling deep-0 with $depth messages" >&2
  loadgen --scenario put --queue-prefix deep --connections 16 --requests "$depth" \
    --warmup 0s >/dev/null
  json="$out_dir/$index.json"
  # The clearing client starts first, so that its start-up (importing the SDK) falls in the
  # load's unmeasured warm-up; it clears 6 s after its start, midway through the measured 10 s.
  clear_out="$out_dir/$index.clear"
  taskset -c "$client_cpu" .venv/bin/python scripts/clear_after.py "$port" deep-0 6 \
    >"$clear_out" &
  clear_pid=$!
  loadgen --scenario put --queue-prefix small --connections 16 --rate "$rate" \
    --duration 10s --warmup 1s --json "$json" >/dev/null &
  load_pid=$!
  wait "$clear_pid"
  clear_ms=$(cat "$clear_out")
  wait "$load_pid"
  stop_server
  python3 - "$json" "$binary" "$clear_ms" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
put = report["ops"]["put"]
latency = put["latency_us"]
print(f"{sys.argv[2]}: Clear call {sys.argv[3]}; puts {put['count']} ({put['errors']} errors), "
      f"latency us p50 {latency['p50']} p99 {latency['p99']} p99.9 {latency['p999']} "
      f"p99.99 {latency['p9999']} max {latency['max']}")
EOF
  index=$((index + 1))
done

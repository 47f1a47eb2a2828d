#!/usr/bin/env bash
# The performance targets of issue 6, measured with azq-loadgen: one azq shard pinned to CPU 0,
# the load generator pinned to CPU 1, 1 KiB messages, SharedKey auth, keep-alive, no pipelining.
# Each scenario runs against a fresh server. Prints one line per scenario; the JSON reports stay
# in $OUT (default target/bench-targets).
#
#   scripts/bench-targets.sh            DURATION=5s WARMUP=2s CONNECTIONS=32 by default
#
# Loopback only; every run is bounded by DURATION (plus preloading).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
duration=${DURATION:-5s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-32}
out=${OUT:-target/bench-targets}
mkdir -p "$out"
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen

azq_pid=""
trap '[[ -n "$azq_pid" ]] && kill -KILL "$azq_pid" 2>/dev/null; true' EXIT

start_azq() {
  taskset -c 0 target/release/azq --queuePort 0 --shards 1 --cpus 0 --silent > "$out/azq.out" &
  azq_pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$out/azq.out" 2>/dev/null | grep -o '[0-9]*$' || true)
    [[ -n "$port" ]] && return
    sleep 0.1
  done
  echo "azq did not start" >&2
  exit 1
}

stop_azq() {
  kill -TERM "$azq_pid"
  wait "$azq_pid" || true
  azq_pid=""
}

# run NAME LOADGEN-ARGS...: one scenario against a fresh server.
run() {
  local name=$1
  shift
  start_azq
  taskset -c 1 target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --connections "$connections" --duration "$duration" --warmup "$warmup" \
    --json "$out/$name.json" --quiet "$@" > "$out/$name.txt"
  python3 - "$name" "$out/$name.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
report = json.load(open(path))
parts = []
for operation, stats in report["ops"].items():
    latency = stats["latency_us"]
    line = f"{operation} {stats['throughput_per_s']:,.0f}/s p50 {latency['p50']} p99 {latency['p99']} p99.9 {latency['p999']} us"
    parts.append(line)
if "delete" in report["ops"]:
    # Each consumed message is deleted once.
    parts.append(f"{report['ops']['delete']['throughput_per_s']:,.0f} messages consumed/s")
waited = [f"{core['waiting_ratio']:.0%}" for core in report.get("client_cores", [])]
print(f"{name:<22} " + "; ".join(parts) + f"; errors {report['errors']}; client waited for CPU {waited}")
PY
  stop_azq
}

run put --scenario put
run get1-delete --scenario get-delete --batch 1 --preload 1000000 --queues 1
run get32-delete --scenario get-delete --batch 32 --preload 1000000 --queues 1
run peek32 --scenario peek --batch 32 --preload 1000 --queues 1
run put-open-10k --scenario put --rate 10000

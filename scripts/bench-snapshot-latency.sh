#!/usr/bin/env bash
# Put p99 on one queue while a snapshot of another queue's backlog runs (issue 40), per second.
# Fills one durable shard (the default, --durability fsync) with MESSAGES texts of 256 bytes,
# drives Get(32)+Delete with --refill until a snapshot starts and stops the server there: a
# template directory whose every start writes a snapshot at once. Then RUNS times: a copy of the
# template, a start, and 1,000 puts/s on another queue for DURATION; prints each run's per-second
# Put p99 (ms) and when, after the ready line, the snapshot was renamed into place (its end; the
# removal of the files it replaced follows). Server on SERVER_CPU, azq-loadgen on CLIENT_CPU,
# loopback only, bounded in time; the data is under a temporary directory, removed at the end.
#
#   scripts/bench-snapshot-latency.sh [azq flags...]      e.g. --runtime io_uring
#
# Environment (defaults in brackets):
#   BIN [target/release]  the build to measure (azq and azq-loadgen); built when it is the default
#   MESSAGES [1000000], RUNS [3], DURATION [10s], SERVER_CPU [0], CLIENT_CPU [1]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${BIN:-target/release}
messages=${MESSAGES:-1000000}
runs=${RUNS:-3}
duration=${DURATION:-10s}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
if [[ -z ${BIN:-} ]]; then
  cargo build --release -p azq -p azq-loadgen --bins >&2
fi

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
work=$(mktemp -d /tmp/azq-bench-snapshot.XXXXXX)
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

# start DIRECTORY [azq flags...]: azq on DIRECTORY; sets server_port and server_pid.
start() {
  local directory=$1
  shift
  : >"$work/azq.out"
  taskset -c "$server_cpu" "$bin/azq" --queueHost 127.0.0.1 --queuePort 0 --shards 1 \
    --cpus "$server_cpu" --silent --location "$directory" "$@" >"$work/azq.out" 2>>"$work/azq.err" &
  server_pid=$!
  server_port=$(azq_ready_port "$work/azq.out" 60)
}

# load ARGS...: azq-loadgen against the server, bounded in time.
load() {
  timeout --kill-after=10 600 "$bin/azq-loadgen" \
    --endpoint "http://127.0.0.1:$server_port/devstoreaccount1" --cpus "$client_cpu" \
    --message-bytes 256 --quiet "$@"
}

snapshot_temporary() {
  compgen -G "$1/__azq__/gen-*/shard-*/snapshot.tmp" >/dev/null
}

template="$work/template"
start "$template"
load --scenario put --connections 16 --pipeline 8 --queue-prefix deep --requests "$messages" \
  --warmup 0s >/dev/null
load --scenario get-delete --refill --connections 16 --batch 32 --queue-prefix deep \
  --duration 300s --warmup 0s >/dev/null &
refill_pid=$!
until snapshot_temporary "$template"; do
  kill -0 "$refill_pid" 2>/dev/null || { echo "no snapshot started" >&2; exit 1; }
  sleep 0.05
done
stop_server
kill "$refill_pid" 2>/dev/null || true
wait "$refill_pid" 2>/dev/null || true

for run in $(seq 1 "$runs"); do
  data="$work/run"
  rm -rf "$data"
  cp -a "$template" "$data"
  sync
  start "$data" "$@"
  started=$(date +%s.%N)
  # The snapshot's end, from the ready line: when snapshot.tmp, once there, is gone (renamed).
  (
    for _ in $(seq 1 500); do snapshot_temporary "$data" && break; sleep 0.01; done
    while snapshot_temporary "$data"; do sleep 0.01; done
    echo "scale=2; ($(date +%s.%N) - $started) / 1" | bc
  ) >"$work/end" &
  watcher=$!
  load --scenario put --connections 16 --rate 1000 --queue-prefix other --duration "$duration" \
    --warmup 0s --csv "$work/run.csv" >/dev/null
  wait "$watcher"
  stop_server
  p99=$(awk -F, 'NR > 1 { printf "%.1f ", $5 / 1000 }' "$work/run.csv")
  echo "run $run: per-second Put p99 (ms): $p99; snapshot in place after $(cat "$work/end") s"
done

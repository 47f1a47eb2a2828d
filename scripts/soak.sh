#!/usr/bin/env bash
# Soak test: azq-loadgen's mixed load (producers put, consumers get and delete within the lease)
# against a 2-shard azq keeping its data on disk (in a temporary directory, never in the
# repository) for SECONDS, while a chaos client opens and abandons connections and sends
# garbage, truncated and oversized requests. Then it proves that no message was lost or
# duplicated (scripts/soak.py verify: the queues hold exactly puts - deletes, every message
# received was deleted once, no request failed) and that SIGTERM stops the server with exit 0.
#
# Then the restarts, each checked against what was acknowledged before it (issue 39: a log
# reader once lost acknowledged messages at an ordinary restart when a flush ended 1-3 bytes
# before a 4 KiB block boundary, and a soak that never restarted could not see it). Before each
# one, a burst of acknowledged puts (scripts/soak.py burst: one at a time, each its own flush,
# every other one ending 0-4 bytes before a block boundary, the next at offsets spread over the
# block) into the soak's queues, verified (puts + bursts - deletes):
#   1. after the load's verify and a burst, SIGTERM (exit 0), a start on the same data and the
#      same verify;
#   2. after a second burst, kill -9, a second start on the same data, and the same verify plus
#      a drain: every message received once, as many as counted, no id or load put twice, every
#      burst message back with its exact text. Last, SIGTERM must stop it with exit 0 again.
# The load's consumers keep the queues nearly empty, so its count alone says little about a
# restart; the bursts, written after it into the same logs, are what a restart that drops part of
# a log loses first. azq-loadgen's messages are all --message-bytes long (it has no size range or
# distribution), so the load's flushes end wherever their mix of records does, rarely near a
# block's end; the bursts put flushes there on purpose.
#
#   scripts/soak.sh [SECONDS]      default 600 (10 minutes); scripts/test.sh runs 60
#
# AZQ_BIN and AZQ_LOADGEN_BIN name the binaries to run (default: target/release/azq and
# target/release/azq-loadgen, built here). Loopback only; bounded by SECONDS plus start-up,
# restarts and verification.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
seconds=${1:-600}
queues=2
prefix=azqsoak
# Puts of each burst: twice this many.
burst_pairs=30
work=$(mktemp -d)
azq_pid=""
cleanup() {
  if [[ -n "$azq_pid" ]] && kill -0 "$azq_pid" 2>/dev/null; then
    kill -KILL "$azq_pid"
    wait "$azq_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

azq_bin=${AZQ_BIN:-}
if [[ -z $azq_bin ]]; then
  cargo build --release --quiet --bin azq
  azq_bin=target/release/azq
fi
loadgen_bin=${AZQ_LOADGEN_BIN:-}
if [[ -z $loadgen_bin ]]; then
  cargo build --release --quiet -p azq-loadgen
  loadgen_bin=target/release/azq-loadgen
fi

# Starts azq on the soak's data directory; sets azq_pid and port. Each start has its own output
# files (azq-N.out, azq-N.err).
starts=0
start_azq() {
  starts=$((starts + 1))
  "$azq_bin" --queuePort 0 --shards 2 --silent --location "$work/data" \
    > "$work/azq-$starts.out" 2> "$work/azq-$starts.err" &
  azq_pid=$!
  port=$(azq_ready_port "$work/azq-$starts.out" 60) || {
    echo "soak FAILED: start $starts of azq on $work/data printed no ready line"
    cat "$work/azq-$starts.err"; exit 1
  }
}

# SIGTERM must stop azq with exit 0.
stop_azq() {
  kill -TERM "$azq_pid"
  local status=0
  wait "$azq_pid" || status=$?
  azq_pid=""
  if [[ "$status" -ne 0 ]]; then
    echo "soak FAILED: azq exited with $status after SIGTERM"; cat "$work/azq-$starts.err"; exit 1
  fi
}

# scripts/soak.py verify with the load's report and "$@"; on failure, the tail of this start's
# stderr too (what recovery said).
verify_or_show() {
  if ! python3 scripts/soak.py verify "$port" "$prefix" "$queues" "$work/load.json" "$@"; then
    echo "azq's stderr of this start ($work/azq-$starts.err):"; tail -n 40 "$work/azq-$starts.err"
    exit 1
  fi
}

start_azq
echo "soak: azq on port $port (data in $work/data), ${seconds}s of mixed load with chaos"

python3 scripts/soak.py chaos "$port" "$seconds" &
chaos_pid=$!

# Two queues, one per producer, three consumers on each (azq-loadgen spreads lanes over queues
# by index). Consumers take 16 messages per Get and delete each well within the 300 s lease, so a message
# can only come back if the server loses a lease or a delete: any failed request fails the soak.
"$loadgen_bin" --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
  --scenario mixed --producers 2 --consumers 6 --batch 16 --visibility-timeout 300 \
  --queues "$queues" --queue-prefix "$prefix" --message-bytes 512 \
  --duration "${seconds}s" --warmup 0s --max-error-rate 0 --json "$work/load.json" --quiet

wait "$chaos_pid"
verify_or_show --label "after the load"
python3 scripts/soak.py burst "$port" "$prefix" "$queues" "$burst_pairs" "$work/burst1.json"
verify_or_show --burst "$work/burst1.json" --label "after the first burst"
stop_azq
echo "soak: azq exited 0 on SIGTERM; starting it again on the same data"

start_azq
verify_or_show --burst "$work/burst1.json" --label "after SIGTERM and a restart"
python3 scripts/soak.py burst "$port" "$prefix" "$queues" "$burst_pairs" "$work/burst2.json" "$burst_pairs"
bursts=(--burst "$work/burst1.json" --burst "$work/burst2.json")
verify_or_show "${bursts[@]}" --label "after the second burst"
kill -KILL "$azq_pid"
wait "$azq_pid" 2>/dev/null || true
azq_pid=""
echo "soak: azq killed (-9) after the second burst; starting it again on the same data"

start_azq
verify_or_show "${bursts[@]}" --drain --label "after kill -9 and a restart"
stop_azq
echo "soak passed: ${seconds}s, nothing lost or duplicated across SIGTERM and kill -9 restarts," \
  "azq exited 0 on SIGTERM ($(du -sh "$work/data" | cut -f1) of data)"

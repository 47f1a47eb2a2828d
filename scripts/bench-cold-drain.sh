#!/usr/bin/env bash
# Issue 40's drain target: Get(32)+Delete draining a backlog whose texts are on disk only
# (`--text-memory 0`), against the same backlog held in memory, builds side by side. Once: a
# durable one-shard server with `--text-memory 0` on SERVER_CPU is filled with MESSAGES texts
# of MESSAGE_BYTES over QUEUES queues by azq-loadgen on CLIENT_CPU, stopped cleanly, and its
# data kept. Then ROUNDS times, for each variant: a resident drain (the data restarted with
# `--text-memory all`, or without the flag for a build from before that default, which did the
# same: recovery reads every text into memory) and a cold one (restarted with
# `--text-memory 0`: the texts stay on disk and Gets read them back), each from a fresh copy of
# the data, synced first so that the copy's writeback does not meet the drain's syncs, and each
# DURATION of Get(32)+Delete over CONNECTIONS connections (each takes every queue in turn).
# Prints per drain the deletes a second, the texts read per message deleted, the Gets that
# waited for a read, the texts read ahead of Gets before one waited (0 before f52952c), the
# chunks the read cache read (0 before it), Get and Delete p50 / p99, and the snapshots the
# drain met (done, their bytes and seconds, and one still running; none before 97b62e2).
#
#   scripts/bench-cold-drain.sh                 the default build, one variant
#   VARIANTS="base|/tmp/azq-base new|target/release/azq" scripts/bench-cold-drain.sh
#
# Environment [defaults]: MESSAGES [2000000], MESSAGE_BYTES [256], QUEUES [1000], DURATION
# [20s], WARMUP [2s], CONNECTIONS [16], ROUNDS [3], RUNTIME [portable], SERVER_CPU [0],
# CLIENT_CPU [1]. A variant is `label|binary`; the first fills. Loopback only; every run is
# bounded in count or time; the data is in a temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
messages=${MESSAGES:-2000000}
message_bytes=${MESSAGE_BYTES:-256}
queues=${QUEUES:-1000}
duration=${DURATION:-20s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-16}
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-portable}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
variants=${VARIANTS:-"default|target/release/azq"}
[[ -n "${VARIANTS:-}" ]] || cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

# start BINARY FLAGS...: the server on the working copy of the data; sets port and server_pid.
start() {
  local binary=$1
  shift
  port=$(free_port)
  taskset -c "$server_cpu" "$binary" --queueHost 127.0.0.1 --queuePort "$port" --shards 1 \
    --cpus "$server_cpu" --runtime "$runtime" --silent --location "$work/data" "$@" \
    >/dev/null 2>>"$work/azq.err" &
  server_pid=$!
  wait_for_port "$port"
}

# load NAME ARGS...: one azq-loadgen run over the queues, its JSON in $work/NAME.json.
load() {
  local name=$1
  shift
  timeout --kill-after=10 900 target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpu" \
    --message-bytes "$message_bytes" --queues "$queues" --queue-prefix deep --quiet \
    --json "$work/$name.json" "$@" >/dev/null
}

IFS='|' read -r _ filler <<<"${variants%% *}"
start "$filler" --text-memory 0
load fill --scenario put --connections 16 --pipeline 8 --requests "$messages" --warmup 0s
stop_server
mv "$work/data" "$work/filled"
echo "filled: $messages texts of $message_bytes bytes in $queues queues ($(du -sh "$work/filled" |
  cut -f1) of data); drains of $duration over $connections connections, $runtime runtime"

for round in $(seq "$rounds"); do
  for variant in $variants; do
    IFS='|' read -r label binary <<<"$variant"
    for kind in resident cold; do
      rm -rf "$work/data"
      cp -a "$work/filled" "$work/data"
      sync
      flags=()
      # Since TEXT_MEMORY_SHARE_DEFAULT a durable server leaves recovered texts on disk unless
      # told all; a build from before it has no `all` and kept every text without the flag.
      if [[ $kind == cold ]]; then
        flags=(--text-memory 0)
      elif "$binary" --help | grep -q -- '--text-memory SIZE|all'; then
        flags=(--text-memory all)
      fi
      start "$binary" "${flags[@]}"
      before=$(azq_metric "$port" azq_messages)
      load "$kind" --scenario get-delete --connections "$connections" --batch 32 \
        --duration "$duration" --warmup "$warmup"
      removed=$((before - $(azq_metric "$port" azq_messages)))
      reads=$(azq_metric "$port" azq_text_reads_total)
      waits=$(azq_metric "$port" azq_text_waits_total)
      early=$(azq_metric "$port" azq_text_read_early_total)
      chunks=$(azq_metric "$port" azq_text_read_chunks_total)
      snapshots="$(azq_metric "$port" azq_snapshots_total) done, $(($(azq_metric "$port" \
        azq_snapshot_bytes_total) >> 20)) MiB in $(curl -sf "http://127.0.0.1:$port/_azq/metrics" |
        awk '$1 == "azq_snapshot_seconds_total" { printf "%.1f", $2 }') s, $(azq_metric "$port" \
        azq_snapshots_running) running"
      kill -9 "$server_pid"
      wait "$server_pid" 2>/dev/null || true
      server_pid=
      python3 - "$work/$kind.json" "$label" "$round" "$kind" "$removed" "$reads" "$waits" "$early" \
        "$chunks" "$snapshots" <<'PYTHON'
import json, sys
path, label, round_, kind, removed, reads, waits, early, chunks, snapshots = sys.argv[1:]
report = json.load(open(path))
get, delete = report["ops"]["get"], report["ops"]["delete"]
rate = delete["count"] / report["duration_s"]
# The server's counts include the warm-up; the report's do not.
def ms(operation, quantile):
    latency = operation["latency_us"]
    return "-" if latency is None else f"{latency[quantile] / 1000:.2f}"
print(f"{label} round {round_} {kind:8}: {rate:9,.0f} deletes/s; with the warm-up "
      f"{int(removed):,} removed, {int(reads) / max(int(removed), 1):.2f} texts read for each, "
      f"{int(waits):,} Gets waited for a read, {int(early):,} read before one waited, "
      f"{int(chunks):,} chunks read; Get p50/p99 {ms(get, 'p50')}/{ms(get, 'p99')} "
      f"ms, Delete p50/p99 {ms(delete, 'p50')}/{ms(delete, 'p99')} ms; snapshots {snapshots}")
PYTHON
    done
  done
done

#!/usr/bin/env bash
# What durability costs, in one run: the same azq-loadgen scenarios against azq in memory, azq
# fully durable (--durability fsync, the default), azq with --durability write, and Azurite
# keeping its data on disk (-l); then recovery of a large queue and bytes on disk per message.
# Every server is one shard (Azurite: one process) pinned to SERVER_CPU with a fresh, empty data
# directory under OUT_DIR; azq-loadgen runs on CLIENT_CPU. Group commit's batch sizes come from
# the line each durable azq shard prints when it stops.
#
#   scripts/bench-durability.sh
#
# Environment (defaults in brackets):
#   SERVER_CPU [0], CLIENT_CPU [1]
#   DURATION [5s], WARMUP [1s]    measured time and warm-up of each run
#   CONNECTIONS [64]              connections of the closed-loop runs
#   OPEN_RATE [1000]              ops/s of the open-loop run every target sustains
#   FAST_RATE [10000]             ops/s of the open-loop run for azq only
#   RECOVERY_MESSAGES [1000000]   1 KiB messages loaded before the recovery measurement
#   AZURITE [1]                   0 skips Azurite
#   OUT_DIR [target/bench-durability]
#
# Loopback only; every run is bounded in time. Data directories are removed after each run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
duration=${DURATION:-5s}
warmup=${WARMUP:-1s}
connections=${CONNECTIONS:-64}
open_rate=${OPEN_RATE:-1000}
fast_rate=${FAST_RATE:-10000}
recovery_messages=${RECOVERY_MESSAGES:-1000000}
with_azurite=${AZURITE:-1}
out_dir=${OUT_DIR:-target/bench-durability}
run_timeout_s=600
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

section() {
  printf '\n==> %s\n' "$*" >&2
}

if [[ $with_azurite == 1 && ! -x .azurite/node_modules/.bin/azurite-queue ]]; then
  section "npm install azurite@3 into .azurite/"
  mkdir -p .azurite
  npm install --prefix .azurite --no-audit --no-fund --loglevel=error azurite@3 >&2
fi

section "cargo build --release (azq, azq-loadgen)"
cargo build --release --workspace --bins >&2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
data=
cleanup() {
  stop_server
  [[ -n $data ]] && rm -rf "$data"
  true
}
trap cleanup EXIT

# start_target TARGET NAME: a fresh server with a fresh data directory; sets server_port.
start_target() {
  local target=$1 name=$2
  server_port=$(free_port)
  data="$out_dir/data-$name"
  rm -rf "$data"
  mkdir -p "$data"
  local storage
  case $target in
    memory) storage=(--inMemoryPersistence) ;;
    fsync) storage=(--location "$data" --durability fsync) ;;
    write) storage=(--location "$data" --durability write) ;;
  esac
  case $target in
    azurite)
      taskset -c "$server_cpu" node .azurite/node_modules/.bin/azurite-queue \
        --queueHost 127.0.0.1 --queuePort "$server_port" -l "$data" \
        --skipApiVersionCheck --silent --disableTelemetry >/dev/null 2>"$out_dir/$name.err" &
      ;;
    *)
      taskset -c "$server_cpu" target/release/azq --queueHost 127.0.0.1 \
        --queuePort "$server_port" --shards 1 --cpus "$server_cpu" --silent "${storage[@]}" \
        >/dev/null 2>"$out_dir/$name.err" &
      ;;
  esac
  server_pid=$!
  wait_for_port "$server_port"
}

stop_target() {
  stop_server
  rm -rf "$data"
  data=
}

# run_load NAME LOADGEN-ARGS...: azq-loadgen against the server started last.
run_load() {
  local name=$1
  shift
  timeout --kill-after=10 "$run_timeout_s" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$server_port/devstoreaccount1" --cpus "$client_cpu" \
    --duration "$duration" --warmup "$warmup" --quiet --json "$out_dir/$name.json" "$@" \
    >"$out_dir/$name.txt" || echo "azq-loadgen ($name) failed; see $out_dir/$name.txt" >&2
}

targets=(memory fsync write)
[[ $with_azurite == 1 ]] && targets+=(azurite)

# name|targets|arguments
scenarios=(
  "put, $connections connections|${targets[*]}|--scenario put --connections $connections"
  "get-delete, depth 1,000, $connections connections|${targets[*]}|--scenario get-delete --connections $connections --preload 1000 --refill"
  "put, open loop $open_rate/s|${targets[*]}|--scenario put --connections 16 --rate $open_rate"
  "put, open loop $fast_rate/s|memory fsync write|--scenario put --connections $connections --rate $fast_rate"
)

index=0
for entry in "${scenarios[@]}"; do
  IFS='|' read -r name scenario_targets arguments <<<"$entry"
  for target in $scenario_targets; do
    section "$name against $target"
    start_target "$target" "$index-$target"
    # shellcheck disable=SC2086 # the scenario's arguments are meant to split
    run_load "$index-$target" --queue-prefix "bench$index" $arguments
    stop_target
  done
  index=$((index + 1))
done

# Recovery: RECOVERY_MESSAGES messages of 1 KiB in one queue, then a restart. They are loaded
# with --durability write (the preload pipelines on one connection, whose answers would otherwise
# wait for a sync each read); the files are the same either way.
section "recovery of $recovery_messages messages"
start_target write recovery
timeout --kill-after=10 "$run_timeout_s" target/release/azq-loadgen \
  --endpoint "http://127.0.0.1:$server_port/devstoreaccount1" --cpus "$client_cpu" \
  --connections "$connections" --scenario peek --preload "$recovery_messages" --queues 1 \
  --queue-prefix recovery --duration 1s --warmup 0s --quiet >"$out_dir/recovery-load.txt"
stop_server
recovery_port=$(free_port)
started=$(date +%s%N)
taskset -c "$server_cpu" target/release/azq --queueHost 127.0.0.1 --queuePort "$recovery_port" \
  --shards 1 --cpus "$server_cpu" --location "$data" >"$out_dir/recovery.out" 2>&1 &
server_pid=$!
wait_for_port "$recovery_port"
ready_ms=$(( ($(date +%s%N) - started) / 1000000 ))
recovered_line=$(grep -m1 '^azq: recovered' "$out_dir/recovery.out" || true)
stop_server
# After a restart the closed segments hold only their records (recovery gives their
# preallocation back); the running shard had nothing to write, so it opened no new one.
disk_bytes=$(du -sb "$data/__azq__" | cut -f1)
stop_target

load_average=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_model=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
table="$out_dir/table.md"
{
  echo "Machine: $cpu_model, $(nproc) CPUs, $(df -T "$out_dir" | awk 'NR == 2 { print $2 }') under $out_dir; server on CPU $server_cpu, azq-loadgen on CPU $client_cpu."
  echo "azq $(git rev-parse --short HEAD); load average after the runs: $load_average. Each run: $duration after $warmup of warm-up, 1 KiB messages, SharedKey."
  echo
  echo "| scenario | target | operation | ops/s | p50 / p99 / p99.9 (us) | errors | records per sync (mean, max) |"
  echo "|---|---|---|---:|---:|---:|---:|"
  index=0
  for entry in "${scenarios[@]}"; do
    IFS='|' read -r name scenario_targets _ <<<"$entry"
    for target in $scenario_targets; do
      python3 - "$name" "$target" "$out_dir/$index-$target.json" "$out_dir/$index-$target.err" <<'PY'
import json, re, sys

name, target, path, err_path = sys.argv[1:]
labels = {"memory": "azq in memory", "fsync": "azq durable (fsync)",
          "write": "azq --durability write", "azurite": "Azurite -l"}
batches = ""
try:
    for line in open(err_path):
        found = re.search(r"(\d+) records in (\d+) flushes \(([\d.]+) per flush, at most (\d+)\)", line)
        if found:
            batches = f"{found.group(3)}, {found.group(4)}"
except OSError:
    pass
try:
    report = json.load(open(path))
except (OSError, ValueError):
    print(f"| {name} | {labels[target]} | (no report) | | | | |")
    sys.exit()
for operation, stats in report["ops"].items():
    latency = stats["latency_us"]
    print(f"| {name} | {labels[target]} | {operation} | {stats['throughput_per_s']:,.0f} | "
          f"{latency['p50']} / {latency['p99']} / {latency['p999']} | {report['errors']} | {batches} |")
PY
    done
    index=$((index + 1))
  done
  echo
  echo "Recovery of $recovery_messages messages of 1 KiB (one queue, one shard): ready after ${ready_ms} ms from launch; azq said: \`${recovered_line#azq: }\`."
  echo "On disk after that restart: $disk_bytes bytes, $(( disk_bytes / recovery_messages )) per message of 1,024 bytes of text."
} >"$table"
cat "$table"

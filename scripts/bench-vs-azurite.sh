#!/usr/bin/env bash
# azq and Azurite side by side: the same azq-loadgen scenarios against both, on loopback, each
# server pinned to the same CPU(s) and the load generator to others, then a comparison table.
#
#   scripts/bench-vs-azurite.sh
#
# Environment (defaults in brackets):
#   SERVER_CPUS [0]     CPUs both servers are pinned to (taskset list; azq gets one shard each)
#   CLIENT_CPUS [1]     CPUs azq-loadgen is pinned to
#   DURATION    [5s]    measured time of each run
#   WARMUP      [1s]    warm-up of each run
#   CONNECTIONS [8]     connections of each run
#   OPEN_RATE   [200]   ops/s of the open-loop run (below what Azurite sustains, so both keep up)
#   OUT_DIR     [target/bench-vs-azurite]  JSON reports and the table
#
# Installs Azurite 3 from npm into .azurite/ (git-ignored) on first use. Each scenario runs
# against a freshly started, empty server; every run is bounded in time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

server_cpus=${SERVER_CPUS:-0}
client_cpus=${CLIENT_CPUS:-1}
duration=${DURATION:-5s}
warmup=${WARMUP:-1s}
connections=${CONNECTIONS:-8}
open_rate=${OPEN_RATE:-200}
out_dir=${OUT_DIR:-target/bench-vs-azurite}
# One run may not take longer than this, whatever the server does (preloading 10,000 messages
# into Azurite takes tens of seconds).
run_timeout_s=300

mkdir -p "$out_dir"

section() {
  printf '\n==> %s\n' "$*" >&2
}

if [[ ! -x .azurite/node_modules/.bin/azurite-queue ]]; then
  section "npm install azurite@3 into .azurite/"
  mkdir -p .azurite
  npm install --prefix .azurite --no-audit --no-fund --loglevel=error azurite@3 >&2
fi
azurite_version=$(node -p "require('./.azurite/node_modules/azurite/package.json').version")

section "cargo build --release (azq, azq-loadgen)"
cargo build --release --workspace --bins >&2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
trap stop_server EXIT

# Starts a fresh, empty server ($1: azq or azurite) pinned to the server CPUs; sets
# server_port. Every scenario gets fresh servers, so that no run pays for the queues an earlier
# one left behind (Azurite slows down as its store grows).
shard_count=$(awk -F, '{ print NF }' <<<"$server_cpus")
start_server() {
  server_port=$(free_port)
  case $1 in
    azq)
      taskset -c "$server_cpus" target/release/azq --queueHost 127.0.0.1 \
        --queuePort "$server_port" --shards "$shard_count" --cpus "$server_cpus" --inMemoryPersistence \
        --silent >/dev/null &
      ;;
    azurite)
      taskset -c "$server_cpus" node .azurite/node_modules/.bin/azurite-queue \
        --queueHost 127.0.0.1 --queuePort "$server_port" --inMemoryPersistence \
        --skipApiVersionCheck --silent --disableTelemetry >/dev/null &
      ;;
  esac
  server_pid=$!
  wait_for_port "$server_port"
}

# name|arguments: the scenarios, each run against both servers with fresh queues.
scenarios=(
  "put|--scenario put"
  "get-delete, depth 10|--scenario get-delete --preload 10 --refill"
  "get-delete, depth 2,000|--scenario get-delete --preload 2000 --refill"
  "get-delete, depth 10,000|--scenario get-delete --preload 10000 --refill"
  "mixed|--scenario mixed"
  "put, open loop $open_rate/s|--scenario put --rate $open_rate"
)

run_one() {
  local target=$1 port=$2 index=$3 arguments=$4
  local json="$out_dir/$index-$target.json"
  # shellcheck disable=SC2086 # the scenario's arguments are meant to split
  timeout --kill-after=10 "$run_timeout_s" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpus" \
    --connections "$connections" --duration "$duration" --warmup "$warmup" \
    --queue-prefix "bench$index" --quiet --json "$json" $arguments \
    >"$out_dir/$index-$target.txt" || {
      echo "azq-loadgen against $target failed (exit $?); see $out_dir/$index-$target.txt" >&2
    }
}

index=0
for entry in "${scenarios[@]}"; do
  name=${entry%%|*}
  arguments=${entry#*|}
  for target in azq azurite; do
    section "$name against $target"
    start_server "$target"
    run_one "$target" "$server_port" "$index" "$arguments"
    stop_server
  done
  index=$((index + 1))
done

load_average=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_model=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
table="$out_dir/table.md"
{
  echo "Machine: $cpu_model, $(nproc) CPUs; servers pinned to CPUs $server_cpus, azq-loadgen to CPUs $client_cpus."
  echo "Azurite $azurite_version (in memory); azq $(git rev-parse --short HEAD); load average after the runs: $load_average."
  echo "Each run: $connections connections, $duration measured after $warmup of warm-up, 1 KiB messages, batch 1."
  echo
  echo "| scenario | operation | azq ops/s | Azurite ops/s | azq p50 / p99 / p99.9 (us) | Azurite p50 / p99 / p99.9 (us) | errors azq / Azurite | client waited for its CPU, azq / Azurite runs |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  index=0
  for entry in "${scenarios[@]}"; do
    name=${entry%%|*}
    python3 - "$name" "$out_dir/$index-azq.json" "$out_dir/$index-azurite.json" <<'PY'
import json, sys

name, azq_path, azurite_path = sys.argv[1:]

def load(path):
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None

azq, azurite = load(azq_path), load(azurite_path)
operations = list((azq or azurite or {"ops": {}})["ops"].keys())

def cell(report, operation, what):
    if report is None:
        return "failed"
    stats = report["ops"].get(operation)
    if stats is None:
        return "-"
    if what == "rate":
        return f"{stats['throughput_per_s']:,.0f}"
    if what == "errors":
        return f"{stats['errors']:,}"
    latency = stats["latency_us"]
    if latency is None:
        return "-"
    return f"{latency['p50']:,} / {latency['p99']:,} / {latency['p999']:,}"

def waited(report):
    # Share of the run the client cores were runnable but had no CPU: other processes' doing.
    if report is None or not report.get("client_cores"):
        return "?"
    return f"{max(core['waiting_ratio'] for core in report['client_cores']):.0%}"

for index, operation in enumerate(operations):
    waiting = f"{waited(azq)} / {waited(azurite)}" if index == 0 else ""
    print(f"| {name} | {operation} | {cell(azq, operation, 'rate')} | {cell(azurite, operation, 'rate')} "
          f"| {cell(azq, operation, 'latency')} | {cell(azurite, operation, 'latency')} "
          f"| {cell(azq, operation, 'errors')} / {cell(azurite, operation, 'errors')} | {waiting} |")
PY
    index=$((index + 1))
  done
} >"$table"

section "comparison (also in $table)"
cat "$table"

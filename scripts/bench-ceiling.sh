#!/usr/bin/env bash
# Issue 27's ceiling, side by side in one run: a do-nothing HTTP/1.1 responder (azq-ceiling,
# benches/ceiling: parses every request, answers with a real azq Put response's bytes, stores
# nothing), azq on each backend and Azurite, one after another in alternating rounds, with the
# same azq-loadgen settings: the server alone on CPU 0, azq-loadgen on CPU 1, 1 KiB messages,
# SharedKey, CONNECTIONS keep-alive connections, closed loop, DURATION after WARMUP. Prints one
# table: requests/s and the server's CPU per request (utime + stime of the server process from
# /proc/PID/stat over the measured window, divided by the requests answered in it), and of that
# the user and system parts.
#
#   scripts/bench-ceiling.sh
#   ROUNDS [3]  DURATION [5s]  WARMUP [1s]  CONNECTIONS [32]  DEPTH [1000]
#   SERVERS ["ceiling io_uring portable azurite"]: which servers run (a row needs its server)
#   OUT [target/bench-ceiling]: every run's loadgen JSON, CPU samples, and table.md
#
# Rows: Put (every server); Get(1) + Delete at a fixed depth (`--refill`: each deleted message is
# replaced by a Put, so a consumed message costs three requests) on azq and Azurite; and the same
# two on disk (azq with --location in a fresh temporary directory, --durability fsync, the
# default). The ceiling answers only Puts (its one response would be wrong for a Get), and
# Azurite's on-disk mode does not sync each request, so neither runs the on-disk rows. Azurite
# is installed from npm into .azurite/ (as scripts/bench-vs-azurite.sh does); when npm cannot
# install it, its rows print SKIPPED. Loopback only; every run is bounded by DURATION (plus
# start-up and a small preload).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
rounds=${ROUNDS:-3}
duration=${DURATION:-5s}
warmup=${WARMUP:-1s}
connections=${CONNECTIONS:-32}
depth=${DEPTH:-1000}
servers=${SERVERS:-ceiling io_uring portable azurite}
out=${OUT:-target/bench-ceiling}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.cpu "$out"/*.txt "$out"/*.svg
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen -p azq-ceiling

work=$(mktemp -d)
sampler_pid=""
trap 'stop_server; [[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null; rm -rf "$work"' EXIT

azurite_missing=""
if [[ " $servers " == *" azurite "* && ! -x .azurite/node_modules/.bin/azurite-queue ]]; then
  mkdir -p .azurite
  if ! timeout 300 npm install --prefix .azurite --no-audit --no-fund --loglevel=error azurite@3 >&2; then
    azurite_missing="npm could not install azurite@3"
  fi
fi

# start_server NAME [on-disk]: a fresh server pinned to CPU 0; sets server_pid and port.
start_server() {
  local name=$1 storage=(--inMemoryPersistence)
  if [[ ${2:-} == on-disk ]]; then
    rm -rf "$work/data"
    mkdir "$work/data"
    storage=(--location "$work/data")
  fi
  case $name in
    ceiling)
      taskset -c 0 target/release/azq-ceiling --response "$work/put-201.http" \
        > "$work/server.out" 2> "$work/server.err" &
      server_pid=$!
      port=$(azq_ready_port "$work/server.out") || exit 1
      ;;
    io_uring | portable)
      taskset -c 0 target/release/azq --queuePort 0 --shards 1 --cpus 0 --silent "${storage[@]}" \
        --runtime "$name" > "$work/server.out" 2> "$work/server.err" &
      server_pid=$!
      port=$(azq_ready_port "$work/server.out") || exit 1
      ;;
    azurite)
      port=$(free_port)
      taskset -c 0 node .azurite/node_modules/.bin/azurite-queue --queueHost 127.0.0.1 \
        --queuePort "$port" --inMemoryPersistence --skipApiVersionCheck --silent \
        --disableTelemetry > "$work/server.out" 2> "$work/server.err" &
      server_pid=$!
      wait_for_port "$port"
      ;;
  esac
}

# The ceiling's answer: the bytes of a real Put response of this azq build.
start_server portable
python3 scripts/put-response.py "$port" "$work/put-201.http"
stop_server

# One sample of process $1's CPU time (utime and stime, clock ticks) with the wall-clock time,
# into $2; nothing once the process has gone. Shell builtins only, no process per sample: a
# sampler that ran `date` and `awk` 20 times a second took about a tenth of azq's Put rate from
# the cores it measured.
cpu_sample() {
  local stat fields
  read -r stat 2>/dev/null < "/proc/$1/stat" || return 1
  read -r -a fields <<< "${stat##*) }"
  echo "${EPOCHREALTIME/,/.} ${fields[11]} ${fields[12]}" >> "$2"
}

# Samples the server's CPU time 20 times a second while it runs (waiting on a FIFO nobody
# writes: `read -t` sleeps without starting a process as `sleep` would).
sample_cpu() {
  local nap
  [[ -p $work/nap ]] || mkfifo "$work/nap"
  exec {nap}<> "$work/nap"
  while cpu_sample "$1" "$2"; do
    read -r -t 0.05 -u "$nap" || true
  done
}

# measure ROW SERVER ROUND LOADGEN-ARGS...: one run against a fresh server.
measure() {
  local row=$1 server=$2 round=$3
  shift 3
  local name="$row-$server-$round" storage=""
  [[ $row == disk-* ]] && storage=on-disk
  start_server "$server" "$storage"
  cpu_sample "$server_pid" "$out/$name.cpu" || true
  sample_cpu "$server_pid" "$out/$name.cpu" &
  sampler_pid=$!
  taskset -c 1 target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --connections "$connections" --duration "$duration" --warmup "$warmup" \
    --max-error-rate 0 --json "$out/$name.json" --quiet "$@" > "$out/$name.txt" 2>&1 ||
    echo "azq-loadgen against $server failed: see $out/$name.txt" >&2
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
  # The load has ended: this last sample bounds the measured window's end.
  cpu_sample "$server_pid" "$out/$name.cpu" || true
  stop_server
}

# row NAME: whether SERVER runs in it; the rows' loadgen arguments.
declare -A row_arguments=(
  [put]="--scenario put"
  [get-delete]="--scenario get-delete --batch 1 --queues 1 --preload $depth --refill"
  [disk-put]="--scenario put"
  [disk-get-delete]="--scenario get-delete --batch 1 --queues 1 --preload $depth --refill"
)
rows=(put get-delete disk-put disk-get-delete)
runs_in() {
  local row=$1 server=$2
  [[ " $servers " == *" $server "* ]] || return 1
  case $server in
    ceiling) [[ $row == put ]] ;;
    azurite) [[ -z $azurite_missing && $row != disk-* ]] ;;
    *) true ;;
  esac
}

for round in $(seq 1 "$rounds"); do
  for row in "${rows[@]}"; do
    for server in ceiling io_uring portable azurite; do
      runs_in "$row" "$server" || continue
      echo "round $round: $row against $server" >&2
      # shellcheck disable=SC2086 # the row's arguments are words on purpose
      measure "$row" "$server" "$round" ${row_arguments[$row]}
    done
  done
done

load_average=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_model=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
{
  echo "Machine: $cpu_model, $(nproc) CPUs; load average after the runs: $load_average."
  echo "azq $(git rev-parse --short HEAD); each run: $connections connections, $duration after $warmup,"
  echo "server on CPU 0, azq-loadgen on CPU 1; $rounds alternating rounds (one figure per round)."
  [[ -n $azurite_missing ]] && echo "Azurite: SKIPPED ($azurite_missing)."
  echo
  python3 - "$out" "$rounds" "$(getconf CLK_TCK)" "$servers" "${rows[@]}" <<'PY'
import json, sys

out, rounds, ticks_per_s, servers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = sys.argv[5:]
names = {"ceiling": "do-nothing responder (the ceiling)", "io_uring": "azq --runtime io_uring",
         "portable": "azq --runtime portable", "azurite": "Azurite"}
titles = {"put": "Put", "get-delete": "Get(1) + Delete, fixed depth (+ refill Put)",
          "disk-put": "Put, on disk (fsync)",
          "disk-get-delete": "Get(1) + Delete, on disk (fsync), fixed depth (+ refill Put)"}

def ticks_at(samples, when):
    """The server's CPU ticks (user, system) at wall-clock time `when`, interpolated between
    samples."""
    for (t0, *c0), (t1, *c1) in zip(samples, samples[1:]):
        if t0 <= when <= t1:
            share = (when - t0) / (t1 - t0) if t1 > t0 else 0
            return [a + (b - a) * share for a, b in zip(c0, c1)]
    return None

def run(row, server, round_):
    name = f"{out}/{row}-{server}-{round_}"
    try:
        report = json.load(open(f"{name}.json"))
        samples = []
        for line in open(f"{name}.cpu"):
            parts = line.split()
            if len(parts) == 3:
                samples.append((float(parts[0]), int(parts[1]), int(parts[2])))
    except (OSError, ValueError):
        return None
    requests_per_s = sum(op["throughput_per_s"] for op in report["ops"].values())
    consumed_per_s = report["ops"].get("delete", {}).get("throughput_per_s")
    start = report["start_unix_s"] + report["warmup_s"]
    end = start + report["duration_s"]
    first, last = ticks_at(samples, start), ticks_at(samples, end)
    cpu_us = None
    if first is not None and last is not None and requests_per_s:
        requests = requests_per_s * report["duration_s"]
        cpu_us = [(b - a) / ticks_per_s / requests * 1e6 for a, b in zip(first, last)]
    return requests_per_s, consumed_per_s, cpu_us, report["errors"]

def cpu_cell(user_system):
    user, system = user_system
    return f"{user + system:.1f} µs ({user:.1f} + {system:.1f})"

print("| row | server | requests/s | messages consumed/s | server CPU per request (user + system) "
      "| errors |")
print("|---|---|---:|---:|---:|---:|")
for row in rows:
    for server in ["ceiling", "io_uring", "portable", "azurite"]:
        runs = [run(row, server, r) for r in range(1, rounds + 1)]
        if all(r is None for r in runs):
            continue
        def cells(index, form):
            return " / ".join("failed" if r is None or r[index] is None else form(r[index])
                              for r in runs)
        print(f"| {titles[row]} | {names[server]} | {cells(0, lambda v: f'{v:,.0f}')} "
              f"| {cells(1, lambda v: f'{v:,.0f}') if row.endswith('get-delete') else '-'} "
              f"| {cells(2, cpu_cell)} | {cells(3, str)} |")
PY
} > "$out/table.md"
cat "$out/table.md"

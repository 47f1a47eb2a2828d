#!/usr/bin/env bash
# What durability costs in server CPU, over a fixed count of requests (CPU time is far less
# sensitive to a busy machine than rates): for each round, backend, storage (in memory, or on
# disk with --durability fsync in a fresh temporary directory) and scenario, a fresh one-shard
# azq on SERVER_CPU, a short warm-up, then azq-loadgen on CLIENT_CPU starting REQUESTS
# operations over CONNECTIONS connections. Prints one row per run: server CPU (utime + stime of
# every azq thread, /proc/PID/stat) per operation as azq-loadgen counts them (a get-delete
# operation is a Get, its Delete and the refill Put), context switches per operation (perf stat,
# when perf is installed) and group commit's records per flush (the line a durable shard prints
# when it stops).
#
#   scripts/bench-durable-cpu.sh                       # both backends, memory and disk, Put
#   SCENARIOS="put get-delete" ROUNDS=3 scripts/bench-durable-cpu.sh
#   AZQ="/tmp/azq-old target/release/azq" scripts/bench-durable-cpu.sh   # builds side by side
#
# Environment (defaults in brackets):
#   AZQ [target/release/azq]      azq binaries to compare, run in turn within each round
#   BACKENDS [portable io_uring]  STORAGE [memory disk]  SCENARIOS [put]
#   REQUESTS [30000]  CONNECTIONS [32]  ROUNDS [3]  SERVER_CPU [0]  CLIENT_CPU [1]
#   TMPDIR                        where the on-disk runs keep their data (removed after each)
#
# get-delete runs at a fixed depth (--preload 1000 --refill; the preload is in the warm-up).
# Loopback only; bounded in count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

binaries=(${AZQ:-target/release/azq})
backends=(${BACKENDS:-portable io_uring})
storages=(${STORAGE:-memory disk})
scenarios=(${SCENARIOS:-put})
requests=${REQUESTS:-30000}
connections=${CONNECTIONS:-32}
rounds=${ROUNDS:-3}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
loadgen=target/release/azq-loadgen

if [[ -z ${AZQ:-} ]]; then
  cargo build --release --quiet -p azq -p azq-loadgen
fi

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/azq-durable-cpu.XXXXXX")
perf_pid=
cleanup() {
  [[ -n $perf_pid ]] && kill -INT "$perf_pid" 2>/dev/null
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

# cpu_ticks: utime + stime of the server, all its threads.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$server_pid/stat"
}

# run BINARY BACKEND STORAGE SCENARIO: one fresh server, one measured load; prints a row.
run() {
  local binary=$1 backend=$2 storage=$3 scenario=$4 arguments=() extra=()
  rm -rf "$work/data" && mkdir -p "$work/data"
  case $storage in
    memory) arguments=(--inMemoryPersistence) ;;
    disk) arguments=(--location "$work/data" --durability fsync) ;;
  esac
  [[ $scenario == get-delete ]] && extra=(--preload 1000 --refill)
  local port
  port=$(free_port)
  taskset -c "$server_cpu" "$binary" --queueHost 127.0.0.1 --queuePort "$port" --shards 1 \
    --cpus "$server_cpu" --silent --runtime "$backend" "${arguments[@]}" \
    >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  wait_for_port "$port"
  local endpoint=http://127.0.0.1:$port/devstoreaccount1
  # The warm-up runs the scenario itself, so that a preload is done before the measurement
  # (the measured run's --preload finds the queue full).
  "$loadgen" --endpoint "$endpoint" --cpus "$client_cpu" --scenario "$scenario" --connections \
    "$connections" --requests 2000 --warmup 0s --quiet "${extra[@]}" >/dev/null
  local before after switches=-
  before=$(cpu_ticks)
  if command -v perf >/dev/null; then
    perf stat -e context-switches -x, -o "$work/perf.txt" -p "$server_pid" &
    perf_pid=$!
  fi
  timeout --kill-after=10 600 "$loadgen" --endpoint "$endpoint" --cpus "$client_cpu" \
    --scenario "$scenario" --connections "$connections" --requests "$requests" --warmup 0s \
    --quiet "${extra[@]}" >"$work/load.out"
  after=$(cpu_ticks)
  if [[ -n $perf_pid ]]; then
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    perf_pid=
    switches=$(awk -F, '/context-switches/ {printf "%.3f", $1 / '"$requests"'}' "$work/perf.txt")
  fi
  stop_server
  local per_flush
  per_flush=$(grep -o '([0-9.]* per flush' "$work/server.err" | tr -d '(' | cut -d' ' -f1 || true)
  local cpu_us
  cpu_us=$(python3 -c "print('%.1f' % (($after - $before) / $(getconf CLK_TCK) * 1e6 / $requests))")
  echo "| $binary | $backend | $storage | $scenario | $cpu_us | $switches | ${per_flush:--} |"
}

echo "| azq | backend | storage | scenario | server CPU per operation, µs |" \
  "context switches per operation | records per flush |"
echo "|---|---|---|---|---:|---:|---:|"
for round in $(seq 1 "$rounds"); do
  for scenario in "${scenarios[@]}"; do
    for storage in "${storages[@]}"; do
      for backend in "${backends[@]}"; do
        for binary in "${binaries[@]}"; do
          run "$binary" "$backend" "$storage" "$scenario"
        done
      done
    done
  done
done

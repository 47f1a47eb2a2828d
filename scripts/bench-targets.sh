#!/usr/bin/env bash
# The performance targets of issue 6, measured with azq-loadgen: one azq shard pinned to CPU 0,
# the load generator pinned to CPU 1, 1 KiB messages, SharedKey auth, keep-alive, no pipelining.
# Each scenario runs against a fresh server, on each backend of RUNTIMES in turn (default both:
# io_uring and portable, side by side in one run). Prints one line per scenario and backend; the
# JSON reports stay in $OUT (default target/bench-targets).
#
#   scripts/bench-targets.sh            DURATION=5s WARMUP=2s CONNECTIONS=32 by default
#   RUNTIMES=portable scripts/bench-targets.sh    one backend only
#
# Loopback only; every run is bounded by DURATION (plus preloading).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
duration=${DURATION:-5s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-32}
runtimes=${RUNTIMES:-io_uring portable}
out=${OUT:-target/bench-targets}
mkdir -p "$out"
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen

azq_pid=""
trap '[[ -n "$azq_pid" ]] && kill -KILL "$azq_pid" 2>/dev/null; true' EXIT

# start_azq RUNTIME: a one-shard server on CPU 0 with that backend.
start_azq() {
  taskset -c 0 target/release/azq --queuePort 0 --shards 1 --cpus 0 --silent --inMemoryPersistence --runtime "$1" \
    > "$out/azq.out" &
  azq_pid=$!
  port=$(azq_ready_port "$out/azq.out") || exit 1
}

stop_azq() {
  kill -TERM "$azq_pid"
  wait "$azq_pid" || true
  azq_pid=""
}

# Samples azq's CPU use (user + system ticks from /proc) once a second into $out/NAME.cpu, so
# the report can say how busy the server was: when the client's core is saturated and azq's is
# not, the client limited the run and azq's rate is a lower bound.
sample_cpu() {
  local pid=$1 file=$2
  while kill -0 "$pid" 2>/dev/null; do
    awk '{print $14 + $15}' "/proc/$pid/stat" >> "$file" 2>/dev/null || true
    sleep 1
  done
}

# run NAME LOADGEN-ARGS...: one scenario against a fresh server, on each backend.
run() {
  local scenario=$1
  shift
  for runtime in $runtimes; do
    run_on "$runtime" "$scenario-$runtime" "$@"
  done
}

# run_on RUNTIME NAME LOADGEN-ARGS...
run_on() {
  local runtime=$1 name=$2
  shift 2
  start_azq "$runtime"
  rm -f "$out/$name.cpu"
  sample_cpu "$azq_pid" "$out/$name.cpu" &
  local sampler=$!
  taskset -c 1 target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --connections "$connections" --duration "$duration" --warmup "$warmup" \
    --json "$out/$name.json" --quiet "$@" > "$out/$name.txt"
  kill "$sampler" 2>/dev/null || true
  python3 - "$name" "$out/$name.json" "$out/$name.cpu" "$(getconf CLK_TCK)" <<'PY'
import json, sys
name, path, cpu_path, ticks_per_s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# azq's busiest one-second sample: the measured window is the steady part of the run.
ticks = [int(line) for line in open(cpu_path) if line.strip()]
server_busy = max((later - earlier for earlier, later in zip(ticks, ticks[1:])), default=0) / ticks_per_s
report = json.load(open(path))
parts = []
for operation, stats in report["ops"].items():
    latency = stats["latency_us"]
    line = f"{operation} {stats['throughput_per_s']:,.0f}/s p50 {latency['p50']} p99 {latency['p99']} p99.9 {latency['p999']} us"
    parts.append(line)
if "delete" in report["ops"]:
    # Each consumed message is deleted once.
    parts.append(f"{report['ops']['delete']['throughput_per_s']:,.0f} messages consumed/s")
client = ", ".join(
    f"busy {core['running_ratio']:.0%} waiting {core['waiting_ratio']:.0%}" for core in report["client_cores"]
)
requests_per_s = sum(stats["throughput_per_s"] for stats in report["ops"].values())
server = f"azq core busy {server_busy:.0%}"
if requests_per_s and server_busy:
    server += f", {server_busy / requests_per_s * 1e6:.1f} us of azq CPU per request"
print(f"{name:<23} " + "; ".join(parts) + f"; errors {report['errors']}; {server}; client core {client}")
PY
  stop_azq
}

run put --scenario put
run get1-delete --scenario get-delete --batch 1 --preload 1000000 --queues 1
run get32-delete --scenario get-delete --batch 32 --preload 1000000 --queues 1
# Get(32) alone: messages stay leased for 1 s and come back, so 500,000 preloaded messages
# outlast the run at any rate this machine reaches.
run get32 --scenario get --batch 32 --visibility-timeout 1 --preload 500000 --queues 1
run peek32 --scenario peek --batch 32 --preload 1000 --queues 1
run put-open-10k --scenario put --rate 10000

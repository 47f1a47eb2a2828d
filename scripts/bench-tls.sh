#!/usr/bin/env bash
# HTTPS against plain HTTP, measured with azq-loadgen: one azq shard pinned to CPU 0, the load
# generator pinned to CPU 1, 1 KiB messages, SharedKey, keep-alive connections, no pipelining,
# data in memory; Put, then Get(1)+Delete on a preloaded queue, each over http:// and over
# https:// (`--cert auto`; the client takes it with --insecure, which skips only the
# certificate check of each handshake), on each backend of RUNTIMES. Then the handshake rate: full TLS
# handshakes per second from one `openssl s_time -new` client (one connection at a time).
# Put runs a fixed count (PUTS, default 200,000, no warm-up) so that azq's CPU time over the run
# (user + system, from /proc) divided by it gives the server's CPU per Put, a figure that holds
# up better than throughput on a machine shared with other work.
# Prints one line per run; the JSON reports stay in $OUT (default target/bench-tls).
#
#   scripts/bench-tls.sh            DURATION=5s WARMUP=2s CONNECTIONS=32 RUNTIMES="io_uring portable"
#
# Loopback only; every run is bounded by DURATION (plus preloading).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
duration=${DURATION:-5s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-32}
puts=${PUTS:-200000}
runtimes=${RUNTIMES:-io_uring portable}
out=${OUT:-target/bench-tls}
mkdir -p "$out"
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen

azq_pid=""
trap '[[ -n "$azq_pid" ]] && kill -KILL "$azq_pid" 2>/dev/null; true' EXIT

# start_azq RUNTIME SCHEME: a one-shard server on CPU 0.
start_azq() {
  local runtime=$1 scheme=$2 tls=()
  if [[ $scheme == https ]]; then
    tls=(--cert auto)
  fi
  taskset -c 0 target/release/azq --queuePort 0 --shards 1 --cpus 0 --silent --runtime "$runtime" \
    --inMemoryPersistence "${tls[@]}" > "$out/azq.out" &
  azq_pid=$!
  port=$(azq_ready_port "$out/azq.out") || exit 1
}

stop_azq() {
  kill -TERM "$azq_pid"
  wait "$azq_pid" || true
  azq_pid=""
}

# run RUNTIME SCHEME NAME LOADGEN-ARGS...
run() {
  local runtime=$1 scheme=$2 name=$3 insecure=()
  shift 3
  start_azq "$runtime" "$scheme"
  if [[ $scheme == https ]]; then
    insecure=(--insecure)
  fi
  local ticks_before ticks_after
  ticks_before=$(awk '{print $14 + $15}' "/proc/$azq_pid/stat")
  taskset -c 1 target/release/azq-loadgen --endpoint "$scheme://127.0.0.1:$port/devstoreaccount1" \
    "${insecure[@]}" --cpus 1 --connections "$connections" \
    --json "$out/$name.json" --quiet "$@" > "$out/$name.txt"
  ticks_after=$(awk '{print $14 + $15}' "/proc/$azq_pid/stat")
  python3 - "$name" "$out/$name.json" "$((ticks_after - ticks_before))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
name, path, ticks, ticks_per_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
report = json.load(open(path))
parts = []
for operation, stats in report["ops"].items():
    latency = stats["latency_us"]
    parts.append(f"{operation} {stats['throughput_per_s']:,.0f}/s p50 {latency['p50']} p99 {latency['p99']} us")
line = f"{name:<28} " + "; ".join(parts) + f"; errors {report['errors']}"
if name.startswith("put-"):
    puts = report["ops"]["put"]["count"]
    line += f"; azq CPU {ticks / ticks_per_s * 1e6 / puts:.1f} us per put"
print(line)
PY
  if [[ $scheme == https && $name == put-* ]]; then
    # Full handshakes (no resumption), one client connection at a time.
    local rate
    rate=$(taskset -c 1 openssl s_time -connect "127.0.0.1:$port" -new -time 5 2>/dev/null \
      | grep 'real seconds' | head -1 || true)
    printf '%-28s %s (openssl s_time -new, 5 s)\n' "handshakes-$runtime" "${rate:-not measured}"
  fi
  stop_azq
}

for runtime in $runtimes; do
  for scheme in http https; do
    run "$runtime" "$scheme" "put-$scheme-$runtime" --scenario put --requests "$puts" --warmup 0s
    run "$runtime" "$scheme" "get1-delete-$scheme-$runtime" --scenario get-delete --batch 1 \
      --preload 200000 --queues 1 --duration "$duration" --warmup "$warmup"
  done
done

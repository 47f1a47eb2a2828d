#!/usr/bin/env bash
# What HAProxy in front of azq costs (docs/SCALING.md): the same azq-loadgen runs against one
# azq node directly and through HAProxy with deploy/haproxy's configuration (the ring, then the
# node's health-checked `listen` section), alternating, against the same server in one run.
#
#   scripts/bench-proxy.sh
#
# Environment (defaults in brackets):
#   SERVER_CPUS  [0]     CPUs of azq (one shard each)
#   PROXY_CPUS   [0]     CPUs of HAProxy (one thread each). On two cores the proxy has no core
#                        of its own; it shares the server's, since an open-loop azq-loadgen
#                        keeps its cores busy polling. With more cores, give it its own.
#   CLIENT_CPUS  [1]     CPUs of azq-loadgen
#   DURATION     [5s]    measured time of each run
#   WARMUP       [1s]    warm-up of each run
#   CONNECTIONS  [16]    connections of each run
#   RATE         [5000]  puts/s of the open-loop runs (below what both paths sustain)
#   ROUNDS       [2]     direct/proxy pairs per scenario (the table shows every run)
#   OUT_DIR      [target/bench-proxy]  JSON reports, logs and the table (table.txt)
#   INSTRUCTION_REQUESTS [4000]  N of the instruction count (0: skip it)
#   TIERS        [2]     2: deploy/haproxy's shape (ring, then the node's health-checked listen
#                        section); 1: the ring's members are the node itself, unchecked (the
#                        cheaper variant docs/SCALING.md compares)
#
# Scenarios: closed-loop Peek (read-only, so the server's state does not grow), closed-loop Put,
# and open-loop Put at RATE, whose latency is corrected for coordinated omission. Besides rate
# and latency, the table gives each process's CPU time per request (from /proc, in 10 ms ticks):
# the proxy's is what a proxy core costs per request. Last, HAProxy's user-space instructions per
# request, counted by callgrind (independent of machine load): HAProxy, one thread, runs under
# valgrind while N and then 2N Peeks go through it; the difference of the totals over N cancels
# start-up and shutdown. Loopback only; every run is bounded.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

server_cpus=${SERVER_CPUS:-0}
proxy_cpus=${PROXY_CPUS:-0}
client_cpus=${CLIENT_CPUS:-1}
duration=${DURATION:-5s}
warmup=${WARMUP:-1s}
connections=${CONNECTIONS:-16}
rate=${RATE:-5000}
rounds=${ROUNDS:-2}
instruction_requests=${INSTRUCTION_REQUESTS:-4000}
tiers=${TIERS:-2}
out_dir=${OUT_DIR:-target/bench-proxy}
# One run may not take longer than this, whatever happens.
run_timeout_s=120

mkdir -p "$out_dir"
rm -f "$out_dir"/*.json "$out_dir/runs.tsv"

echo "==> cargo build --release (azq, azq-loadgen)" >&2
cargo build --release --workspace --bins >&2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

proxy_pid=
stop_proxy() {
  if [[ -n $proxy_pid ]]; then
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=
  fi
}
stop_all() {
  stop_proxy
  stop_server
}
trap stop_all EXIT

shard_count=$(awk -F, '{ print NF }' <<<"$server_cpus")
proxy_threads=$(awk -F, '{ print NF }' <<<"$proxy_cpus")

server_port=$(free_port)
taskset -c "$server_cpus" target/release/azq --queueHost 127.0.0.1 --queuePort "$server_port" \
  --shards "$shard_count" --cpus "$server_cpus" --inMemoryPersistence --silent \
  >"$out_dir/azq.log" 2>&1 &
server_pid=$!
wait_for_port "$server_port"

if [[ $tiers == 1 ]]; then
  printf 'backend accounts\n    balance hash var(txn.account)\n    hash-type consistent\n' \
    >"$out_dir/nodes.cfg"
  printf '    server node1 127.0.0.1:%s id 1\n' "$server_port" >>"$out_dir/nodes.cfg"
else
  # No PROXY header: the same node is measured directly too (its cost is one small parse
  # per connection, and the runs keep their connections).
  haproxy_nodes_config --no-proxy-protocol "azq-bench-$$" "$server_port" >"$out_dir/nodes.cfg"
fi
# start_proxy THREADS [WRAPPER...]: HAProxy with deploy/haproxy/haproxy.cfg in front of the
# node, pinned to the proxy CPUs, on a new port (proxy_port), optionally under a wrapper.
start_proxy() {
  local threads=$1
  shift
  proxy_port=$(free_port)
  printf 'global\n    nbthread %s\n' "$threads" >"$out_dir/threads.cfg"
  AZQ_PROXY_BIND=127.0.0.1:$proxy_port AZQ_PROXY_STATS_BIND=127.0.0.1:$(free_port) \
    taskset -c "$proxy_cpus" "$@" haproxy -db -f "$out_dir/threads.cfg" \
    -f deploy/haproxy/haproxy.cfg -f "$out_dir/nodes.cfg" >"$out_dir/haproxy.log" 2>&1 &
  proxy_pid=$!
  wait_for_port "$proxy_port"
}
start_proxy "$proxy_threads"

# CPU ticks (user + system) a process has used so far.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# run NAME TARGET LOADGEN-ARGS...: one azq-loadgen run against TARGET (direct or proxy); appends
# a line to runs.tsv with the CPU ticks azq and HAProxy used during it.
run() {
  local name=$1 target=$2
  shift 2
  local port=$server_port
  [[ $target == proxy ]] && port=$proxy_port
  local server_before proxy_before
  server_before=$(cpu_ticks "$server_pid")
  proxy_before=$(cpu_ticks "$proxy_pid")
  echo "==> $name via $target" >&2
  timeout --kill-after=10 "$run_timeout_s" taskset -c "$client_cpus" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpus" \
    --connections "$connections" --duration "$duration" --warmup "$warmup" --quiet \
    --queue-prefix "$name" --json "$out_dir/$name-$target.json" "$@" >"$out_dir/$name-$target.txt"
  printf '%s\t%s\t%s\t%s\n' "$name" "$target" \
    "$(($(cpu_ticks "$server_pid") - server_before))" \
    "$(($(cpu_ticks "$proxy_pid") - proxy_before))" >>"$out_dir/runs.tsv"
}

for ((round = 1; round <= rounds; round++)); do
  for target in direct proxy; do
    run "peek$round" "$target" --scenario peek --preload 32
    run "put$round" "$target" --scenario put
    run "open$round" "$target" --scenario put --rate "$rate"
  done
done

ticks_per_s=$(getconf CLK_TCK)
python3 - "$out_dir" "$ticks_per_s" "$connections" "$duration" <<'PY' | tee "$out_dir/table.txt"
import json, sys
out_dir, connections, duration = sys.argv[1], sys.argv[3], sys.argv[4]
ticks_per_s = int(sys.argv[2])
print(f"{connections} connections, {duration} per run; latency in microseconds "
      "(open loop: corrected for coordinated omission); CPU in microseconds per request")
print(f"{'run':8} {'target':7} {'op':5} {'req/s':>9} {'p50':>7} {'p99':>7} {'p99.9':>7} "
      f"{'azq cpu':>8} {'proxy cpu':>9}")
for line in open(f"{out_dir}/runs.tsv"):
    name, target, server_ticks, proxy_ticks = line.split()
    report = json.load(open(f"{out_dir}/{name}-{target}.json"))
    if report["requests"] == 0:
        print(f"{name:8} {target:7} no requests completed in the measured time")
        continue
    # The whole run (warm-up included) used the CPU; the requests of the whole run are about
    # the measured ones scaled by (warm-up + duration) / duration.
    measured_s = report["duration_s"]
    requests = report["requests"] * (report["warmup_s"] + measured_s) / measured_s
    to_us = lambda ticks: int(ticks) / ticks_per_s * 1e6 / requests
    for operation, stats in report["ops"].items():
        latency = stats["latency_us"]
        proxy_cpu = f"{to_us(proxy_ticks):9.1f}" if target == "proxy" else f"{'':9}"
        print(f"{name:8} {target:7} {operation:5} {stats['throughput_per_s']:9,.0f} "
              f"{latency['p50']:7} {latency['p99']:7} {latency['p999']:7} "
              f"{to_us(server_ticks):8.1f} {proxy_cpu}")
PY

# HAProxy's instructions for `requests` Peeks through it, from start to exit, under callgrind.
proxy_instructions() {
  local requests=$1
  start_proxy 1 valgrind --tool=callgrind --callgrind-out-file="$out_dir/callgrind.out"
  timeout --kill-after=10 "$run_timeout_s" taskset -c "$client_cpus" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$proxy_port/devstoreaccount1" --cpus "$client_cpus" \
    --connections 1 --scenario peek --queue-prefix "instructions$requests" --preload 32 \
    --requests "$requests" --warmup 0s --max-error-rate 0 --quiet >/dev/null
  stop_proxy
  grep -o 'Collected : [0-9]*' "$out_dir/haproxy.log" | grep -o '[0-9]*$'
}

if ((instruction_requests > 0)); then
  stop_proxy
  echo "==> HAProxy under callgrind:" \
    "$instruction_requests, then $((2 * instruction_requests)) Peeks" >&2
  single=$(proxy_instructions "$instruction_requests")
  double=$(proxy_instructions "$((2 * instruction_requests))")
  echo "HAProxy, user space: $(((double - single) / instruction_requests)) instructions per" \
    "Peek (callgrind; one connection, one thread)" | tee -a "$out_dir/table.txt"
fi

#!/usr/bin/env bash
# What one request costs the server on each backend, over a FIXED count of requests, so that the
# figures hold on a busy machine far better than a rate: azq's CPU time (utime + stime from
# /proc/PID/stat) per request, and, from `perf stat` on the server process, system calls
# (raw_syscalls:sys_enter, and the socket, ring and epoll calls by name) and `malloc` calls (a
# uprobe on libc's malloc, added by this script if missing: root only) per request, the counts
# in a second run of REQUESTS / 4 on the same server (a uprobe costs microseconds per call).
#
#   scripts/backend-costs.sh                 ROUNDS=3 REQUESTS=200000 BACKENDS="io_uring portable"
#   SCENARIOS="put get-delete" AZQ_BIN=path/to/azq scripts/backend-costs.sh   (an older build)
#
# For each round, scenario and backend (alternating): a fresh one-shard server in memory on
# CPU 0 (SERVER_CPU), azq-loadgen on CPU 1 (CLIENT_CPU) with 32 connections, closed loop, 1 KiB
# messages, SharedKey; an unmeasured warm-up run of WARMUP_REQUESTS, then the measured run of
# REQUESTS operations. get-delete is Get(1) + Delete at a fixed depth of 1,000 (`--refill`: each
# deletion is followed by a Put), three requests per operation; the per-request figures divide
# by every request the loadgen counted. Loopback only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
rounds=${ROUNDS:-3}
requests=${REQUESTS:-200000}
warmup_requests=${WARMUP_REQUESTS:-20000}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
azq_bin=${AZQ_BIN:-target/release/azq}
[[ -n "${AZQ_BIN:-}" ]] || cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
added_probe=
trap 'stop_server; rm -rf "$work"; [[ -z $added_probe ]] || perf probe -q -d probe_libc:malloc' EXIT

libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')
events=raw_syscalls:sys_enter
for call in sendto recvfrom io_uring_enter epoll_wait mprotect; do
  events+=",syscalls:sys_enter_$call"
done
if perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc '; then
  events+=",probe_libc:malloc"
elif perf probe -q -x "$libc" --add malloc 2>/dev/null; then
  # Removed again on exit: a uprobe left behind would slow every malloc counted by others.
  added_probe=1
  events+=",probe_libc:malloc"
else
  echo "(no malloc uprobe: run as root for malloc counts)" >&2
fi

declare -A scenario_args=(
  [put]="--scenario put --queues 1"
  [get-delete]="--scenario get-delete --batch 1 --queues 1 --preload 1000 --refill"
)

# utime + stime of process $1, in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

printf '%-6s %-11s %-9s %9s %10s %10s %9s %9s %9s %9s %9s\n' round scenario backend requests \
  "cpu_us/req" "syscalls" sendto recvfrom uring_ent epoll_w malloc
for round in $(seq 1 "$rounds"); do
  for scenario in ${SCENARIOS:-put get-delete}; do
    for backend in ${BACKENDS:-io_uring portable}; do
      taskset -c "$server_cpu" "$azq_bin" --queuePort 0 --shards 1 --cpus "$server_cpu" \
        --inMemoryPersistence --runtime "$backend" > "$work/azq.out" 2>&1 &
      server_pid=$!
      port=$(azq_ready_port "$work/azq.out" 20)
      # shellcheck disable=SC2206
      loadgen=(taskset -c "$client_cpu" target/release/azq-loadgen
        --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpu"
        --connections 32 ${scenario_args[$scenario]} --warmup 0s --max-error-rate 0 --quiet)
      "${loadgen[@]}" --requests "$warmup_requests" > /dev/null
      ticks_before=$(cpu_ticks "$server_pid")
      "${loadgen[@]}" --requests "$requests" > "$work/loadgen.out"
      ticks_after=$(cpu_ticks "$server_pid")
      answered=$(grep -o 'of [0-9,]* requests' "$work/loadgen.out" | tr -dc '0-9')
      # The counts in a run of their own: a uprobe costs microseconds per hit.
      perf stat -x, -e "$events" -p "$server_pid" -o "$work/perf.csv" &
      perf_pid=$!
      sleep 0.5
      "${loadgen[@]}" --requests "$((requests / 4))" > "$work/counted.out"
      kill -INT "$perf_pid"
      wait "$perf_pid" || true
      stop_server
      counted=$(grep -o 'of [0-9,]* requests' "$work/counted.out" | tr -dc '0-9')
      python3 - "$work/perf.csv" "$answered" "$counted" "$((ticks_after - ticks_before))" \
        "$(getconf CLK_TCK)" "$round" "$scenario" "$backend" <<'EOF'
import sys
path, answered, counted, ticks, hertz, round_, scenario, backend = sys.argv[1:]
answered, counted = int(answered), int(counted)
counts = {}
for line in open(path):
    fields = line.strip().split(",")
    if len(fields) > 2 and fields[0].replace(".", "").isdigit():
        counts[fields[2]] = int(float(fields[0]))
def per(event):
    value = counts.get(event)
    return "-" if value is None else f"{value / counted:.3f}"
cpu_us = int(ticks) / int(hertz) * 1e6 / answered
print(f"{round_:<6} {scenario:<11} {backend:<9} {answered:>9} {cpu_us:>10.2f} "
      f"{per('raw_syscalls:sys_enter'):>10} {per('syscalls:sys_enter_sendto'):>9} "
      f"{per('syscalls:sys_enter_recvfrom'):>9} {per('syscalls:sys_enter_io_uring_enter'):>9} "
      f"{per('syscalls:sys_enter_epoll_wait'):>9} {per('probe_libc:malloc'):>9}")
EOF
    done
  done
done

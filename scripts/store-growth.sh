#!/usr/bin/env bash
# What the message store's growth costs a Put, over a FIXED count of Puts into a fresh server,
# so that the figures hold on a busy machine far better than a rate; builds (or allocator
# settings) side by side in alternating rounds. Per run: a fresh one-shard server in memory
# (`--runtime RUNTIME`, default portable) on CPU 0, azq-loadgen on CPU 1 putting REQUESTS messages of 1 KiB into
# one queue over 32 connections (closed loop, SharedKey); azq's minor faults and utime + stime
# from /proc/PID/stat before and after, the system calls that grow memory (mprotect, brk, mmap,
# munmap, madvise: `perf stat` on their tracepoints, which cost nothing on other calls) and
# VmRSS at the end.
#
#   scripts/store-growth.sh                    the default build, ROUNDS [3], REQUESTS [500000]
#   VARIANTS="base|/tmp/azq-base| new|target/release/azq|" scripts/store-growth.sh
#   VARIANTS="arena|target/release/azq|GLIBC_TUNABLES=glibc.malloc.arena_max=1" ...
#   PROFILE=1 ...       also `perf record -e cpu-clock -g` of each run: the shares (children) of
#                       page faults, sysmalloc, mprotect and clear_page_erms in azq's samples
#   MEMORY=1 ...        instead: RSS after 1,000,000 Puts (MILLION) into a fresh server, and
#                       whether memory is reused, on another: Put 200,000, Get + Delete them
#                       all, Put 200,000 again, Clear Messages, Put 200,000 again (RSS after
#                       each step)
#
# A variant is `label|binary|environment` (environment: NAME=VALUE pairs separated by `;`, given
# to the server only). Loopback only; every run is bounded by its count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
rounds=${ROUNDS:-3}
requests=${REQUESTS:-500000}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
runtime=${RUNTIME:-portable}
variants=${VARIANTS:-"default|target/release/azq|"}
[[ -n "${VARIANTS:-}" ]] || cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
queue=azqload-0
events=page-faults
for call in mprotect brk mmap munmap madvise; do
  events+=",syscalls:sys_enter_$call"
done

# start VARIANT: a fresh one-shard server of that variant; sets server_pid and port.
start() {
  local binary environment
  IFS='|' read -r _ binary environment <<< "$1"
  local -a assignments=()
  IFS=';' read -r -a assignments <<< "$environment"
  env "${assignments[@]}" taskset -c "$server_cpu" "$binary" --queuePort 0 --shards 1 \
    --cpus "$server_cpu" --inMemoryPersistence --runtime "$runtime" > "$work/azq.out" 2>&1 &
  server_pid=$!
  port=$(azq_ready_port "$work/azq.out" 20)
}

# loadgen ARGUMENTS...: azq-loadgen on the client CPU against the server, one queue, 1 KiB.
loadgen() {
  taskset -c "$client_cpu" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpu" \
    --connections 32 --queues 1 --warmup 0s --max-error-rate 0 --quiet "$@" > "$work/loadgen.out"
}

rss_mib() {
  awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$server_pid/status"
}

# drain: Get(32) + Delete until the queue is empty.
drain() {
  local left
  for _ in $(seq 1 20); do
    left=$(python3 scripts/queue-admin.py "$port" "$queue" count)
    [[ $left == 0 ]] && return 0
    loadgen --scenario get-delete --batch 32 --requests $((left / 32 + 32))
  done
  echo "the queue did not drain ($left left)" >&2
  return 1
}

if [[ -n ${MEMORY:-} ]]; then
  printf '%-14s %8s | %6s %11s %11s | %9s %11s\n' variant "1M: RSS" "200k" \
    "get+delete" "200k again" "clear" "200k again"
  for variant in $variants; do
    start "$variant"
    loadgen --scenario put --requests "${MILLION:-1000000}"
    million=$(rss_mib)
    stop_server
    start "$variant"
    loadgen --scenario put --requests 200000
    first=$(rss_mib)
    drain
    drained=$(rss_mib)
    loadgen --scenario put --requests 200000
    again=$(rss_mib)
    python3 scripts/queue-admin.py "$port" "$queue" clear > /dev/null
    # The shard frees a cleared queue's messages in steps after the answer (about 0.1 s per
    # million): give it that time.
    sleep 1
    cleared=$(rss_mib)
    loadgen --scenario put --requests 200000
    cleared_again=$(rss_mib)
    stop_server
    printf '%-14s %8s | %6s %11s %11s | %9s %11s   (MiB)\n' "${variant%%|*}" "$million" \
      "$first" "$drained" "$again" "$cleared" "$cleared_again"
  done
  exit 0
fi

printf '%-14s %5s %9s %8s %11s %10s %9s %9s %9s %9s %9s %8s\n' variant round Puts faults \
  "faults/Put" "cpu_us/Put" mprotect brk mmap munmap madvise RSS_MiB
for round in $(seq 1 "$rounds"); do
  for variant in $variants; do
    start "$variant"
    read -r faults_before ticks_before < <(awk '{print $10, $14 + $15}' "/proc/$server_pid/stat")
    perf stat -x, -e "$events" -p "$server_pid" -o "$work/perf.csv" &
    perf_pid=$!
    if [[ -n ${PROFILE:-} ]]; then
      perf record -q -e cpu-clock -g -p "$server_pid" -o "$work/perf.data" 2> /dev/null &
      record_pid=$!
    fi
    sleep 0.3
    loadgen --scenario put --requests "$requests"
    read -r faults_after ticks_after < <(awk '{print $10, $14 + $15}' "/proc/$server_pid/stat")
    rss=$(rss_mib)
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    if [[ -n ${PROFILE:-} ]]; then
      kill -INT "$record_pid"
      wait "$record_pid" || true
    fi
    stop_server
    answered=$(grep -o 'of [0-9,]* requests' "$work/loadgen.out" | tr -dc '0-9')
    python3 - "$work/perf.csv" "$answered" "$((faults_after - faults_before))" \
      "$((ticks_after - ticks_before))" "$(getconf CLK_TCK)" "${variant%%|*}" "$round" \
      "$rss" <<'EOF'
import sys
path, answered, faults, ticks, hertz, label, round_, rss = sys.argv[1:]
answered = int(answered)
counts = {}
for line in open(path):
    fields = line.strip().split(",")
    if len(fields) > 2 and fields[0].replace(".", "").isdigit():
        counts[fields[2].replace("syscalls:sys_enter_", "")] = int(float(fields[0]))
cpu_us = int(ticks) / int(hertz) * 1e6 / answered
print(f"{label:<14} {round_:>5} {answered:>9} {int(faults):>8} {int(faults) / answered:>11.4f} "
      f"{cpu_us:>10.2f} " + " ".join(f"{counts.get(c, 0):>9}"
      for c in ("mprotect", "brk", "mmap", "munmap", "madvise")) + f" {rss:>8}")
EOF
    if [[ -n ${PROFILE:-} ]]; then
      perf report -i "$work/perf.data" --children --sort symbol --stdio 2> /dev/null |
        awk -v label="${variant%%|*}" '
          /^ +[0-9.]+% +[0-9.]+%/ {
            for (name in want) if (index($0, " " name) && !(name in seen)) {
              seen[name] = $1
            }
          }
          BEGIN {
            split("asm_exc_page_fault sysmalloc do_mprotect_pkey clear_page_erms " \
              "__x64_sys_mprotect _int_malloc", names, " ")
            for (i in names) want[names[i]] = 1
          }
          END {
            line = "    profile " label " (children):"
            for (name in want) line = line " " name " " (name in seen ? seen[name] : "-")
            print line
          }'
    fi
  done
done

#!/usr/bin/env bash
# Instructions the azq process executes per request, user space only, counted by callgrind
# (deterministic: independent of machine load). For each scenario azq runs under callgrind on one
# shard while azq-loadgen sends N and then 2N operations to a fresh server; the difference of the
# two totals divided by N cancels start-up and shutdown.
#
#   scripts/instructions-per-request.sh [N]     default N=4000; SCENARIOS="put peek" picks some
#   AZQ_BIN=path/to/azq scripts/instructions-per-request.sh   counts that server binary instead of
#                                                  this tree's (an A/B against an older build)
#   RUNTIME=portable scripts/instructions-per-request.sh      the server's backend (default: auto)
#
# One keep-alive connection (CONNECTIONS), no pipelining: every response is written on its own
# (the worst case; pipelined responses share writes). One shard only: under valgrind, which runs
# one thread at a time, a second shard never finishes joining the shard mesh. Loopback only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
count=${1:-4000}
azq_bin=${AZQ_BIN:-target/release/azq}
[[ -n "${AZQ_BIN:-}" ]] || cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Total instructions of one azq process serving `requests` operations of `scenario`.
total_instructions() {
  local scenario=$1 requests=$2 preload_count=$3
  valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    "$azq_bin" --queuePort 0 --shards 1 --silent --inMemoryPersistence \
    --runtime "${RUNTIME:-auto}" > "$work/azq.out" 2> "$work/valgrind.err" &
  local azq_pid=$! port
  port=$(azq_ready_port "$work/azq.out" 60) || { cat "$work/valgrind.err" >&2; exit 1; }
  local preload=()
  [[ "$scenario" == put ]] || preload=(--preload "$preload_count")
  taskset -c 1 target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --connections "${CONNECTIONS:-1}" --queues 1 --scenario "$scenario" "${preload[@]}" \
    --requests "$requests" --warmup 0s --max-error-rate 0 --quiet > "$work/loadgen.out"
  kill -TERM "$azq_pid"
  wait "$azq_pid"
  grep -o 'Collected : [0-9]*' "$work/valgrind.err" | grep -o '[0-9]*$'
}

printf '%-12s %14s\n' scenario "instructions/op"
for scenario in ${SCENARIOS:-put peek get-delete}; do
  # The same preload in both runs (enough for 2N gets), so its puts cancel out.
  single=$(total_instructions "$scenario" "$count" "$((count * 4))")
  double=$(total_instructions "$scenario" "$((count * 2))" "$((count * 4))")
  # get-delete: an operation is one Get (of one message) plus its Delete.
  printf '%-12s %14d\n' "$scenario" "$(( (double - single) / count ))"
done

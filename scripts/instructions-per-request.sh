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
# Columns: all of azq's user-space instructions, which include glommio's reactor (its polling and
# timer work per request depends on timing under valgrind, so this column moves by thousands
# between repeats of one binary); azq's own request path (the inclusive cost of parsing, planning
# with authentication, executing and answering: repeats of one binary agree within a few
# instructions, so this is the column to compare builds by);
# and the SHA-256 compression within it, which valgrind runs in software (it hides SHA-NI from
# CPUID), so the real machine pays far less of it.
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
  local total
  total=$(grep -o 'Collected : [0-9]*' "$work/valgrind.err" | grep -o '[0-9]*$')
  # Inclusive counts: a function's own line is the largest naming it (the others are its
  # inlined parts, and calls into it). Run from the work directory: in the repository
  # callgrind_annotate shortens the source paths and lists some functions differently.
  (cd "$work" && callgrind_annotate --inclusive=yes callgrind.out 2>/dev/null) |
    awk -v total="$total" '
    / => / { next }
    { count = $1; gsub(",", "", count); key = "" }
    /Parser::parse \[/ { key = "parse" }
    /Service>::plan_on \[/ { key = "plan" }
    /execute::execute::\{\{closure\}\} \[/ { key = "execute" }
    /Service>::respond \[/ { key = "respond" }
    /sha2::sha256::compress256 \[/ { key = "sha" }
    key != "" && count + 0 > best[key] + 0 { best[key] = count }
    END {
      path = best["parse"] + best["plan"] + best["execute"] + best["respond"]
      printf "%d %d %d\n", total, path, best["sha"] + 0
    }'
}

printf '%-12s %16s %16s %16s\n' scenario "instructions/op" "request path/op" "SHA-256 within"
for scenario in ${SCENARIOS:-put peek get-delete}; do
  # The same preload in both runs (enough for 2N gets), so its puts cancel out.
  preload=$((count * 4))
  read -r single_total single_path single_sha \
    < <(total_instructions "$scenario" "$count" "$preload")
  read -r double_total double_path double_sha \
    < <(total_instructions "$scenario" "$((count * 2))" "$preload")
  # get-delete: an operation is one Get (of one message) plus its Delete.
  printf '%-12s %16d %16d %16d\n' "$scenario" "$(( (double_total - single_total) / count ))" \
    "$(( (double_path - single_path) / count ))" "$(( (double_sha - single_sha) / count ))"
done

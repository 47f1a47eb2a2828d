#!/usr/bin/env bash
# Two azq binaries side by side: closed-loop Put (1 KiB, SharedKey, CONNECTIONS keep-alive
# connections) against a fresh one-shard server on CPU 0, azq-loadgen on CPU 1, the binaries
# taking turns for ROUNDS rounds so that drift in the machine's speed hits both alike. Prints
# every round and the median of each. For "did this change make the hot path slower?": build
# the old commit elsewhere (e.g. `git worktree add /tmp/old COMMIT && cargo build --release`
# there) and pass both binaries.
#
#   scripts/bench-ab.sh OLD_AZQ NEW_AZQ [EXTRA AZQ ARGS...]
#   ROUNDS [5]  DURATION [5s]  WARMUP [2s]  CONNECTIONS [32]
#   RUNTIME [portable]: the backend both binaries run on, named (not `auto`, which was io_uring
#   before issue 27 and is the portable backend since: an old and a new build would differ)
#   SCENARIO [put]: any azq-loadgen --scenario; get-delete preloads 1,000,000 messages
#   PERSISTENCE [memory]: disk keeps each run's data in a fresh directory (--durability fsync,
#   the default: group commit's cost included)
#
# Loopback only; every run is bounded by DURATION (plus preloading).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
[[ $# -ge 2 ]] || { echo "usage: scripts/bench-ab.sh OLD_AZQ NEW_AZQ [AZQ ARGS...]" >&2; exit 2; }
binaries=("$1" "$2")
shift 2
rounds=${ROUNDS:-5}
duration=${DURATION:-5s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-32}
runtime=${RUNTIME:-portable}
scenario=${SCENARIO:-put}
persistence=${PERSISTENCE:-memory}
[[ $persistence == memory || $persistence == disk ]] || { echo "PERSISTENCE must be memory or disk" >&2; exit 2; }
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
azq_pid=""
trap '[[ -n "$azq_pid" ]] && kill -KILL "$azq_pid" 2>/dev/null; rm -rf "$work"' EXIT

loadgen_args=(--scenario "$scenario")
[[ $scenario == get-delete ]] && loadgen_args+=(--batch 1 --preload 1000000 --queues 1)

# measure BINARY: one run's requests/s (every operation of the scenario) on stdout.
measure() {
  local storage=(--inMemoryPersistence)
  if [[ $persistence == disk ]]; then
    rm -rf "$work/data"
    mkdir "$work/data"
    storage=(--location "$work/data")
  fi
  taskset -c 0 "$1" --queuePort 0 --shards 1 --cpus 0 --silent "${storage[@]}" \
    --runtime "$runtime" "${extra_args[@]}" > "$work/azq.out" &
  azq_pid=$!
  local port
  port=$(azq_ready_port "$work/azq.out") || exit 1
  taskset -c 1 target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --connections "$connections" --duration "$duration" --warmup "$warmup" \
    --json "$work/run.json" --quiet "${loadgen_args[@]}" > /dev/null
  kill -TERM "$azq_pid"
  wait "$azq_pid" || true
  azq_pid=""
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(round(sum(s["throughput_per_s"] for s in r["ops"].values())))' "$work/run.json"
}

extra_args=("$@")
results=("" "")
for round in $(seq 1 "$rounds"); do
  line="round $round:"
  for which in 0 1; do
    rate=$(measure "${binaries[which]}")
    results[which]="${results[which]} $rate"
    line="$line ${binaries[which]} $rate/s"
  done
  echo "$line"
done
for which in 0 1; do
  # shellcheck disable=SC2086 # the rates are words on purpose
  median=$(printf '%s\n' ${results[which]} | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  echo "median ${binaries[which]}: $median requests/s over $rounds rounds (${results[which]# })"
done

#!/usr/bin/env bash
# How Put scales with shards, for machines with more cores than ours (issue 27): for each shard
# count S of SHARDS, a fresh azq with S shards pinned to CPUs 0..S-1, and azq-loadgen on the next
# S × LOADGEN_CPUS_PER_SHARD CPUs, CONNECTIONS_PER_SHARD × S connections spread over
# QUEUES_PER_SHARD × S queues (the queues hash onto the shards), closed-loop Put of 1 KiB with
# SharedKey, DURATION after WARMUP. Prints puts/s, puts/s per shard, and the scaling efficiency:
# puts/s ÷ (S × the rate of the smallest shard count run).
#
#   scripts/bench-scale.sh
#   SHARDS [1 2 4 8 ... while the machine has the CPUs]  LOADGEN_CPUS_PER_SHARD [1]
#   CONNECTIONS_PER_SHARD [32]  QUEUES_PER_SHARD [16]  DURATION [5s]  WARMUP [1s]
#   RUNTIME [io_uring]  OUT [target/bench-scale]
#
# A shard count the machine has too few CPUs for runs only when SHARDS names it, with its CPUs
# wrapped around (server and load generator then share cores) and its line marked
# OVERSUBSCRIBED: a check that the script runs, not a figure. Loopback only; every run is
# bounded by DURATION.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
cpus_total=$(nproc)
loadgen_per_shard=${LOADGEN_CPUS_PER_SHARD:-1}
connections_per_shard=${CONNECTIONS_PER_SHARD:-32}
queues_per_shard=${QUEUES_PER_SHARD:-16}
duration=${DURATION:-5s}
warmup=${WARMUP:-1s}
runtime=${RUNTIME:-io_uring}
out=${OUT:-target/bench-scale}
if [[ -n ${SHARDS:-} ]]; then
  shard_counts=$SHARDS
else
  shard_counts=""
  for ((shards = 1; shards * (1 + loadgen_per_shard) <= cpus_total; shards *= 2)); do
    shard_counts="$shard_counts $shards"
  done
  [[ -n $shard_counts ]] || shard_counts=1
fi
mkdir -p "$out"
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

# cpu_list FIRST COUNT: COUNT CPUs from FIRST on, wrapped around the machine's CPUs.
cpu_list() {
  local first=$1 count=$2 list="" index
  for ((index = first; index < first + count; index++)); do
    list="$list${list:+,}$((index % cpus_total))"
  done
  echo "$list"
}

printf '%-7s %12s %16s %11s  %s\n' shards "puts/s" "puts/s per shard" efficiency notes
base_rate=""
base_shards=""
for shards in $shard_counts; do
  server_cpus=$(cpu_list 0 "$shards")
  client_cpus=$(cpu_list "$shards" "$((shards * loadgen_per_shard))")
  notes="azq on CPUs $server_cpus, azq-loadgen on $client_cpus"
  if ((shards * (1 + loadgen_per_shard) > cpus_total)); then
    notes="OVERSUBSCRIBED ($cpus_total CPUs): not a figure; $notes"
  fi
  taskset -c "$server_cpus" target/release/azq --queuePort 0 --shards "$shards" \
    --cpus "$server_cpus" --silent --inMemoryPersistence --runtime "$runtime" > "$work/azq.out" &
  server_pid=$!
  port=$(azq_ready_port "$work/azq.out") || exit 1
  taskset -c "$client_cpus" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpus" \
    --connections "$((shards * connections_per_shard))" --queues "$((shards * queues_per_shard))" \
    --scenario put --duration "$duration" --warmup "$warmup" --max-error-rate 0 \
    --json "$out/shards-$shards.json" --quiet > "$out/shards-$shards.txt" 2>&1 ||
    echo "azq-loadgen failed at $shards shards: see $out/shards-$shards.txt" >&2
  stop_server
  rate=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["ops"]["put"]["throughput_per_s"]))' \
    "$out/shards-$shards.json" 2>/dev/null || echo 0)
  if [[ -z $base_rate ]]; then
    base_rate=$rate
    base_shards=$shards
  fi
  python3 - "$shards" "$rate" "$base_rate" "$base_shards" "$notes" <<'PY'
import sys
shards, rate, base_rate, base_shards = (int(value) for value in sys.argv[1:5])
notes = sys.argv[5]
per_shard = rate / shards
efficiency = per_shard / (base_rate / base_shards) if base_rate else 0.0
print(f"{shards:<7} {rate:>12,} {per_shard:>16,.0f} {efficiency:>11.0%}  {notes}")
PY
done

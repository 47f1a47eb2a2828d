#!/usr/bin/env bash
# azq-loadgen's worker fleet against queueing theory (issue 42), bounded: every theory check
# of loadgen/tests/against_azq.rs (M/D/2 against Cosmetatos; M/M/2 at ρ ≈ 0.3, 0.7 and 0.85;
# log-normal M/G/2 against Allen–Cunneen), ignored by the gate's debug build, one after
# another on release binaries, each a real azq and azq-loadgen on loopback. Each must have its
# 95% interval within ±7% of its mean wait and the mean within 10% of the prediction; no
# retries. Then the issue's table (2 workers, exp:mean=20ms, 1 ms backoff, at 10/s, 40/s and
# 69/s) re-measured, printed as the report's theory lines: what docs/CAPACITY.md quotes.
#
# Usage: scripts/theory-check.sh [tests|table|all]   (default all; about 17 + 2 minutes)
# Environment: SEED, the table runs' --seed (default 1, the loadgen's default); TABLE_CASES,
# the table's RATE:SECONDS runs (default "10:25 40:25 69:60", the issue's).
set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$repo_root/scripts/bench-lib.sh"
what=${1:-all}
cd "$repo_root"
cargo build --release -p azq -p azq-loadgen

if [[ $what == tests || $what == all ]]; then
  # The theory checks are ignored in the gate's debug build.
  timeout 1800 cargo test --release -p azq-loadgen --test against_azq -- \
    --ignored --test-threads 1 workers_agree_with_queueing_theory theory_
fi

if [[ $what == table || $what == all ]]; then
  work=$(mktemp -d)
  trap 'stop_server; rm -rf "$work"' EXIT
  target/release/azq --queuePort 0 --shards 1 --inMemoryPersistence --silent \
    >"$work/azq.out" 2>&1 &
  server_pid=$!
  port=$(azq_ready_port "$work/azq.out")
  for case in ${TABLE_CASES:-10:25 40:25 69:60}; do
    rate=${case%%:*}
    duration=${case##*:}s
    echo "== $rate/s for $duration"
    timeout $(( ${case##*:} + 120 )) target/release/azq-loadgen \
      --endpoint "http://127.0.0.1:$port/devstoreaccount1" --scenario workers \
      --consumers 2 --producers 1 --rate "$rate" --arrival poisson \
      --work-time exp:mean=20ms --batch 1 --poll-backoff 1ms..1ms --message-bytes 256 \
      --queues 1 --warmup 2s --duration "$duration" --seed "${SEED:-1}" \
      --queue-prefix "table$rate" >"$work/report.txt" 2>&1 ||
      { cat "$work/report.txt"; exit 1; }
    grep -A5 '  theory (' "$work/report.txt"
  done
fi

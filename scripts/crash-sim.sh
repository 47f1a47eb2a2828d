#!/usr/bin/env bash
# A long run of the crash simulator (src/storage/tests.rs): seeds FROM..TO of
# `every_acknowledged_change_survives_every_crash`, in a release build, in chunks so a failure
# names its chunk early. `cargo test` runs seeds 0..10000; this runs others. Each chunk prints
# what the simulated disk did and what the log's flushes reached ("log writes:": flushes by
# padding length, those followed by another flush, record headers split across a block
# boundary), and fails if flushes ending 1, 2 and 3 bytes before a block boundary, each followed
# by another, and a split header were not all reached.
#
#   scripts/crash-sim.sh [FROM] [TO] [CHUNK]     defaults: 10000 1010000 100000
#
# A failing seed reruns alone: AZQ_SIM_SEED=N AZQ_SIM_TRACE=1 cargo test --lib every_acknowledged
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

from=${1:-10000}
to=${2:-1010000}
chunk=${3:-100000}

cargo test --release --lib --no-run
start=$from
while ((start < to)); do
  end=$((start + chunk < to ? start + chunk : to))
  echo "==> seeds $start..$end"
  AZQ_SIM_SEEDS="$start..$end" cargo test --release --lib every_acknowledged -- --nocapture \
    2>&1 | grep -E "seeds:|log writes:|panicked|seed [0-9]+|test result"
  start=$end
done

#!/usr/bin/env bash
# Power-loss test: azq on faultfs (tests/faultfs, a FUSE file system that loses what was not
# synced when told to), cycles of mixed load from several clients, kill -9, a power cut,
# restart, and a check of every acknowledged change (scripts/powerloss.py). On both backends,
# every other cycle with fallocate and O_DIRECT refused so that both backends' fallbacks run;
# again on both with `--text-memory 0` (every text on disk only once written, read back for
# the load's Gets: the run fails unless at least half the texts they returned were); then
# `--durability write` on both as the control, which must show loss (a checker that sees
# nothing there cannot see anything).
#
# Message texts are sized so that the log's flushes end at every offset within a 4 KiB block,
# often 1 to 3 bytes before its end: a reader once lost every record after such a flush at an
# ordinary restart (631e836), and the sizes this test drew then hardly ever made one. After
# each cut, before the restart, the script walks the log segments left with a reader of its
# own and counts the flushes' padding crossed (by length) and record headers split across a
# block; a run (the control too) fails unless padding of 1, 2 and 3 bytes and a split header
# were all there for a restart to read. The counts are in each run's last lines.
#
#   scripts/powerloss.sh [CYCLES] [CONTROL_CYCLES]   default 200 per backend and 10 per control
#
# scripts/test.sh runs it briefly (4 and 2). Needs /dev/fuse and fusermount3 (fuse3): installed
# with apt-get when this runs as root, else one SKIPPED line. POWERLOSS_SEED fixes the seed;
# AZQ_BIN and FAULTFS_BIN run given binaries instead of building (e.g. copies, for a long run
# while the tree changes). The data and logs of a failed run are kept (the path is printed); a
# passing run removes them.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
cycles=${1:-200}
control_cycles=${2:-10}

source scripts/bench-lib.sh
if ! why=$(ensure_fuse3); then
  echo "SKIPPED the power-loss test: $why"
  exit 0
fi
[[ -n $why ]] && echo "$why"

# Each built on its own, as scripts/test.sh and soak.sh build azq: built together, the two
# packages' features would unify (fuser's zerocopy derive) and azq would be built a second time.
if [[ -z "${AZQ_BIN:-}" ]]; then
  cargo build --release --quiet --bin azq
fi
if [[ -z "${FAULTFS_BIN:-}" ]]; then
  cargo build --release --quiet -p faultfs
fi
azq=${AZQ_BIN:-$PWD/target/release/azq}
faultfs=${FAULTFS_BIN:-$PWD/target/release/faultfs}
work=$(mktemp -d "${TMPDIR:-/tmp}/azq-powerloss.XXXXXX")
seed=${POWERLOSS_SEED:-$RANDOM$RANDOM}

# io_uring where it starts (a start that neither serves nor says why within 30 s fails: a 1 s
# probe once took a slow start for a refusal and skipped io_uring).
if ! select_backends "$azq"; then
  echo "power-loss test FAILED: the io_uring probe"
  exit 1
fi

failed=()
child=
# Stopped, it stops the run in progress, which kills its azq and unmounts faultfs.
trap 'if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 143' \
  TERM INT
run() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  python3 scripts/powerloss.py --azq "$azq" --faultfs "$faultfs" --seed "$seed" \
    --work "$work/$name" "$@" &
  child=$!
  if ! wait "$child"; then
    failed+=("$name")
  fi
  child=
}
for backend in "${backends[@]}"; do
  run "$backend" --backend "$backend" --cycles "$cycles"
done
# Texts on disk only: each leaves memory once written, so the load's Gets read texts back
# from the log while the power goes, and snapshots name them rather than copy them.
for backend in "${backends[@]}"; do
  run "$backend-text-memory-0" --backend "$backend" --cycles "$cycles" --text-memory 0
done
for backend in "${backends[@]}"; do
  run "$backend-write" --backend "$backend" --cycles "$control_cycles" --durability write \
    --expect-loss
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "power-loss test FAILED: ${failed[*]} (seed $seed; data and logs kept in $work)"
  exit 1
fi
rm -rf "$work"
echo "power-loss test passed: ${backends[*]}, $cycles cycles each and as many with" \
  "--text-memory 0, control $control_cycles each (seed $seed)"

#!/usr/bin/env bash
# Replaces fuzz/seeds/TARGET with a small covering subset of fuzz/corpus/TARGET:
# `cargo fuzz cmin` (edges only, no hit counters), then a greedy maximum-coverage pick of at
# most FILES_MAX inputs (scripts/select_seeds.py). Run after a long fuzz run; see README.md.
#
#   scripts/make_seeds.sh TARGET [FILES_MAX]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=$1
files_max=${2:-50}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/empty"
cp corpus/"$target"/* "$work/corpus/"
RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz cmin "$target" "$work/corpus" -- -use_counters=0 >"$work/cmin.log" 2>&1
binary=target/x86_64-unknown-linux-gnu/release/$target
nice -n 19 "$binary" -merge=1 -use_counters=0 -merge_control_file="$work/control" \
  "$work/empty" "$work/corpus" >"$work/merge.log" 2>&1
python3 scripts/select_seeds.py "$work/control" "$files_max" >"$work/chosen"
rm -rf seeds/"$target"
mkdir -p seeds/"$target"
xargs -a "$work/chosen" cp -t seeds/"$target"/
# The writer-mode seeds of storage_format reach log boundaries on purpose (padding of 1 to 3
# bytes, split headers) that a coverage pick may drop: written again, the same files.
if [ "$target" = storage_format ]; then
  python3 scripts/writer_seeds.py
fi
echo "$target: cmin kept $(ls "$work/corpus" | wc -l) of $(ls corpus/"$target" | wc -l); seeds: $(ls seeds/"$target" | wc -l) files, $(du -sb seeds/"$target" | cut -f1) bytes"

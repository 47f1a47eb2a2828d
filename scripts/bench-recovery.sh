#!/usr/bin/env bash
# Recovery of a large queue, and a check that it is all there: MESSAGES messages of
# MESSAGE_BYTES loaded into one queue of a one-shard azq (with --durability write: the preload
# pipelines on its connections, whose answers would otherwise each wait for a sync; the files
# are the same), stopped with SIGTERM, then started ROUNDS times on the same data, each start
# timed from launch to the port answering (with COLD=1, after the page cache is dropped: the
# files come from the disk). Every start must say it recovered exactly MESSAGES
# messages and print nothing about cut, damaged or kept files, or the run fails: a recovery time
# measured over a log that lost records measures nothing (issue 39).
#
#   scripts/bench-recovery.sh
#
# Environment (defaults in brackets): MESSAGES [1000000], MESSAGE_BYTES [1024], ROUNDS [3],
# CONNECTIONS [64], SERVER_CPU [0] (or SERVER_CPUS, a list such as 0,1: a shard on each, each
# shard recovered on a thread of its own), QUEUES [1] (MESSAGES spread evenly over them; a
# multiple of it), CLIENT_CPU [1], COLD [0] (1: drop the page cache before each start; needs
# root), AZQ_BIN and AZQ_LOADGEN_BIN (built when unset), OUT_DIR [target/bench-recovery]. The
# data directory is removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh

messages=${MESSAGES:-1000000}
message_bytes=${MESSAGE_BYTES:-1024}
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-64}
server_cpus=${SERVER_CPUS:-${SERVER_CPU:-0}}
shards=$(tr ',' '\n' <<<"$server_cpus" | wc -l)
queues=${QUEUES:-1}
if (( messages % queues != 0 )); then
  echo "MESSAGES ($messages) must be a multiple of QUEUES ($queues)" >&2
  exit 2
fi
client_cpu=${CLIENT_CPU:-1}
cold=${COLD:-0}
out_dir=${OUT_DIR:-target/bench-recovery}
if [[ -z "${AZQ_BIN:-}" || -z "${AZQ_LOADGEN_BIN:-}" ]]; then
  cargo build --release --quiet -p azq -p azq-loadgen --bins
fi
azq=${AZQ_BIN:-target/release/azq}
loadgen=${AZQ_LOADGEN_BIN:-target/release/azq-loadgen}
mkdir -p "$out_dir"
data=$(mktemp -d "${TMPDIR:-/tmp}/azq-recovery.XXXXXX")
server_pid=
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi
  rm -rf "$data"
}
trap cleanup EXIT

port=$(free_port)
taskset -c "$server_cpus" "$azq" --queueHost 127.0.0.1 --queuePort "$port" --shards "$shards" \
  --cpus "$server_cpus" --silent --location "$data" --durability write \
  >"$out_dir/load.out" 2>&1 &
server_pid=$!
wait_for_port "$port"
"$loadgen" --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus "$client_cpu" \
  --connections "$connections" --scenario peek --preload "$(( messages / queues ))" --queues "$queues" \
  --queue-prefix recovery --message-bytes "$message_bytes" --duration 1s --warmup 0s --quiet \
  >"$out_dir/load.txt"
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=

failed=0
for round in $(seq 1 "$rounds"); do
  port=$(free_port)
  if [[ $cold == 1 ]]; then
    sync
    echo 3 >/proc/sys/vm/drop_caches
  fi
  started=$(date +%s%N)
  taskset -c "$server_cpus" "$azq" --queueHost 127.0.0.1 --queuePort "$port" --shards "$shards" \
    --cpus "$server_cpus" --location "$data" >"$out_dir/start-$round.out" 2>&1 &
  server_pid=$!
  wait_for_port "$port"
  ready_ms=$(( ($(date +%s%N) - started) / 1000000 ))
  recovered=$(grep -m1 '^azq: recovered' "$out_dir/start-$round.out" || true)
  echo "start $round: ready after $ready_ms ms; ${recovered#azq: }"
  if [[ $recovered != "azq: recovered $messages messages in $queues queues"* ]]; then
    echo "FAILED: start $round did not recover $messages messages" >&2
    failed=1
  fi
  if grep -E 'cut short|damaged|kept in|removed' "$out_dir/start-$round.out" >&2; then
    echo "FAILED: start $round cut or removed something (above)" >&2
    failed=1
  fi
  kill -TERM "$server_pid"
  wait "$server_pid"
  server_pid=
done
echo "on disk: $(du -sb "$data/__azq__" | cut -f1) bytes; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $azq (tree at $(git rev-parse --short HEAD))"
exit "$failed"

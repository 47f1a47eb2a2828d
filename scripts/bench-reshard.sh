#!/usr/bin/env bash
# A change of shard count over a backlog larger than --max-memory: MESSAGES messages of
# MESSAGE_BYTES loaded into QUEUES queues of a one-shard azq (with --durability write, as
# scripts/bench-recovery.sh), stopped with SIGTERM; then, for each variant, a copy of those
# files started on two shards (--shards 2 --cpus 0,1) with --max-memory MAX_MEMORY (below the
# texts), timed from launch to the port answering (or to its exit: a refusal, printed). For a
# start that serves: its peak memory (VmHWM, recovery's included), its memory once started
# (VmRSS), the texts it keeps on disk only (azq_texts_on_disk), and the messages it says it
# recovered, which must be MESSAGES (else the run fails).
#
#   VARIANTS="base|/tmp/azq-base new|target/release/azq" scripts/bench-reshard.sh
#
# Environment (defaults in brackets): MESSAGES [2000000], MESSAGE_BYTES [256], QUEUES [1] (a
# divisor of MESSAGES), MAX_MEMORY [400M], EXTRA_FLAGS [] (for every variant's start),
# VARIANTS ["default|target/release/azq"], the first variant loads the files; AZQ_LOADGEN_BIN
# (built when unset), OUT_DIR [target/bench-reshard]. The data directories are removed at the
# end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh

messages=${MESSAGES:-2000000}
message_bytes=${MESSAGE_BYTES:-256}
queues=${QUEUES:-1}
if (( messages % queues != 0 )); then
  echo "MESSAGES ($messages) must be a multiple of QUEUES ($queues)" >&2
  exit 2
fi
max_memory=${MAX_MEMORY:-400M}
read -r -a extra <<<"${EXTRA_FLAGS:-}"
variants=${VARIANTS:-"default|target/release/azq"}
out_dir=${OUT_DIR:-target/bench-reshard}
[[ -n "${VARIANTS:-}" ]] || cargo build --release --quiet --bin azq
if [[ -z "${AZQ_LOADGEN_BIN:-}" ]]; then
  cargo build --release --quiet -p azq-loadgen --bins
fi
loadgen=${AZQ_LOADGEN_BIN:-target/release/azq-loadgen}
mkdir -p "$out_dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/azq-reshard.XXXXXX")
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

read -r -a first <<<"$variants"
loader=${first[0]#*|}
port=$(free_port)
taskset -c 0 "$loader" --queueHost 127.0.0.1 --queuePort "$port" --shards 1 --cpus 0 --silent \
  --location "$work/data" --durability write >"$out_dir/load.out" 2>&1 &
server_pid=$!
wait_for_port "$port"
"$loadgen" --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus 1 --connections 64 \
  --scenario peek --preload "$(( messages / queues ))" --queues "$queues" --queue-prefix reshard \
  --message-bytes "$message_bytes" --duration 1s --warmup 0s --quiet >"$out_dir/load.txt"
stop_server
echo "loaded $messages messages of $message_bytes bytes in $queues queue(s) on one shard:" \
  "$(du -sb "$work/data/__azq__" | cut -f1) bytes on disk"

failed=0
for variant in $variants; do
  name=${variant%%|*}
  azq=${variant#*|}
  rm -rf "$work/copy"
  cp -a "$work/data" "$work/copy"
  sync
  port=$(free_port)
  started=$(date +%s%N)
  "$azq" --queueHost 127.0.0.1 --queuePort "$port" --shards 2 --cpus 0,1 --location "$work/copy" \
    --max-memory "$max_memory" "${extra[@]}" >"$out_dir/$name.out" 2>&1 &
  server_pid=$!
  ready=0
  for _ in $(seq 1 6000); do
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ready=1; break; fi
    sleep 0.1
  done
  ms=$(( ($(date +%s%N) - started) / 1000000 ))
  if [[ $ready == 0 ]]; then
    wait "$server_pid" || true
    server_pid=
    echo "$name: no start after $ms ms: $(grep -m1 -v '^$' "$out_dir/$name.out" | cut -c1-300)"
    continue
  fi
  peak=$(awk '/VmHWM/ { print $2 }' "/proc/$server_pid/status")
  rss=$(awk '/VmRSS/ { print $2 }' "/proc/$server_pid/status")
  on_disk=$(azq_metric "$port" azq_texts_on_disk)
  recovered=$(grep -m1 '^azq: recovered' "$out_dir/$name.out" || true)
  echo "$name: ready after $ms ms; peak $(( peak / 1024 )) MiB, resident $(( rss / 1024 )) MiB;" \
    "$on_disk texts on disk only; ${recovered#azq: }"
  if [[ $recovered != "azq: recovered $messages messages in $queues queues"* ]]; then
    echo "FAILED: $name did not recover $messages messages" >&2
    failed=1
  fi
  stop_server
done
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; tree at $(git rev-parse --short HEAD)"
exit "$failed"

#!/usr/bin/env bash
# What a deep backlog whose texts are on disk only costs in memory, builds side by side in
# alternating rounds (issue 40's "server RSS once filled"): per run, a fresh durable one-shard
# server with `--text-memory 0` on CPU 0, azq-loadgen on CPU 1 putting MESSAGES texts of
# MESSAGE_BYTES into one queue; once every text is on disk only (`azq_texts_on_disk` equals
# `azq_messages`), 5 s more, then VmRSS. Prints, per run, (filled - empty RSS) / messages.
#
#   scripts/bench-backlog-memory.sh             the default build, ROUNDS [2], MESSAGES [2000000]
#   VARIANTS="base|/tmp/azq-base new|target/release/azq" scripts/bench-backlog-memory.sh
#
# A variant is `label|binary`. MESSAGE_BYTES [256]. Loopback only; every run is bounded by its
# count; the data directories are temporary and removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
rounds=${ROUNDS:-2}
messages=${MESSAGES:-2000000}
message_bytes=${MESSAGE_BYTES:-256}
variants=${VARIANTS:-"default|target/release/azq"}
[[ -n "${VARIANTS:-}" ]] || cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

for round in $(seq "$rounds"); do
  for variant in $variants; do
    IFS='|' read -r label binary <<<"$variant"
    port=$(free_port)
    rm -rf "$work/data"
    taskset -c 0 "$binary" --queueHost 127.0.0.1 --queuePort "$port" --shards 1 --cpus 0 \
      --silent --location "$work/data" --text-memory 0 >/dev/null 2>"$work/azq.err" &
    server_pid=$!
    wait_for_port "$port"
    empty=$(rss_bytes)
    timeout --kill-after=10 900 target/release/azq-loadgen \
      --endpoint "http://127.0.0.1:$port/devstoreaccount1" --cpus 1 \
      --message-bytes "$message_bytes" --quiet --scenario put --connections 16 --pipeline 8 \
      --queue-prefix deep --requests "$messages" --warmup 0s >/dev/null
    for _ in $(seq 150); do
      stored=$(azq_metric "$port" azq_messages)
      (($(azq_metric "$port" azq_texts_on_disk) >= stored)) && break
      sleep 2
    done
    sleep 5
    filled=$(rss_bytes)
    stored=$(azq_metric "$port" azq_messages)
    on_disk=$(azq_metric "$port" azq_texts_on_disk)
    printf '%s round %d: %d messages (%d on disk only), RSS %d MiB empty, %d MiB filled: ' \
      "$label" "$round" "$stored" "$on_disk" $((empty >> 20)) $((filled >> 20))
    echo "$(((filled - empty) / stored)) bytes a message"
    stop_server
  done
done

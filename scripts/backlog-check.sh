#!/usr/bin/env bash
# Backlog check: the cold path at a scale the unit and server tests do not reach, on both
# backends (issue 40's gate: a backlog far beyond the texts a server keeps in memory, through
# kill -9). On each: azq with one shard on CPU 0 and `--text-memory 4M` in a temporary
# directory (one shard, so that the client has CPU 1 to itself: two durable shards on the two
# CPUs of the gate's machine beside a busy client put about 5 times slower, docs/BENCHMARKS.md);
# scripts/backlog-check.py fills four queues with MESSAGES texts of MESSAGE_BYTES, each a
# function of its number, and writes a ledger of every acknowledged put (queue, message ID,
# number); all but the texts --text-memory holds must leave memory once written (checked); kill
# -9 and a start on the same data (texts located, on disk only); then every message is received
# and checked against the ledger exactly (each acknowledged put once, in its queue, with its own
# text byte for byte, nothing else) while the texts are read back from the log
# (azq_text_reads_total, checked); then the queues are cleared and the data directory must come
# back to within 64 MiB of its size before the fill (the drain rule gives back dead segments);
# last, SIGTERM must stop azq with exit 0 within 60 s. The fill, the restart and the receive
# are timed and printed, never asserted.
#
#   scripts/backlog-check.sh [MESSAGES]     default and least 1000000; MESSAGE_BYTES [128]
#
# At least a million, so that the log passes 64 MiB many times over and the disk check means
# something. AZQ_BIN names the binary (default: built in release here). Loopback only; bounded
# in count, and each step in time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
messages=${1:-1000000}
message_bytes=${MESSAGE_BYTES:-128}
queues=4
prefix=backlog
text_memory_bytes=$((4 << 20))
if ((messages < 1000000 || message_bytes < 16 || message_bytes > 65536)); then
  echo "usage: scripts/backlog-check.sh [MESSAGES >= 1000000]; MESSAGE_BYTES 16..65536" >&2
  exit 2
fi
# Texts --text-memory may keep in memory at most, their bytes alone counted.
resident_max=$((text_memory_bytes / message_bytes))
work=$(mktemp -d "${TMPDIR:-/tmp}/azq-backlog.XXXXXX")
azq_pid=
cleanup() {
  if [[ -n $azq_pid ]] && kill -0 "$azq_pid" 2>/dev/null; then
    kill -KILL "$azq_pid"
    wait "$azq_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

[[ -n "${AZQ_BIN:-}" ]] || cargo build --release --quiet --bin azq
azq_bin=${AZQ_BIN:-target/release/azq}

backend=
starts=0
# To stderr: it is called in command substitutions too, whose output it would become.
fail() {
  echo "backlog check FAILED${backend:+ ($backend)}: $*" >&2
  [[ -f $work/azq-$starts.err ]] && tail -n 40 "$work/azq-$starts.err" >&2
  exit 1
}

# Starts azq on $backend's data directory; sets azq_pid and port, and started_s (launch to the
# ready line).
start_azq() {
  starts=$((starts + 1))
  local began
  began=$(date +%s.%N)
  taskset -c 0 "$azq_bin" --runtime "$backend" --queuePort 0 --shards 1 --cpus 0 \
    --text-memory "$text_memory_bytes" --silent --location "$work/$backend" \
    >"$work/azq-$starts.out" 2>"$work/azq-$starts.err" &
  azq_pid=$!
  port=$(azq_ready_port "$work/azq-$starts.out" 120) || fail "start $starts printed no ready line"
  started_s=$(echo "$(date +%s.%N) - $began" | bc)
}

# SIGTERM must stop azq with exit 0 within 60 s.
stop_azq() {
  kill -TERM "$azq_pid"
  for _ in $(seq 1 600); do
    kill -0 "$azq_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$azq_pid" 2>/dev/null && fail "azq still runs 60 s after SIGTERM"
  local status=0
  wait "$azq_pid" || status=$?
  azq_pid=
  ((status == 0)) || fail "azq exited with $status after SIGTERM"
}

metric() {
  azq_metric "$port" "$1" || fail "no $1 in /_azq/metrics"
}

# io_uring where it starts (a start that neither serves nor says why within 30 s fails).
select_backends "$azq_bin" || fail "the io_uring probe"

for backend in "${backends[@]}"; do
  ledger=$work/ledger-$backend.txt
  start_azq
  before=$(dir_bytes "$work/$backend") || fail "no data directory"
  taskset -c 1 python3 scripts/backlog-check.py fill "$port" "$prefix" "$queues" "$messages" \
    "$message_bytes" "$ledger" || fail "the fill"
  stored=$(metric azq_messages)
  on_disk=$(metric azq_texts_on_disk)
  ((stored == messages)) || fail "$stored messages stored after the fill of $messages"
  ((on_disk >= messages - resident_max)) ||
    fail "$on_disk of $messages texts on disk only, not at least all but $resident_max"

  kill -KILL "$azq_pid"
  wait "$azq_pid" 2>/dev/null || true
  azq_pid=
  start_azq
  restart_s=$started_s
  began=$(date +%s.%N)
  taskset -c 1 python3 scripts/backlog-check.py verify "$port" "$prefix" "$queues" \
    "$message_bytes" "$ledger" || fail "the messages are not as acknowledged"
  receive_s=$(echo "$(date +%s.%N) - $began" | bc)
  reads=$(metric azq_text_reads_total)
  ((reads >= messages - resident_max)) ||
    fail "$reads of $messages texts read back from disk, not at least all but $resident_max"

  python3 scripts/backlog-check.py clear "$port" "$prefix" "$queues" || fail "the clear"
  bound=$((before + (64 << 20)))
  for _ in $(seq 1 120); do
    after=$(dir_bytes "$work/$backend") || fail "no data directory"
    ((after <= bound)) && break
    sleep 0.5
  done
  ((after <= bound)) ||
    fail "the data directory holds $after bytes 60 s after the clear, $before before the fill"
  stop_azq
  echo "backlog check passed ($backend): $messages messages of $message_bytes B," \
    "$on_disk texts on disk only after the fill; kill -9, restarted in ${restart_s} s; every" \
    "message received as acknowledged in ${receive_s%.*} s, $reads texts read back from disk;" \
    "cleared: the data directory $((after >> 20)) MiB against $((before >> 20)) MiB before the fill"
done

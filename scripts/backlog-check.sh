#!/usr/bin/env bash
# Backlog check: the cold path at a scale the unit and server tests do not reach, on both
# backends (issue 40's gate: a backlog far beyond the texts a server keeps in memory, through
# kill -9). On each: azq with one shard on CPU 0 and `--text-memory 4M` in a temporary
# directory (one shard, so that azq-loadgen has CPU 1 to itself: with two shards on the two CPUs
# of the gate's machine beside it, a durable fill runs about 5 times slower, in flushes of a few
# records each);
# azq-loadgen fills four queues with MESSAGES texts of MESSAGE_BYTES (almost all of them leave
# memory once written, checked); kill -9 and a start on the same data (texts located, on disk
# only); then every message is received (scripts/backlog-check.py verify: as many as the fill's
# acknowledged puts, each text exactly as written, no put or ID twice) while the texts are read
# back from the log (azq_text_reads_total, checked); then the queues are cleared and the data
# directory must come back to within 64 MiB a shard of its size before the fill (the drain rule
# gives back dead segments); last, SIGTERM must stop azq with exit 0. Figures, not timings, are
# checked: the fill's rate, the restart and the receive are printed, never asserted.
#
#   scripts/backlog-check.sh [MESSAGES]     default 1000000; MESSAGE_BYTES [128]
#
# AZQ_BIN and AZQ_LOADGEN_BIN name the binaries (default: built in release here). Loopback
# only; bounded in count, and each step in time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
messages=${1:-1000000}
message_bytes=${MESSAGE_BYTES:-128}
queues=4
shards=1
prefix=backlog
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

azq_bin=${AZQ_BIN:-}
if [[ -z $azq_bin ]]; then
  cargo build --release --quiet --bin azq
  azq_bin=target/release/azq
fi
loadgen_bin=${AZQ_LOADGEN_BIN:-}
if [[ -z $loadgen_bin ]]; then
  cargo build --release --quiet -p azq-loadgen
  loadgen_bin=target/release/azq-loadgen
fi

fail() {
  echo "backlog check FAILED ($backend): $*"
  [[ -f $work/azq-$starts.err ]] && tail -n 40 "$work/azq-$starts.err"
  exit 1
}

# Starts azq on $backend's data directory; sets azq_pid and port, and started_s (launch to the
# ready line).
starts=0
start_azq() {
  starts=$((starts + 1))
  local began
  began=$(date +%s.%N)
  "$azq_bin" --runtime "$backend" --queuePort 0 --shards "$shards" --cpus 0 --text-memory 4M --silent \
    --location "$work/$backend" >"$work/azq-$starts.out" 2>"$work/azq-$starts.err" &
  azq_pid=$!
  port=$(azq_ready_port "$work/azq-$starts.out" 120) || fail "start $starts printed no ready line"
  started_s=$(echo "$(date +%s.%N) - $began" | bc)
}

data_bytes() {
  # du fails when a file goes while it walks (a segment a snapshot gave up), and still prints
  # the total.
  { du -sb "$work/$backend" 2>/dev/null || true; } | cut -f1
}

backends=(portable)
probe=$("$azq_bin" --runtime io_uring --inMemoryPersistence --queuePort 0 --silent 2>&1 &
        pid=$!; sleep 1; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true)
if grep -q "listening on" <<<"$probe"; then
  backends+=(io_uring)
else
  echo "SKIPPED the io_uring backend: $(head -n 1 <<<"$probe")"
fi

for backend in "${backends[@]}"; do
  start_azq
  before=$(data_bytes)
  began=$(date +%s.%N)
  timeout --kill-after=10 600 "$loadgen_bin" --endpoint "http://127.0.0.1:$port/devstoreaccount1" \
    --cpus 1 --scenario put --connections 16 --pipeline 8 --queues "$queues" --queue-prefix "$prefix" \
    --requests "$messages" --message-bytes "$message_bytes" --warmup 0s --max-error-rate 0 \
    --json "$work/fill-$backend.json" --quiet >/dev/null || fail "the fill failed"
  fill_s=$(echo "$(date +%s.%N) - $began" | bc)
  stored=$(azq_metric "$port" azq_messages)
  on_disk=$(azq_metric "$port" azq_texts_on_disk)
  [[ $stored == "$messages" ]] || fail "$stored messages stored after the fill of $messages"
  # Texts leave memory once written beyond --text-memory: all but the last few MiB's.
  ((on_disk * 10 >= messages * 9)) || fail "only $on_disk of $messages texts on disk only"

  kill -KILL "$azq_pid"
  wait "$azq_pid" 2>/dev/null || true
  azq_pid=
  start_azq
  restart_s=$started_s
  began=$(date +%s.%N)
  python3 scripts/backlog-check.py verify "$port" "$prefix" "$queues" \
    "$work/fill-$backend.json" "$message_bytes" || fail "the messages are not as acknowledged"
  receive_s=$(echo "$(date +%s.%N) - $began" | bc)
  reads=$(azq_metric "$port" azq_text_reads_total)
  ((reads * 10 >= messages * 9)) || fail "only $reads of $messages texts read back from disk"

  python3 scripts/backlog-check.py clear "$port" "$prefix" "$queues" || fail "the clear failed"
  bound=$((before + shards * (64 << 20)))
  for _ in $(seq 1 120); do
    after=$(data_bytes)
    ((after <= bound)) && break
    sleep 0.5
  done
  ((after <= bound)) || fail "the data directory holds $after bytes 60 s after the clear," \
    "$before before the fill (at most $bound)"

  kill -TERM "$azq_pid"
  status=0
  wait "$azq_pid" || status=$?
  azq_pid=
  ((status == 0)) || fail "azq exited with $status after SIGTERM"
  echo "backlog check passed ($backend): $messages messages of $message_bytes B filled in" \
    "${fill_s%.*} s, $on_disk texts on disk only; kill -9, restarted in $restart_s s; every" \
    "message received as acknowledged in ${receive_s%.*} s, $reads texts read back from disk;" \
    "cleared: the data directory $((after >> 20)) MiB against $((before >> 20)) MiB before the fill"
done

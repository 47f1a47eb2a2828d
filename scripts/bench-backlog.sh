#!/usr/bin/env bash
# Issue 40's targets for a deep backlog, measured on one durable azq shard (the default,
# --durability fsync) at a scale this machine holds: fill one queue with MESSAGES texts of
# MESSAGE_BYTES, and report, side by side with the issue's targets,
#   - server memory (RSS) per backlogged message once filled, and disk against the live texts;
#   - Put into the deep queue against Put into an empty one (same server, same run);
#   - the restart with the backlog (launch to ready line);
#   - Get(32)+Delete draining the backlog, and Put p99 on another queue while it drains
#     against its p99 with nothing draining, and the server's own part of each p99 (from
#     its latency histogram) beside the log's flushes;
#   - disk at its peak over the run (sampled every second, with its make-up: log segments,
#     snapshots, the snapshot being written, and the phase it came in), and after the drain
#     against before the fill.
# The server runs pinned to SERVER_CPU, azq-loadgen to CLIENT_CPU; every run is bounded in time
# and count, loopback only; the data directory is removed at the end.
#
#   scripts/bench-backlog.sh
#
# Environment (defaults in brackets):
#   SERVER_CPU [0], CLIENT_CPU [1]
#   MESSAGES [2000000]          messages filled into the deep queue
#   MESSAGE_BYTES [256]         their text size
#   DURATION [10s], WARMUP [2s] measured time and warm-up of the rate runs
#   OPEN_RATE [1000]            puts/s on the other queue, with and without the drain
#   DRAIN_TIME [300s]           bound of the final drain
#   SERVER_FLAGS []             more flags for azq, e.g. "--text-memory 0"
#   RESTART [1]                 0: no restart after the fill (recovery leaves texts on disk
#                               only, so a restart makes the backlog cold unless SERVER_FLAGS
#                               has "--text-memory all", which reads every text back)
#   OUT_DIR [target/bench-backlog]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
messages=${MESSAGES:-2000000}
message_bytes=${MESSAGE_BYTES:-256}
duration=${DURATION:-10s}
warmup=${WARMUP:-2s}
open_rate=${OPEN_RATE:-1000}
drain_time=${DRAIN_TIME:-300s}
read -r -a server_flags <<<"${SERVER_FLAGS:-}"
restart=${RESTART:-1}
out_dir=${OUT_DIR:-target/bench-backlog}
run_timeout_s=900
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
data="$out_dir/data"

section() {
  printf '\n==> %s\n' "$*" >&2
}

section "cargo build --release (azq, azq-loadgen)"
cargo build --release -p azq -p azq-loadgen --bins >&2

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
cleanup() {
  [[ -n ${sampler_pid:-} ]] && kill "$sampler_pid" 2>/dev/null
  stop_server
  rm -rf "$data"
  true
}
trap cleanup EXIT

# start: azq on the data directory (kept across restarts); sets server_port, server_pid and
# ready_s, the seconds from launch to the ready line.
start() {
  server_port=$(free_port)
  local started
  # Emptied here, not only by the redirection below: that runs in the child, and a wait that
  # began before it could read the last server's ready line.
  : >"$out_dir/azq.out"
  started=$(date +%s.%N)
  taskset -c "$server_cpu" target/release/azq --queueHost 127.0.0.1 --queuePort "$server_port" \
    --shards 1 --cpus "$server_cpu" --silent --location "$data" "${server_flags[@]}" \
    >"$out_dir/azq.out" 2>>"$out_dir/azq.err" &
  server_pid=$!
  until grep -q "listening" "$out_dir/azq.out" 2>/dev/null; do
    kill -0 "$server_pid" || { cat "$out_dir/azq.err" >&2; exit 1; }
    sleep 0.02
  done
  ready_s=$(echo "$(date +%s.%N) - $started" | bc)
}

# load NAME LOADGEN-ARGS...: one azq-loadgen run, its JSON in OUT_DIR/NAME.json.
load() {
  local name=$1
  shift
  timeout --kill-after=10 "$run_timeout_s" target/release/azq-loadgen \
    --endpoint "http://127.0.0.1:$server_port/devstoreaccount1" --cpus "$client_cpu" \
    --message-bytes "$message_bytes" --quiet --json "$out_dir/$name.json" "$@" \
    >"$out_dir/$name.txt"
}

# json NAME EXPRESSION: a figure of OUT_DIR/NAME.json (EXPRESSION in Python over `d`).
json() {
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$out_dir/$1.json"
}

# metrics NAME: the server's /_azq/metrics page, in OUT_DIR/NAME.metrics, and the time it was
# read in OUT_DIR/NAME.time.
metrics() {
  date +%s.%N >"$out_dir/$1.time"
  curl -sf "http://127.0.0.1:$server_port/_azq/metrics" >"$out_dir/$1.metrics"
}

# histogram_delta BEFORE AFTER SERIES: what histogram SERIES (its name and labels up to `le`)
# of /_azq/metrics counted between the pages metrics BEFORE and AFTER read: its count, that
# count a second, and its p50 and p99 in µs, interpolated within their power-of-two buckets as
# Prometheus' histogram_quantile does.
histogram_delta() {
  python3 - "$out_dir/$1" "$out_dir/$2" "$3" <<'PY'
import re
import sys


def buckets(name):
    counts = {}
    for line in open(name + ".metrics"):
        if line.startswith(sys.argv[3]):
            bound, count = re.search(r'le="([^"]+)"\} (\d+)$', line).groups()
            counts[float(bound)] = int(count)
    return counts


before, after = buckets(sys.argv[1]), buckets(sys.argv[2])
cumulative = [(bound, after[bound] - before.get(bound, 0)) for bound in sorted(after)]
total = cumulative[-1][1]
seconds = float(open(sys.argv[2] + ".time").read()) - float(open(sys.argv[1] + ".time").read())


def quantile(q):
    rank, lower, below = q * total, 0.0, 0
    for bound, count in cumulative:
        if count >= rank and count > below:
            if bound == float("inf"):
                return lower * 1e6
            return (lower + (bound - lower) * (rank - below) / (count - below)) * 1e6
        lower, below = bound, count
    return lower * 1e6


print(f"{total} {total / seconds:.0f} {quantile(0.5):.0f} {quantile(0.99):.0f}")
PY
}

# The phase the run is in, for the disk sampler.
phase_file="$out_dir/phase"
phase() {
  echo "$*" >"$phase_file"
  section "$*"
}

# Every second until killed: the data directory's files' bytes (as `du -sb` counts them), then
# its log segments' count and bytes, its snapshots' bytes and the snapshot being written's, and
# the phase, one line to OUT_DIR/disk.tsv. find fails when a file goes between its listing and
# its size (a segment a snapshot gave up), and under pipefail that ended the sampler, and the
# script at its `kill` with no summary: a sample then lacks that file, and the next has it right.
sample_disk() {
  while true; do
    { find "$data" -type f -printf '%s %f\n' 2>/dev/null || true; } |
      awk -v phase="$(cat "$phase_file")" '
      { bytes = $1; total += bytes }
      $2 ~ /^wal-.*\.log$/ { segments++; log_bytes += bytes }
      $2 ~ /\.snap$/ { snapshots += bytes }
      $2 ~ /\.tmp$/ { writing += bytes }
      END {
        # %.0f, not %d: the %d of mawk stops at 2^31 - 1.
        printf "%.0f\t%d\t%.0f\t", total, segments, log_bytes
        printf "%.0f\t%.0f\t%s\n", snapshots, writing, phase
      }'
    sleep 1
  done
}

rm -rf "$data"
mkdir -p "$data"
: >"$out_dir/azq.err"
: >"$out_dir/disk.tsv"
phase "start"
sample_disk >>"$out_dir/disk.tsv" &
sampler_pid=$!
start
rss_empty=$(rss_bytes)

phase "put into an empty queue"
load put-empty --scenario put --connections 16 --pipeline 8 --queue-prefix empty \
  --duration "$duration" --warmup "$warmup"
disk_empty=$(dir_bytes "$data")

phase "fill one queue with $messages messages of $message_bytes bytes"
load fill --scenario put --connections 16 --pipeline 8 --queue-prefix deep \
  --requests "$messages" --warmup 0s
# Every message stored, the empty queue's included (its puts stay too).
filled=$(azq_metric "$server_port" azq_messages)
rss_filled=$(rss_bytes)
disk_filled=$(dir_bytes "$data")

phase "put into the deep queue"
load put-deep --scenario put --connections 16 --pipeline 8 --queue-prefix deep \
  --duration "$duration" --warmup "$warmup"
# And those of the rate run into the deep queue (its warm-up's too): what the drain starts from.
stored=$(azq_metric "$server_port" azq_messages)

restart_s=skipped
if [[ $restart == 1 ]]; then
  phase "restart with the backlog"
  stop_server
  start
  restart_s=$ready_s
fi

phase "put p99 on another queue at $open_rate/s, nothing draining"
metrics put-quiet-before
load put-quiet --scenario put --connections 16 --rate "$open_rate" --queue-prefix other \
  --duration "$duration" --warmup "$warmup"
metrics put-quiet-after

phase "Get(32)+Delete on the deep queue, closed loop"
load drain-rate --scenario get-delete --connections 16 --batch 32 --queue-prefix deep \
  --duration "$duration" --warmup "$warmup"
# Half the shard's drain rate, so that the drain does not saturate the shard by itself.
drain_rate=$(json drain-rate "max(1, round(d['ops']['get']['throughput_per_s'] / 2))")

phase "put p99 on another queue at $open_rate/s while the deep queue drains at $drain_rate gets/s"
load drain-half --scenario get-delete --connections 16 --batch 32 --queue-prefix deep \
  --rate "$drain_rate" --duration "$duration" --warmup "$warmup" &
drain_pid=$!
metrics put-during-before
load put-during --scenario put --connections 16 --rate "$open_rate" --queue-prefix other \
  --duration "$duration" --warmup "$warmup"
metrics put-during-after
wait "$drain_pid"

phase "drain the rest of the deep queue"
load drain --scenario get-delete --connections 16 --batch 32 --queue-prefix deep \
  --duration "$drain_time" --warmup 0s &
drain_pid=$!
# Stopped once the deep queue is empty (its closed loop would go on with empty Gets until
# DRAIN_TIME); its report is not used.
depth=$(python3 scripts/queue-admin.py "$server_port" deep-0 count)
while kill -0 "$drain_pid" 2>/dev/null && ((depth > 0)); do
  sleep 1
  depth=$(python3 scripts/queue-admin.py "$server_port" deep-0 count)
done
pkill -P "$drain_pid" 2>/dev/null || true
wait "$drain_pid" || true
others=$(($(curl -s "http://127.0.0.1:$server_port/_azq/metrics" |
  awk '/^azq_messages\{/ { n += $2 } END { print n }') - depth))
# A snapshot the drain made due may still be running: wait until the disk holds still for
# three seconds (at most a minute).
disk_drained=$(dir_bytes "$data")
still=0
for _ in $(seq 60); do
  sleep 1
  disk=$(dir_bytes "$data")
  if ((disk == disk_drained)); then
    still=$((still + 1))
    ((still >= 3)) && break
  else
    still=0
    disk_drained=$disk
  fi
done
phase "after the drain"
live_texts=$((stored * message_bytes))
rss_drained=$(rss_bytes)
kill "$sampler_pid"
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=
# The largest sample: its bytes, segments, log bytes, snapshots, snapshot being written, phase.
IFS=$'\t' read -r peak_disk peak_segments peak_log peak_snapshots peak_writing peak_phase \
  < <(sort -t$'\t' -k1,1n "$out_dir/disk.tsv" | tail -1)

mib() {
  echo "scale=1; $1 / 1048576" | bc
}

# The server's own part of the Put p99 (from a request's arrival to its answer written, the
# wait for the log included) and the log's flushes, over each window (its warm-up included).
put_series='azq_success_e2e_latency_seconds_bucket{operation="PutMessage",'
flush_series='azq_wal_flush_duration_seconds_bucket{'
read -r _ _ _ put_quiet_server < <(histogram_delta put-quiet-before put-quiet-after "$put_series")
read -r _ _ _ put_during_server < <(histogram_delta put-during-before put-during-after "$put_series")
read -r _ flushes_quiet _ flush_quiet_p99 < <(histogram_delta put-quiet-before put-quiet-after \
  "$flush_series")
read -r _ flushes_during _ flush_during_p99 < <(histogram_delta put-during-before \
  put-during-after "$flush_series")

cat <<EOF

Issue 40's targets, measured on one durable shard ($(date -u +%F), $(git rev-parse --short HEAD))
$messages messages of $message_bytes bytes in one queue ($filled stored in all once filled, $stored
once the rate run into the deep queue had added its own)
server flags: ${SERVER_FLAGS:-none}; restart after the fill: $restart_s

server RSS: empty $(mib "$rss_empty") MiB, filled $(mib "$rss_filled") MiB:
  $(((rss_filled - rss_empty) / filled)) bytes per message (target: <= 1 GiB for 100 M, about 10)
server RSS after the drain: $(mib "$rss_drained") MiB
disk filled: $(mib "$disk_filled") MiB for $(mib "$((filled * message_bytes))") MiB of live texts \
($(echo "scale=2; $disk_filled / ($filled * $message_bytes)" | bc)x)
put, empty queue: $(json put-empty "round(d['ops']['put']['throughput_per_s'])")/s
put, deep queue:  $(json put-deep "round(d['ops']['put']['throughput_per_s'])")/s \
(target >= 0.9x the empty queue's)
restart: ready after ${restart_s} s (target <= 10 s for 100 M)
drain, Get(32)+Delete, closed loop: $(json drain-rate "round(d['ops']['delete']['throughput_per_s'])") \
messages/s deleted ($(json drain-rate "round(d['ops']['get']['throughput_per_s'])") gets/s)
put p99 on another queue at $open_rate/s: $(json put-quiet "d['ops']['put']['latency_us']['p99']") us \
quiet, $(json put-during "d['ops']['put']['latency_us']['p99']") us while the deep queue drains at \
$drain_rate gets/s (target <= 2x)
  the server's own part: $put_quiet_server us quiet, $put_during_server us during the drain \
(arrival to answer written: azq_success_e2e_latency_seconds, within its power-of-two buckets)
  the log: $flushes_quiet flushes/s quiet, p99 $flush_quiet_p99 us; $flushes_during flushes/s \
during the drain, p99 $flush_during_p99 us
disk at its peak: $(mib "$peak_disk") MiB ($(echo "scale=2; $peak_disk / $live_texts" | bc)x \
the $(mib "$live_texts") MiB of texts stored before the drain; target <= 1.5x), during \
"$peak_phase": $peak_segments log segments of $(mib "$peak_log") MiB, snapshots \
$(mib "$peak_snapshots") MiB, $(mib "$peak_writing") MiB of a snapshot being written
disk after the drain ($depth messages left in the deep queue, $others in the others): \
$(mib "$disk_drained") MiB, before the fill $(mib "$disk_empty") MiB (target: within 64 MiB)
EOF

#!/usr/bin/env bash
# azq-loadgen's own CPU at a light open-loop load (issue 29, item 5): a release azq on loopback
# (one shard, in memory), and azq-loadgen putting at RATE/s for DURATION on each client backend
# under /usr/bin/time -v. Prints, per backend, the client's user + system CPU as a share of one
# core over the run's wall time, the distribution of its send lag (p50 to max, from the JSON
# report), and how much of the run its core spent waiting for a CPU (the kernel's schedstat):
# on a busy machine that waiting, not the client's timer, is the lag's tail.
#
# Usage: scripts/bench-light-load.sh [RATE] [DURATION]   (defaults 50 and 10s)
# Environment: AZQ_BIN, LOADGEN_BIN (default target/release/azq and azq-loadgen); LOADGEN_WRAPPER,
# a command the client runs under, e.g. `chrt -f 10` (real-time, as root): on a busy machine it
# separates the client's own timing from its waiting for a CPU.
set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$repo_root/scripts/bench-lib.sh"
rate=${1:-50}
duration=${2:-10s}
azq_bin=${AZQ_BIN:-$repo_root/target/release/azq}
loadgen_bin=${LOADGEN_BIN:-$repo_root/target/release/azq-loadgen}
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

"$azq_bin" --queuePort 0 --shards 1 --inMemoryPersistence --silent >"$work/azq.out" 2>&1 &
server_pid=$!
port=$(azq_ready_port "$work/azq.out")

for runtime in portable io_uring; do
  # shellcheck disable=SC2086 # the wrapper is a command and its arguments
  /usr/bin/time -v -o "$work/time.txt" ${LOADGEN_WRAPPER:-} "$loadgen_bin" \
    --endpoint "http://127.0.0.1:$port/devstoreaccount1" --runtime "$runtime" \
    --connections 1 --rate "$rate" --duration "$duration" --warmup 2s \
    --json "$work/report.json" >"$work/report.txt" 2>&1 ||
    { cat "$work/report.txt"; exit 1; }
  python3 - "$runtime" "$work/time.txt" "$work/report.json" <<'PY'
import json, re, sys
runtime, time_path, report_path = sys.argv[1:]
time_text = open(time_path).read()
def seconds(label):
    return float(re.search(re.escape(label) + r": ([0-9.]+)", time_text).group(1))
user, system = seconds("User time (seconds)"), seconds("System time (seconds)")
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", time_text).group(1)
wall_s = sum(float(part) * 60 ** index for index, part in enumerate(reversed(wall.split(":"))))
report = json.load(open(report_path))
lag = report.get("client_send_lag_us") or {}
lag_text = " / ".join(f"{lag.get(key, '?')}" for key in ["p50", "p90", "p99", "p999", "max"])
waiting = [core.get("waiting_ratio") for core in report.get("client_cores", [])]
waiting_text = ", ".join("?" if ratio is None else f"{100 * ratio:.1f}%" for ratio in waiting)
print(f"{runtime}: user {user:.2f} s + system {system:.2f} s over {wall_s:.1f} s wall "
      f"= {100 * (user + system) / wall_s:.1f}% of a core; send lag p50 / p90 / p99 / p99.9 / "
      f"max: {lag_text} us; {report['ops']['put']['count']} puts; "
      f"client core waiting for a CPU: {waiting_text or '?'} of the run")
PY
done

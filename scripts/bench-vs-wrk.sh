#!/usr/bin/env bash
# azq-loadgen against wrk on the same workload (issue 15, item 5): one azq shard pinned to
# CPU 0, the client pinned to CPU 1 with one thread, 32 keep-alive connections, Put Message of
# 128 bytes, once with a SAS and once with SharedKey (wrk: scripts/wrk/put-*.lua, which signs
# once a second as azq-loadgen does). azq-loadgen runs once per client backend in
# CLIENT_RUNTIMES, side by side. Each measurement gets a fresh server; the tools take turns,
# ROUNDS times. Prints requests/s per run and the median per tool and auth.
#
#   scripts/bench-vs-wrk.sh        ROUNDS=3 DURATION=5 (seconds) CONNECTIONS=32
#                                  RUNTIME=io_uring (azq's backend; or portable)
#                                  CLIENT_RUNTIMES="io_uring portable" (azq-loadgen's)
#
# Run it on a quiet machine: both clients and the server each need a whole core. Loopback
# only; every run is bounded by DURATION.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh
rounds=${ROUNDS:-3}
duration=${DURATION:-5}
connections=${CONNECTIONS:-32}
runtime=${RUNTIME:-io_uring}
read -r -a client_runtimes <<< "${CLIENT_RUNTIMES:-io_uring portable}"
out=${OUT:-target/bench-vs-wrk}
mkdir -p "$out"
cargo build --release --quiet --bin azq
cargo build --release --quiet -p azq-loadgen
command -v wrk > /dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
trap stop_server EXIT

account=devstoreaccount1
key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
# An account SAS for queues, all resource types and permissions, signed as the SDKs sign it.
sas=$(python3 - "$account" "$key" <<'PYTHON'
import base64, hashlib, hmac, sys, urllib.parse
account, key = sys.argv[1], base64.b64decode(sys.argv[2])
fields = dict(sv="2021-12-02", ss="q", srt="sco", sp="rwdlacup", se="2099-01-01T00:00:00Z")
to_sign = "\n".join([account, fields["sp"], fields["ss"], fields["srt"], "", fields["se"], "", "",
                     fields["sv"], ""]) + "\n"
signature = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
query = dict(fields, sig=signature)
print("&".join(f"{name}={urllib.parse.quote(value, safe='')}" for name, value in query.items()))
PYTHON
)

# Starts a fresh azq on CPU 0; sets port and server_pid.
start_azq() {
  port=$(free_port)
  taskset -c 0 target/release/azq --queuePort "$port" --shards 1 --cpus 0 --silent \
    --runtime "$runtime" --inMemoryPersistence > /dev/null 2>&1 &
  server_pid=$!
  wait_for_port "$port"
}

# Creates the queue (azq-loadgen creates the queues it uses; wrk cannot).
create_queue() {
  target/release/azq-loadgen --endpoint "http://127.0.0.1:$1/$account" --cpus 1 \
    --connections 1 --requests 1 --warmup 0s --queue-prefix bench --quiet > /dev/null
}

loadgen() { # client_runtime port auth -> requests/s
  local client_runtime=$1 port=$2 auth=$3 json="$out/loadgen-$1-$3.json"
  local arguments=()
  [[ $auth == sas ]] && arguments=(--sas "$sas")
  target/release/azq-loadgen --endpoint "http://127.0.0.1:$port/$account" "${arguments[@]}" \
    --runtime "$client_runtime" \
    --cpus 1 --connections "$connections" --scenario put --message-bytes 128 \
    --queue-prefix bench --duration "${duration}s" --warmup 1s --quiet --json "$json" > /dev/null
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
assert r['errors'] == 0, r['ops']; print(round(r['ops']['put']['throughput_per_s']))" "$json"
}

wrk_run() { # port auth -> requests/s
  local port=$1 auth=$2 text
  create_queue "$port"
  if [[ $auth == sas ]]; then
    text=$(taskset -c 1 wrk -t1 -c"$connections" -d"${duration}s" -s scripts/wrk/put-sas.lua \
      "http://127.0.0.1:$port/$account/bench-0/messages?$sas")
  else
    text=$(AZQ_PATH="/$account/bench-0/messages" taskset -c 1 wrk -t1 -c"$connections" \
      -d"${duration}s" -s scripts/wrk/put-sharedkey.lua "http://127.0.0.1:$port")
  fi
  echo "$text" > "$out/wrk-$auth.txt"
  if grep -q "Non-2xx" <<< "$text"; then
    echo "wrk got errors:" >&2
    echo "$text" >&2
    exit 1
  fi
  awk '/Requests\/sec/ { printf "%d\n", $2 }' <<< "$text"
}

tools=()
for client_runtime in "${client_runtimes[@]}"; do
  tools+=("loadgen-$client_runtime")
done
tools+=(wrk)

declare -A results
for round in $(seq 1 "$rounds"); do
  for auth in sas sharedkey; do
    for name in "${tools[@]}"; do
      start_azq
      if [[ $name == wrk ]]; then
        rate=$(wrk_run "$port" "$auth")
      else
        rate=$(loadgen "${name#loadgen-}" "$port" "$auth")
      fi
      stop_server
      echo "round $round: $name $auth ${rate} requests/s"
      results[$name-$auth]+="$rate "
    done
  done
done
echo
for key in $(for auth in sas sharedkey; do for name in "${tools[@]}"; do
               echo "$name-$auth"; done; done); do
  median=$(tr ' ' '\n' <<< "${results[$key]}" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "median $key: $median requests/s (runs: ${results[$key]})"
done

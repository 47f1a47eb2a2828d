#!/usr/bin/env bash
# A cluster on one machine: N azq nodes and HAProxy in front of them, all on 127.0.0.1, with the
# accounts divided between the nodes by consistent hashing (deploy/haproxy, docs/SCALING.md).
#
#   scripts/cluster-demo.sh [N]      N nodes (default 3), until Ctrl-C or SIGTERM
#
# Environment:
#   AZURITE_ACCOUNTS  the accounts, passed to every node ("acct1:key1;acct2:key2"; default: the
#                     development account only)
#   CLUSTER_PORT      the proxy's port (default 10001; 0 picks a free one)
#   AZQ_BIN           azq binary (default target/release/azq, built when missing)
#   AZQ_SHARDS        shards per node (default 1; the nodes' shards take the CPUs in turn)
#   AZQ_ARGS          more azq arguments for every node, e.g. "--max-memory 1G"
#   HAPROXY           haproxy binary (default: haproxy on PATH; Debian: apt-get install haproxy)
#
# Prints one line per node (its pid and its own URL, for asking a node directly), the stats
# page, and then `cluster ready: http://127.0.0.1:PORT (N nodes)`, the endpoint for clients
# (account URLs are http://127.0.0.1:PORT/ACCOUNT). Stopping a node (kill its pid) fails only
# its accounts, with 503 ServerBusy. Ctrl-C or SIGTERM stops everything; a process still alive
# 15 s later is killed. Exits 1 if a process fails to start or HAProxy exits on its own.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

node_count=${1:-3}
if [[ $# -gt 1 || ! $node_count =~ ^[1-9][0-9]?$ ]]; then
  echo "usage: scripts/cluster-demo.sh [N]   (1 to 99 nodes)" >&2
  exit 2
fi
# How long a node or HAProxy may take to start, and the processes to stop, before giving up.
start_timeout_s=30
stop_timeout_s=15

haproxy_bin=${HAPROXY:-haproxy}
if ! command -v "$haproxy_bin" >/dev/null; then
  echo "cluster-demo: haproxy not found (Debian/Ubuntu: apt-get install haproxy)" >&2
  exit 1
fi
# `balance hash` (the ring keyed by account) came with HAProxy 2.6.
haproxy_version=$("$haproxy_bin" -v | sed -n 's/^HA-*Proxy version \([0-9]*\.[0-9]*\).*/\1/p')
if [[ $(printf '%s\n' 2.6 "$haproxy_version" | sort -V | head -n 1) != 2.6 ]]; then
  echo "cluster-demo: needs HAProxy 2.6 or later, found ${haproxy_version:-an unknown version}" >&2
  exit 1
fi
azq_bin=${AZQ_BIN:-$repo_root/target/release/azq}
if [[ -z ${AZQ_BIN:-} && ! -x $azq_bin ]]; then
  cargo build --release --bin azq >&2
fi
shards=${AZQ_SHARDS:-1}
read -r -a extra_args <<<"${AZQ_ARGS:-}"
cpu_count=$(nproc)

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

work_dir=$(mktemp -d -t azq-cluster.XXXXXX)
pids=()

# SIGTERM to everything started, SIGKILL to what is left after stop_timeout_s, then the logs go.
# shellcheck disable=SC2329  # run by the EXIT trap
stop_all() {
  trap - EXIT INT TERM
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  local deadline=$((SECONDS + stop_timeout_s))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work_dir"
}
trap stop_all EXIT
trap 'echo "cluster-demo: stopping" >&2; exit 130' INT
trap 'echo "cluster-demo: stopping" >&2; exit 143' TERM

# Runs a command in the background with its output in a log file; with setpriv (util-linux) the
# process is also killed if this script dies without running its traps (e.g. SIGKILL).
launch() {
  local log=$1
  shift
  # Created here, not by the background redirection: the caller reads it at once.
  : >"$log"
  if command -v setpriv >/dev/null; then
    setpriv --pdeathsig KILL -- "$@" >"$log" 2>&1 </dev/null &
  else
    "$@" >"$log" 2>&1 </dev/null &
  fi
  pids+=($!)
}

# Prints the log of a process that did not start, and fails.
start_failed() {
  echo "cluster-demo: $1; its output:" >&2
  tail -n 20 "$2" >&2
  exit 1
}

node_ports=()
for ((node = 1; node <= node_count; node++)); do
  log=$work_dir/node$node.log
  # Node i's shards take the next CPUs in turn, wrapping around, so that nodes share cores
  # evenly rather than all starting at CPU 0.
  cpus=
  for ((shard = 0; shard < shards; shard++)); do
    cpus+=${cpus:+,}$(( ((node - 1) * shards + shard) % cpu_count ))
  done
  # --proxyProtocol: HAProxy passes each client's address in a PROXY v2 header
  # (haproxy_nodes_config), which a SAS `sip` and the request log see.
  launch "$log" "$azq_bin" --queueHost 127.0.0.1 --queuePort 0 --shards "$shards" \
    --cpus "$cpus" --inMemoryPersistence --proxyProtocol "${extra_args[@]}"
  port=
  deadline=$((SECONDS + start_timeout_s))
  while [[ -z $port ]]; do
    port=$(sed -n 's|^azq listening on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$log")
    if [[ -z $port ]]; then
      kill -0 "${pids[-1]}" 2>/dev/null || start_failed "node $node exited" "$log"
      ((SECONDS < deadline)) || start_failed "node $node did not start" "$log"
      sleep 0.05
    fi
  done
  node_ports+=("$port")
  echo "node $node: pid ${pids[-1]}, http://127.0.0.1:$port"
done

# The node part of the configuration; the abstract socket names carry this script's pid, so
# that several demos can run side by side.
haproxy_nodes_config "azq-demo-$$" "${node_ports[@]}" >"$work_dir/nodes.cfg"

proxy_port=${CLUSTER_PORT:-10001}
if [[ $proxy_port == 0 ]]; then
  proxy_port=$(free_port)
fi
stats_port=$(free_port)
export AZQ_PROXY_BIND=127.0.0.1:$proxy_port AZQ_PROXY_STATS_BIND=127.0.0.1:$stats_port
haproxy_config=(-f "$repo_root/deploy/haproxy/haproxy.cfg" -f "$work_dir/nodes.cfg")
"$haproxy_bin" -q -c "${haproxy_config[@]}" >&2
launch "$work_dir/haproxy.log" "$haproxy_bin" -db "${haproxy_config[@]}"
haproxy_pid=${pids[-1]}
deadline=$((SECONDS + start_timeout_s))
until (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null; do
  kill -0 "$haproxy_pid" 2>/dev/null || start_failed "haproxy exited" "$work_dir/haproxy.log"
  ((SECONDS < deadline)) || start_failed "haproxy did not listen" "$work_dir/haproxy.log"
  sleep 0.05
done
echo "haproxy: pid $haproxy_pid, stats http://127.0.0.1:$stats_port/stats"
echo "cluster ready: http://127.0.0.1:$proxy_port ($node_count nodes)"

# Nodes may be stopped and the cluster keeps serving the other accounts; HAProxy is the cluster.
status=0
wait "$haproxy_pid" || status=$?
echo "cluster-demo: haproxy exited with status $status; its output:" >&2
tail -n 20 "$work_dir/haproxy.log" >&2
exit 1

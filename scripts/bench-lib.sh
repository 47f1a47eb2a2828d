# shellcheck shell=bash
# Helpers shared by the benchmark scripts, scripts/cluster-demo.sh, soak.sh,
# instructions-per-request.sh, powerloss.sh, backlog-check.sh and test.sh (sourced, not run):
# the server a script started, a free loopback port, azq's ready line, waiting until something
# listens on a port, the node part of an HAProxy configuration for loopback nodes, FUSE's
# fusermount3, a server's resident memory, a directory's bytes on disk, a figure of its
# /_azq/metrics, and whether io_uring starts here (the backends to test).

server_pid=
# Stops the server started last (its pid in server_pid), if any.
stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}

# A free loopback port: bind port 0, read it back, release it.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to $2 seconds (default 10) for azq's ready line in file $1 and prints the loopback
# port it names (http or https); fails with a message when none comes.
azq_ready_port() {
  local file=$1 seconds=${2:-10} port
  for _ in $(seq 1 $((seconds * 10))); do
    port=$(grep -o 'listening on https\?://127.0.0.1:[0-9]*' "$file" 2>/dev/null | grep -o '[0-9]*$' || true)
    if [[ -n $port ]]; then
      echo "$port"
      return 0
    fi
    sleep 0.1
  done
  echo "azq did not start" >&2
  return 1
}

# Writes the resident memory (VmRSS) of the server started last, bytes.
rss_bytes() {
  echo $(($(awk '/VmRSS/ { print $2 }' "/proc/$server_pid/status") * 1024))
}

# Writes the bytes of the files under directory $1, as `du -sb` counts them. du fails when a
# file goes while it walks (a log segment a snapshot gave up) and still prints the total, so
# that failure is let pass; none printed (no such directory) fails, saying so.
dir_bytes() {
  local bytes
  bytes=$({ du -sb "$1" 2>/dev/null || true; } | cut -f1)
  if [[ ! $bytes =~ ^[0-9]+$ ]]; then
    echo "du found no directory at $1" >&2
    return 1
  fi
  echo "$bytes"
}

# Writes the sum of the series of metric $2 in /_azq/metrics of the server on loopback port $1.
azq_metric() {
  curl -sf "http://127.0.0.1:$1/_azq/metrics" |
    awk -v name="$2" '$1 == name || index($1, name "{") == 1 { sum += $2 } END { printf "%d", sum }'
}

# Whether azq ($1) starts on io_uring here, in memory on a free port: returns 0 once it prints
# its ready line (then stops it); 1 where it ends first saying why, naming io_uring (the kernel
# or a seccomp filter refuses it), after printing that first line; 2 where it does neither
# within 30 s, or ends for another reason, after printing what it said. A slow start is waited
# for, not taken for a refusal.
io_uring_probe() {
  local out pid status=2
  out=$(mktemp)
  "$1" --runtime io_uring --inMemoryPersistence --queuePort 0 --silent >"$out" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    if grep -q "listening on" "$out"; then
      status=0
      break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      grep -q "listening on" "$out" && status=0 || status=1
      break
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if ((status == 1)) && ! grep -qi "io_uring" "$out"; then
    status=2
  fi
  if ((status == 1)); then
    head -n 1 "$out"
  elif ((status == 2)); then
    echo "azq --runtime io_uring neither started nor said why io_uring cannot serve" \
      "(waited up to 30 s): $(head -c 300 "$out")"
  fi
  rm -f "$out"
  return "$status"
}

# Sets `backends` to portable, and io_uring where azq ($1) starts on it (io_uring_probe): where
# azq refuses it naming io_uring, prints "SKIPPED the io_uring backend: " and why; where it
# neither starts nor says why, prints that and returns 1.
select_backends() {
  local why
  backends=(portable)
  if why=$(io_uring_probe "$1"); then
    backends+=(io_uring)
  elif (($? == 1)); then
    echo "SKIPPED the io_uring backend: $why"
  else
    echo "$why"
    return 1
  fi
}

# Waits up to 10 s until something accepts connections on loopback port $1.
wait_for_port() {
  local port=$1
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "nothing listens on port $port" >&2
  return 1
}

# Writes to stdout the node part of an HAProxy configuration, after the pattern of
# deploy/haproxy/nodes.cfg, for nodes on 127.0.0.1 at the ports given: the hash ring (members
# never health-checked) and one health-checked `listen` per node. $1 prefixes the abstract
# socket names, which must be unique on the machine (e.g. include the caller's pid).
haproxy_nodes_config() {
  # The client's address goes to the nodes in a PROXY v2 header (their --proxyProtocol), as
  # deploy/haproxy/nodes.cfg sends it, unless the first argument is --no-proxy-protocol (for
  # nodes that clients also reach directly).
  local accept_proxy=" accept-proxy" send_proxy=" send-proxy-v2"
  if [[ $1 == --no-proxy-protocol ]]; then
    accept_proxy= send_proxy=
    shift
  fi
  local socket_prefix=$1
  shift
  local ports=("$@") node
  echo "backend accounts"
  echo "    balance hash var(txn.account)"
  echo "    hash-type consistent"
  for ((node = 1; node <= ${#ports[@]}; node++)); do
    echo "    server node$node abns@$socket_prefix-node$node id $node$send_proxy"
  done
  for ((node = 1; node <= ${#ports[@]}; node++)); do
    echo "listen node$node"
    echo "    bind abns@$socket_prefix-node$node$accept_proxy"
    echo "    server azq 127.0.0.1:${ports[node - 1]} check$send_proxy"
  done
}

# Succeeds when FUSE can be mounted here (/dev/fuse and fusermount3), installing fuse3 with
# apt-get when fusermount3 is missing and this runs as root; otherwise prints why not (for the
# caller's SKIPPED line) and fails.
ensure_fuse3() {
  if [[ ! -e /dev/fuse ]]; then
    echo "no /dev/fuse"
    return 1
  fi
  if command -v fusermount3 >/dev/null; then
    return 0
  fi
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "fusermount3 is missing (needs root and apt-get to install fuse3)"
    return 1
  fi
  echo "installing fuse3 (fusermount3) from apt"
  if ! { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq fuse3; }; then
    echo "installing fuse3 with apt-get failed (see above)"
    return 1
  fi
}

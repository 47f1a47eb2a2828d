# Helpers shared by the benchmark scripts (sourced, not run): the server a script started, a free
# loopback port, and waiting until something listens on one.

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

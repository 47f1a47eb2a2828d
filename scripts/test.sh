#!/usr/bin/env bash
# The whole test gate, as CI runs it: formatting, lints, Rust tests, then the official Python SDK
# (tests/sdk) and JavaScript SDK (tests/sdk-js) against a release build of the real server, and
# the Python SDK against three nodes behind HAProxy (tests/cluster, scripts/cluster-demo.sh).
#
#   scripts/test.sh             everything
#   scripts/test.sh --sdk-only  only the SDK suite (still builds the release binary unless
#                               AZQ_TARGET_URL points the suite at a running server)
#
# Works from any directory. Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

# The SDK suite bounds every request and every wait; this only stops a run that hangs anyway
# (e.g. a deadlock in the harness) long before CI's own limit.
sdk_suite_timeout_s=900

sdk_only=false
case "${1:-}" in
  "") ;;
  --sdk-only) sdk_only=true ;;
  *) echo "usage: scripts/test.sh [--sdk-only]" >&2; exit 2 ;;
esac

section() {
  printf '\n==> %s\n' "$*"
}

if ! $sdk_only; then
  section "cargo fmt --check"
  cargo fmt --all -- --check

  section "cargo clippy"
  cargo clippy --workspace --all-targets -- -D warnings

  section "cargo test"
  cargo test --workspace
fi

if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  section "cargo build --release --bin azq"
  cargo build --release --bin azq
fi

section "Python environment (.venv)"
requirements=tests/sdk/requirements.txt
stamp=.venv/.requirements.sha256
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$wanted" ]]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$wanted" > "$stamp"
  echo "installed $requirements"
else
  echo "up to date with $requirements"
fi

section "SDK suite (tests/sdk)"
export AZQ_BIN="${AZQ_BIN:-$repo_root/target/release/azq}"
if [[ -n "${AZQ_TARGET_URL:-}" ]]; then
  echo "against AZQ_TARGET_URL=$AZQ_TARGET_URL"
else
  echo "against AZQ_BIN=$AZQ_BIN"
fi
timeout --kill-after=10 "$sdk_suite_timeout_s" .venv/bin/python -m pytest -q tests/sdk

# The JavaScript SDK starts its own server (AZQ_BIN), so it runs only without AZQ_TARGET_URL.
if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  section "JavaScript SDK suite (tests/sdk-js)"
  npm ci --prefix tests/sdk-js --no-audit --no-fund --loglevel=error
  # The file, not the directory: from Node 21 on, `node --test` arguments are glob patterns.
  timeout --kill-after=10 "$sdk_suite_timeout_s" node --test tests/sdk-js/queue.test.mjs
fi

# Accounts divided between azq nodes behind HAProxy (tests/cluster). It starts its own servers,
# so it runs only without AZQ_TARGET_URL. HAProxy 2.6 or later is needed (`balance hash`); when
# it is missing, it is installed from apt if this runs as root with apt-get, else skipped.
if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  section "cluster suite (tests/cluster: 3 nodes behind HAProxy)"
  haproxy_ready=true
  if ! command -v haproxy >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      echo "installing haproxy from apt"
      if ! { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -qq &&
             DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq haproxy; }; then
        haproxy_ready=false
        echo "SKIPPED the cluster suite: installing haproxy with apt-get failed (see above)"
      fi
    else
      haproxy_ready=false
      echo "SKIPPED the cluster suite: haproxy is not installed (needs root and apt-get to install)"
    fi
  fi
  if $haproxy_ready; then
    haproxy_version=$(haproxy -v | sed -n 's/^HA-*Proxy version \([0-9]*\.[0-9]*\).*/\1/p')
    if [[ $(printf '%s\n' 2.6 "$haproxy_version" | sort -V | head -n 1) != 2.6 ]]; then
      echo "SKIPPED the cluster suite: haproxy ${haproxy_version:-of unknown version}" \
        "is older than 2.6"
    else
      echo "haproxy $haproxy_version"
      timeout --kill-after=10 "$sdk_suite_timeout_s" .venv/bin/python -m pytest -q tests/cluster
    fi
  fi
fi

if ! $sdk_only; then
  # One minute of mixed load with a chaos client, then proof that no message was lost or
  # duplicated (scripts/soak.sh; run it with 600 for the full ten-minute soak).
  section "soak (60 s)"
  timeout --kill-after=10 300 scripts/soak.sh 60
fi

section "all checks passed"

#!/usr/bin/env bash
# The whole test gate, as CI runs it: formatting, lints, Rust tests, then the official Python SDK
# (tests/sdk) and JavaScript SDK (tests/sdk-js) against a release build of the real server, once
# on the io_uring backend (with its data on disk, restarted between tests) and once where io_uring
# is denied as Docker's default seccomp profile denies it (the no-io-uring helper), which must
# fall back to the portable backend; the real service's recorded answers replayed against it
# (tests/recorded); the Python SDK against three nodes behind HAProxy (tests/cluster); the
# console in chromium and the dashboards against Prometheus (tests/observability); the
# container image under rootful podman (scripts/container-test.sh); a soak; power cuts on the
# project's FUSE file system (scripts/powerloss.sh, tests/faultfs); and a backlog of a million
# texts on disk only through kill -9 (scripts/backlog-check.sh).
#
#   scripts/test.sh             everything
#   scripts/test.sh --sdk-only  only the SDK suites and the recorded answers (still builds the
#                               release binary unless AZQ_TARGET_URL points the SDK suite at a
#                               running server)
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
  # tests/faultfs mounts its FUSE file system (as does the power-loss test below): fusermount3
  # from fuse3, installed here when missing if this runs as root; else those tests say SKIPPED.
  source scripts/bench-lib.sh
  if ! why=$(ensure_fuse3); then
    echo "FUSE unavailable, tests/faultfs's mounts and the power-loss test will be SKIPPED: $why"
  elif [[ -n $why ]]; then
    echo "$why"
  fi
  # The tests run binaries of other packages (the no-io-uring helper has no tests of its own,
  # so `cargo test` alone would not build it).
  cargo build --workspace --bins
  cargo test --workspace
fi

if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  # azq-loadgen too: the soak runs it, and building it inside the soak's time bound could take
  # the whole bound on a busy machine.
  section "cargo build --release (azq, no-io-uring, azq-loadgen)"
  cargo build --release -p azq -p no-io-uring -p azq-loadgen --bins

  # A simulated fleet against a real one (loadgen/tests/simulate.rs's ignored tests): the real
  # runs need release builds and a machine no other test loads.
  section "azq-loadgen --simulate against real runs (release builds)"
  AZQ_BIN="$repo_root/target/release/azq" \
    AZQ_LOADGEN_BIN="$repo_root/target/release/azq-loadgen" \
    cargo test -p azq-loadgen --test simulate -- --ignored
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

export AZQ_BIN="${AZQ_BIN:-$repo_root/target/release/azq}"
if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  npm ci --prefix tests/sdk-js --no-audit --no-fund --loglevel=error
fi

# Both SDK suites against one server configuration: $1 names it, the environment sets it.
sdk_suites() {
  section "Python SDK suite (tests/sdk): $1"
  timeout --kill-after=10 "$sdk_suite_timeout_s" .venv/bin/python -m pytest -q tests/sdk
  # The JavaScript SDK starts its own server (AZQ_BIN), so it runs only without AZQ_TARGET_URL.
  if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
    section "JavaScript SDK suite (tests/sdk-js): $1"
    # The file, not the directory: from Node 21 on, `node --test` arguments are glob patterns.
    timeout --kill-after=10 "$sdk_suite_timeout_s" node --test tests/sdk-js/queue.test.mjs \
      tests/sdk-js/https.test.mjs
  fi
}

if [[ -n "${AZQ_TARGET_URL:-}" ]]; then
  echo "against AZQ_TARGET_URL=$AZQ_TARGET_URL"
  sdk_suites "AZQ_TARGET_URL"
else
  echo "against AZQ_BIN=$AZQ_BIN"
  # On disk, each Python test's queue created before a restart (kill -9 and SIGTERM in turn).
  AZQ_ARGS="--runtime io_uring" AZQ_EXPECT_BACKEND=io_uring AZQ_PERSISTENCE=disk AZQ_RESTART=1 \
    sdk_suites "io_uring backend, persistent, restarted between tests"
  AZQ_WRAPPER="$repo_root/target/release/no-io-uring" AZQ_EXPECT_BACKEND=portable \
    sdk_suites "io_uring denied by seccomp: auto falls back to the portable backend, in memory"
fi

# The real service's recorded answers (the sdist of azure-storage-queue 12.0.0 on PyPI ships
# them), replayed against azq: fails on any difference docs/PARITY.md does not explain. It resets
# the account it talks to, so it never runs against AZQ_TARGET_URL; AZQ_SKIP_RECORDED=1 skips it
# where PyPI cannot be reached.
if [[ -z "${AZQ_TARGET_URL:-}" && -z "${AZQ_SKIP_RECORDED:-}" ]]; then
  section "recorded answers of the real service (tests/recorded/replay.py)"
  timeout --kill-after=10 300 .venv/bin/python tests/recorded/replay.py --azq-bin "$AZQ_BIN"
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

# The console and azq-loadgen's --html report in a real browser, and the Grafana dashboard's
# queries against a real Prometheus (tests/observability). They start their own servers, so they run only without
# AZQ_TARGET_URL. chromium, chromium-driver and prometheus come from apt when missing and this
# runs as root with apt-get; what cannot be installed is skipped with one line.
if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  section "console, loadgen report and dashboards (tests/observability: chromium, prometheus)"
  wanted_packages=()
  command -v chromium >/dev/null || wanted_packages+=(chromium)
  command -v chromedriver >/dev/null || wanted_packages+=(chromium-driver)
  command -v prometheus >/dev/null || wanted_packages+=(prometheus)
  if (( ${#wanted_packages[@]} )); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      echo "installing ${wanted_packages[*]} from apt"
      { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
          "${wanted_packages[@]}" >/dev/null; } ||
        echo "installing ${wanted_packages[*]} with apt-get failed (see above)"
    fi
  fi
  missing=()
  for program in chromium chromedriver prometheus; do
    command -v "$program" >/dev/null || missing+=("$program")
  done
  if (( ${#missing[@]} )); then
    echo "SKIPPED what needs ${missing[*]}: not installed (needs root and apt-get to install)"
  fi
  # The tests skip themselves (one line each) when their program is missing.
  timeout --kill-after=10 600 .venv/bin/python -m pytest -q -rs tests/observability
fi

# The container image with a real runtime (rootful podman): Azurite's commands, the Testcontainers
# modules, limits, volumes (scripts/container-test.sh). It installs podman, runc and mmdebstrap
# from apt when missing and possible, and skips with one line saying why where podman cannot
# start a container.
if [[ -z "${AZQ_TARGET_URL:-}" ]]; then
  section "container suite (scripts/container-test.sh)"
  AZQ_BIN="$repo_root/target/release/azq" timeout --kill-after=10 1500 scripts/container-test.sh
fi

if ! $sdk_only; then
  section "deployment tooling (tests/deploy)"
  .venv/bin/python -m pytest -q tests/deploy

  # One minute of mixed load with a chaos client, then proof that no message was lost or
  # duplicated (scripts/soak.sh; run it with 600 for the full ten-minute soak).
  section "soak (60 s)"
  timeout --kill-after=10 300 scripts/soak.sh 60

  # Power cuts on faultfs (tests/faultfs): 4 cycles of load, kill -9, cut and check per backend,
  # 4 more with --text-memory 0 (texts on disk only, read back under load), and 2 of the
  # --durability write control, which must show loss (scripts/powerloss.sh; run it with no
  # argument for 200 cycles per backend).
  section "power loss (scripts/powerloss.sh 4 2)"
  timeout --kill-after=10 600 scripts/powerloss.sh 4 2

  # A backlog of a million texts, almost all on disk only, through kill -9 on both backends:
  # every message received as acknowledged while the texts are read back, and the disk given
  # back after a clear (scripts/backlog-check.sh).
  section "backlog check (scripts/backlog-check.sh 1000000)"
  timeout --kill-after=10 600 scripts/backlog-check.sh 1000000
fi

# Nothing a test started may have written data where it ran.
if [[ -e __azq__ ]]; then
  echo "a test wrote azq's data into the repository ($repo_root/__azq__)" >&2
  exit 1
fi

section "all checks passed"

#!/usr/bin/env bash
# azq's container image with a real container runtime: rootful podman (runc), the image built by
# deploy/docker/Dockerfile's runtime stage around the release binary, on a stand-in for the
# distroless base that mmdebstrap makes from Debian's packages (no registry is needed). Then:
#   - tests/containers (pytest): Azurite's commands and start-up lines, the official Python SDK
#     (queues; blob and table probes as .NET Aspire's health checks make them), the waits of the
#     Java, .NET and Go Testcontainers modules checked directly, the Node and Java modules' HTTPS
#     set-ups (commands, certificate paths, files put in with their owners and modes; the SDK
#     over HTTPS), testcontainers-python's Azurite
#     module with only the image name changed, memory and CPU limits, stop/kill/restart with a
#     named volume, --read-only, bind mounts, an arbitrary uid in group 0, seccomp;
#   - tests/containers/node: @testcontainers/azurite (11.7, for Node 20) unchanged but the image;
#   - tests/containers/rust: testcontainers-modules' azurite module unchanged but the image.
# The Testcontainers libraries talk to podman's Docker-compatible API socket, with Ryuk off (its
# image cannot be pulled) and the host forced to 127.0.0.1.
#
#   scripts/container-test.sh   (as root; installs podman, runc, mmdebstrap from apt if missing)
#
# Skips with one line saying why where podman cannot run a container. Its podman storage and the
# base image live in target/container-test (kept between runs on one machine; CI starts empty).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD
work=$repo_root/target/container-test
image=localhost/azq:test
base_image=localhost/azq-test-base:bookworm
mkdir -p "$work"

skip() {
  echo "SKIPPED the container suite: $*"
  exit 0
}

section() {
  printf '\n==> %s\n' "$*"
}

section "container runtime (podman, runc, mmdebstrap)"
missing=()
for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} from apt"
    if ! { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq \
             podman runc mmdebstrap >/dev/null; }; then
      skip "installing ${missing[*]} with apt-get failed"
    fi
  else
    skip "${missing[*]} not installed (needs root and apt-get to install)"
  fi
fi
[[ $(id -u) == 0 ]] || skip "rootful podman needs root"
podman --version

# A private configuration and storage, so nothing here touches the machine's own podman setup.
# These sandboxes lack CAP_SYS_RESOURCE: the containers' rlimits must stay within this process's
# hard limits (podman itself caps the process count at the kernel's pid_max).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
[[ $nproc == unlimited || $nproc -gt $pid_max ]] && nproc=$pid_max
[[ $nofile == unlimited ]] && nofile=1048576
cat > "$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat > "$work/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
EOF
export CONTAINERS_CONF=$work/containers.conf CONTAINERS_STORAGE_CONF=$work/storage.conf
# Healthcheck timers need systemd, which these machines lack; tests run them by hand.
podman() { command podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }

# What this script started in the background, stopped on the way out, with the containers the
# suites left behind (a failed test); images stay for the next run.
service_pid=
rust_build_pid=
cleanup() {
  for pid in $service_pid $rust_build_pid; do
    kill "$pid" 2>/dev/null || true
  done
  podman ps -aq --filter label=azq-container-test | xargs -r podman rm -f >/dev/null || true
}
trap cleanup EXIT

section "base image (mmdebstrap: glibc, libgcc, no shell, user 65532)"
# What gcr.io/distroless/cc-debian12:nonroot offers azq, made from Debian's packages.
base_tar=$work/base-bookworm.tar
if ! podman image exists "$base_image"; then
  if [[ ! -s $base_tar ]]; then
    mmdebstrap --quiet --variant=extract --include=libc6,libgcc-s1 --format=tar \
      --skip=output/dev \
      --customize-hook='rm -rf "$1"/etc/apt "$1"/etc/dpkg "$1"/var/lib/apt "$1"/var/lib/dpkg \
        "$1"/var/cache/apt "$1"/usr/share/doc "$1"/usr/share/lintian "$1"/usr/share/locale' \
      --customize-hook='printf "%s\n" "root:x:0:0:root:/root:/sbin/nologin" \
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin" \
        "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" > "$1"/etc/passwd;
        printf "%s\n" "root:x:0:" "nobody:x:65534:" "nonroot:x:65532:" > "$1"/etc/group;
        mkdir -p "$1"/home/nonroot "$1"/root; chown 65532:65532 "$1"/home/nonroot;
        chmod 700 "$1"/root; chmod 1777 "$1"/tmp' \
      bookworm "$base_tar.partial" http://deb.debian.org/debian ||
      skip "mmdebstrap could not make the base image (is Debian's mirror reachable?)"
    mv "$base_tar.partial" "$base_tar"
  fi
  podman import --quiet --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$base_tar" "$base_image" >/dev/null
fi
# The loader runs as a program: proof that podman can start a container here at all.
if ! probe=$(podman run --rm "$base_image" /lib64/ld-linux-x86-64.so.2 --version 2>&1); then
  skip "podman cannot start a container here: $(tail -n 1 <<<"$probe")"
fi
echo "$base_image: $(head -n 1 <<<"$probe")"

section "image (deploy/docker/Dockerfile around target/release/azq)"
if [[ -z ${AZQ_BIN:-} ]]; then
  cargo build --release -p azq --bin azq
fi
# The Rust Testcontainers harness compiles (bollard, hyper, rustls…) while the other suites run.
rust_build_log=$work/rust-build.log
cargo test --no-run --quiet --locked --manifest-path tests/containers/rust/Cargo.toml \
  --target-dir "$repo_root/target" >"$rust_build_log" 2>&1 &
rust_build_pid=$!
binary=${AZQ_BIN:-$repo_root/target/release/azq}
context=$work/context
rm -rf "$context"
mkdir -p "$context/bin" "$context/root/data"
chmod 775 "$context/root/data"
objcopy --strip-debug "$binary" "$context/bin/azq"
ln -s azq "$context/bin/azurite"
ln -s azq "$context/bin/azurite-queue"
# --format docker keeps HEALTHCHECK (podman's default OCI format has no place for it).
podman build --quiet --format docker --pull=never -f deploy/docker/Dockerfile \
  --build-arg AZQ_BINARIES=prebuilt --build-arg RUNTIME_BASE="$base_image" \
  -t "$image" "$context" >/dev/null
podman image inspect --format '{{.Id}} {{.Size}} bytes' "$image"

section "podman's Docker-compatible API"
socket=$work/podman.sock
rm -f "$socket"
command podman system service --time 0 "unix://$socket" 2>"$work/podman-service.log" &
service_pid=$!
for _ in $(seq 100); do
  [[ -S $socket ]] && break
  sleep 0.1
done
[[ -S $socket ]] || { cat "$work/podman-service.log"; echo "no API socket" >&2; exit 1; }
export DOCKER_HOST=unix://$socket
# Testcontainers: Ryuk's image cannot be pulled here (the tests remove their own containers),
# and these VMs have /.dockerenv, which would make the libraries look for a gateway address.
export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
  TESTCONTAINERS_CONNECTION_MODE=docker_host \
  TC_HOST=127.0.0.1
export AZQ_IMAGE=$image AZQ_TEST_LABEL=azq-container-test

section "Python: tests/containers"
requirements=tests/containers/requirements.txt
[[ -x .venv/bin/python ]] || python3 -m venv .venv
stamp=.venv/.containers-requirements.sha256
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$wanted" ]]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$wanted" > "$stamp"
fi
timeout --kill-after=10 600 .venv/bin/python -m pytest -q tests/containers

section "Node: @testcontainers/azurite (tests/containers/node)"
npm ci --prefix tests/containers/node --no-audit --no-fund --loglevel=error
timeout --kill-after=10 300 node --test tests/containers/node/azurite.test.mjs

section "Rust: testcontainers-modules azurite (tests/containers/rust)"
if ! wait "$rust_build_pid"; then
  cat "$rust_build_log"
  echo "the Rust harness did not build" >&2
  exit 1
fi
timeout --kill-after=10 300 cargo test --quiet --locked \
  --manifest-path tests/containers/rust/Cargo.toml --target-dir "$repo_root/target"

section "container suite passed in ${SECONDS} s"

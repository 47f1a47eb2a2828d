"""Fixtures of the SDK suite: a real azq process, SDK clients bound to it, fresh queues.

By default the session starts the release binary (env AZQ_BIN, default target/release/azq under the
repo root) on 127.0.0.1 with `--queuePort 0 --shards 2`, reads the port from the line
`azq listening on http[s]://HOST:PORT (N shards, BACKEND, STORAGE)` on its stdout, and stops it at the end
(SIGTERM, then SIGKILL if it lingers).

Environment:
  AZQ_BIN         server binary (relative paths are taken from the current directory)
  AZQ_SHARDS      value of --shards (default 2)
  AZQ_ARGS        extra arguments appended to the command line (shell-split)
  AZQ_WRAPPER     a command that runs azq (shell-split, azq's command line follows it), e.g. the
                  no-io-uring helper, which denies io_uring as Docker's default seccomp does
  AZQ_EXPECT_BACKEND  fail unless the ready line names this backend (io_uring or portable)
  AZQ_PERSISTENCE memory (default: --inMemoryPersistence) or disk: every server the suite starts
                  keeps its data under its own log directory (--location LOG_DIR/data)
  AZQ_RESTART=1   with AZQ_PERSISTENCE=disk: the `queue` fixture restarts the session server on the
                  same port after creating the queue, by SIGKILL and SIGTERM in turn, so every test
                  runs against state that crossed a restart, and checks every restart (below)
  AZQ_TARGET_URL  run against an already running server instead, e.g. Azurite:
                  http://127.0.0.1:10001 (the /devstoreaccount1 suffix is optional)
  AZQ_AZURITE=1   the target is Azurite: tests marked azurite_deviation count as xfail

Fixtures: `server` (session; `.endpoint` account URL, `.host`, `.port`), `connection_str`,
`service_client` (QueueServiceClient), `queue` (a fresh QueueClient per test), `spawn_server` (extra
servers with their own arguments and environment, for tests that need a particular configuration),
`restart_witness` (session; what the session server's restarts are checked against).

Every restart of a server with its data on disk compares what the server holds after it with what
it acknowledged before it, and fails the test at once on any difference, with the server's output
(issue 39: a log reader that truncated the log at a flush ending 1-3 bytes before a 4 KiB block
boundary lost acknowledged messages at an ordinary restart, and these restarts, comparing nothing
with messages too small to end a flush there, never saw it). Before each restart, a session-wide
witness queue (`restart_witness` fixture, restart_witness.py) receives a round of acknowledged
writes: a put whose record ends 1-3 bytes (later 0 or 4) before a block boundary, then a put and
an update whose records end at offsets walking through the whole block (each a flush of its own),
then deletes with receipts handed out before earlier restarts and a metadata change. After the
restart, the witness's messages (ids, texts, insertion and expiry times, dequeue counts) and every
queue of the account with its metadata (the witness's included) must be exactly what was
acknowledged. The tests that restart servers of their own on disk (test_https.py,
test_user_delegation.py) do the same.

The server's stdout and stderr go to files under pytest's temporary directory; their paths are
printed when the server fails to start or dies during the session.
"""

import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.storage.queue import QueueServiceClient

from restart_witness import RestartWitness
from support import CLIENT_KWARGS, DEV_ACCOUNT, connection_string, unique_queue_name

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = REPO_ROOT / "target" / "release" / "azq"
DEFAULT_SHARDS = 2

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
STARTUP_POLL_INTERVAL_S = 0.05
LOG_TAIL_BYTES_MAX = 4000

READY_LINE = re.compile(
    r"azq listening on (?P<url>(?P<scheme>https?)://(?P<host>\S+):(?P<port>\d+)) "
    r"\((?P<shards>\d+) shards?, (?P<backend>\w+), (?P<storage>in memory|data [^)]+)\)"
)

# prctl(2) option: signal to deliver to the child when the thread that forked it dies.
PR_SET_PDEATHSIG = 1


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "azurite_deviation(reason): the contract and Azurite 3.x disagree here; the test follows the "
        "contract, so it is expected to fail when AZQ_TARGET_URL points at Azurite",
    )


def pytest_collection_modifyitems(config, items):
    """With AZQ_AZURITE=1 (validating the suite against Azurite), known Azurite deviations are
    reported as xfail instead of failures. Not strict: some deviations only show intermittently."""
    if os.environ.get("AZQ_AZURITE") != "1":
        return
    for item in items:
        marker = item.get_closest_marker("azurite_deviation")
        if marker is not None:
            reason = marker.args[0] if marker.args else "Azurite deviates from the contract"
            item.add_marker(pytest.mark.xfail(reason=f"Azurite deviation: {reason}", strict=False))


@dataclass
class Server:
    """Where the suite sends its requests, and the process behind it when the suite started one."""

    host: str
    port: int
    # Account URL: what connection strings call QueueEndpoint.
    endpoint: str
    # http, or https for a server started with --cert.
    scheme: str = "http"
    process: Optional[subprocess.Popen] = None
    stdout_path: Optional[Path] = None
    stderr_path: Optional[Path] = None
    shards: Optional[int] = None
    # How it was started, so that it can be restarted on the same port with the same data.
    binary: Optional[Path] = None
    log_dir: Optional[Path] = None
    extra_args: tuple = ()
    env: Optional[dict] = None
    restarts: int = 0

    def log_tail(self) -> str:
        """The last bytes of the server's stdout and stderr, for failure messages."""
        parts = []
        for label, path in (("stdout", self.stdout_path), ("stderr", self.stderr_path)):
            if path is None or not path.exists():
                continue
            data = path.read_bytes()[-LOG_TAIL_BYTES_MAX:].decode("utf-8", "replace")
            parts.append(f"--- azq {label} ({path}) ---\n{data}")
        return "\n".join(parts)


def _die_with_parent():
    """Runs in the child between fork and exec: if pytest dies (even by SIGKILL), so does azq.

    Without it an interrupted run leaves a server holding a port and CI's output pipes open.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def server_binary() -> Path:
    """AZQ_BIN, or the release build under the repo root."""
    return Path(os.environ.get("AZQ_BIN", str(DEFAULT_BINARY))).resolve()


def persistent() -> bool:
    """Whether the suite's servers keep their data on disk (AZQ_PERSISTENCE=disk)."""
    mode = os.environ.get("AZQ_PERSISTENCE", "memory")
    if mode not in ("memory", "disk"):
        raise RuntimeError(f"AZQ_PERSISTENCE must be memory or disk, not {mode!r}")
    return mode == "disk"


def server_command(binary: Path, log_dir: Path, extra_args=(), port=0) -> list:
    """The command line the suite starts azq with: loopback, `port` (0: any free one), AZQ_SHARDS
    shards, and its data in memory or in `log_dir`/data (AZQ_PERSISTENCE)."""
    shards = os.environ.get("AZQ_SHARDS", str(DEFAULT_SHARDS))
    command = shlex.split(os.environ.get("AZQ_WRAPPER", ""))
    command += [str(binary), "--queueHost", "127.0.0.1", "--queuePort", str(port), "--shards", shards]
    if persistent():
        command += ["--location", str(log_dir / "data")]
    else:
        command += ["--inMemoryPersistence"]
    command += shlex.split(os.environ.get("AZQ_ARGS", ""))
    command += list(extra_args)
    return command


def start_server(binary: Path, log_dir: Path, extra_args=(), env=None, port=0) -> Server:
    """Start azq and return once it has printed its ready line; raise with its output otherwise.
    `env` adds to (or overrides) the suite's environment, e.g. AZURITE_ACCOUNTS."""
    if not binary.is_file():
        raise RuntimeError(
            f"azq binary not found at {binary}: build it with `cargo build --release --bin azq`, "
            "set AZQ_BIN, or set AZQ_TARGET_URL to test a running server"
        )
    command = server_command(binary, log_dir, extra_args, port)
    stdout_path = log_dir / "azq.stdout"
    stderr_path = log_dir / "azq.stderr"
    # Files, not pipes: nothing has to drain them, and they survive for a post-mortem. Appended
    # to, so that a restarted server's output follows the previous one's.
    with open(stdout_path, "ab") as stdout, open(stderr_path, "ab") as stderr:
        start_offset = stdout.tell()
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent,
        )
    server = Server(
        host="127.0.0.1",
        port=0,
        endpoint="",
        process=process,
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        binary=binary,
        log_dir=log_dir,
        extra_args=tuple(extra_args),
        env=env,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        output = stdout_path.read_bytes()[start_offset:].decode("utf-8", "replace")
        match = READY_LINE.search(output)
        if match:
            break
        exit_code = process.poll()
        if exit_code is not None:
            raise RuntimeError(
                f"azq exited with code {exit_code} before it was ready: {shlex.join(command)}\n"
                + server.log_tail()
            )
        if time.monotonic() >= deadline:
            stop_server(server)
            raise RuntimeError(
                f"azq printed no 'azq listening on http[s]://HOST:PORT (N shards, BACKEND, STORAGE)' line within "
                f"{STARTUP_TIMEOUT_S:.0f} s: {shlex.join(command)}\n" + server.log_tail()
            )
        time.sleep(STARTUP_POLL_INTERVAL_S)
    host = match.group("host")
    # A wildcard bind address is no place to connect to; the loopback address reaches it.
    if host in ("0.0.0.0", "[::]"):
        host = "127.0.0.1"
    server.host = host
    server.port = int(match.group("port"))
    server.shards = int(match.group("shards"))
    expected_backend = os.environ.get("AZQ_EXPECT_BACKEND")
    if expected_backend and match.group("backend") != expected_backend:
        stop_server(server)
        raise RuntimeError(
            f"azq runs on {match.group('backend')}, not {expected_backend}: {shlex.join(command)}\n"
            + server.log_tail()
        )
    server.scheme = match.group("scheme")
    server.endpoint = f"{server.scheme}://{host}:{server.port}/{DEV_ACCOUNT}"
    return server


def restart_server(server: Server) -> str:
    """Stops `server` (SIGKILL and SIGTERM in turn) and starts it again on the same port with the
    same data directory, updating `server` in place. Returns how it was stopped."""
    if server.restarts % 2 == 0:
        how = "kill -9"
        server.process.kill()
        server.process.wait()
    else:
        how = "SIGTERM"
        stop_server(server)
    server.restarts += 1
    again = start_server(server.binary, server.log_dir, server.extra_args, server.env, server.port)
    if (again.host, again.port) != (server.host, server.port):
        raise RuntimeError(f"azq came back on {again.host}:{again.port}, not {server.port}")
    server.process = again.process
    return how


def stop_server(server: Server) -> Optional[int]:
    """SIGTERM, wait, then SIGKILL. Returns the exit code, or None when it had to be killed."""
    process = server.process
    if process is None or process.poll() is not None:
        return None if process is None else process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def target_from_url(url: str) -> Server:
    """A Server for an endpoint someone else runs (AZQ_TARGET_URL)."""
    match = re.fullmatch(r"(?P<base>http://(?P<host>[^/:]+|\[[^\]]+\]):(?P<port>\d+))(/[^/]*)?/?", url.strip())
    if not match:
        raise RuntimeError(f"AZQ_TARGET_URL must look like http://127.0.0.1:10001, got {url!r}")
    return Server(
        host=match.group("host"),
        port=int(match.group("port")),
        endpoint=f"{match.group('base')}/{DEV_ACCOUNT}",
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The server under test: `.endpoint` (account URL), `.host`, `.port`."""
    target_url = os.environ.get("AZQ_TARGET_URL")
    if target_url:
        yield target_from_url(target_url)
        return
    running = start_server(server_binary(), tmp_path_factory.mktemp("azq"))
    yield running
    died_early = running.process.poll() is not None
    exit_code = stop_server(running)
    if died_early:
        pytest.fail(
            f"azq exited during the session with code {exit_code}; later failures may follow from it\n"
            + running.log_tail(),
            pytrace=False,
        )
    if exit_code is None:
        sys.stderr.write(f"\nwarning: azq ignored SIGTERM for {SHUTDOWN_TIMEOUT_S:.0f} s and was killed\n")


@pytest.fixture(autouse=True)
def server_alive(server):
    """Fail a test at once, with the server's output, when the server process has died before it.

    Without this every later test would fail with a bare "connection refused".
    """
    if server.process is not None and server.process.poll() is not None:
        pytest.fail(
            f"azq is no longer running (exit code {server.process.returncode})\n" + server.log_tail(),
            pytrace=False,
        )


@pytest.fixture
def spawn_server(tmp_path):
    """Factory for extra azq processes with their own arguments (e.g. `spawn_server(["--shards", "1"])`)
    and environment (`env={"AZURITE_ACCOUNTS": ...}`), stopped at the end of the test. Skips the test
    when AZQ_TARGET_URL is set: there is no binary."""
    if os.environ.get("AZQ_TARGET_URL"):
        pytest.skip("AZQ_TARGET_URL is set: the suite does not start servers")
    binary = server_binary()
    started = []

    def spawn(extra_args=(), env=None):
        log_dir = tmp_path / f"azq{len(started)}"
        log_dir.mkdir()
        started.append(start_server(binary, log_dir, extra_args, env))
        return started[-1]

    yield spawn
    # A server that died during the test (not stopped by it: SIGTERM's clean exit, or a kill)
    # shows up there as a bare "connection refused": say so, with its output.
    stopped_by_tests = (0, -signal.SIGTERM, -signal.SIGKILL)
    died_early = [
        running
        for running in started
        if running.process.poll() is not None and running.process.returncode not in stopped_by_tests
    ]
    for running in started:
        stop_server(running)
    for running in died_early:
        pytest.fail(
            f"a server this test started exited during it with code {running.process.returncode}\n"
            + running.log_tail(),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def connection_str(server):
    """Connection string for the development account on the server under test."""
    return connection_string(server.endpoint)


@pytest.fixture(scope="session")
def service_client(connection_str):
    """QueueServiceClient for the development account."""
    with QueueServiceClient.from_connection_string(connection_str, **CLIENT_KWARGS) as client:
        yield client


@pytest.fixture(scope="session")
def restart_witness(service_client):
    """The session server's witness (restart_witness.py), created at its first restart."""
    witness = RestartWitness(service_client)
    yield witness
    try:
        witness.queue.delete_queue()
    except AzureError:
        pass  # gone, or the server with it: the server fixture says so


@pytest.fixture
def queue(service_client, server, request):
    """A freshly created queue named after the test, deleted afterwards. With AZQ_RESTART=1 the
    server restarts after creating it, so the test runs on a queue that crossed a restart, and
    the restart is checked: the test fails at set-up unless the server holds after it exactly what
    it acknowledged before it (the witness queue's messages, the account's queues and metadata)."""
    client = service_client.get_queue_client(unique_queue_name(request.node.name))
    client.create_queue()
    if os.environ.get("AZQ_RESTART") == "1" and server.process is not None:
        if not persistent():
            raise RuntimeError("AZQ_RESTART=1 needs AZQ_PERSISTENCE=disk")
        witness = request.getfixturevalue("restart_witness")
        witness.before_restart()
        how = restart_server(server)
        try:
            witness.check_after_restart(f"restart {server.restarts} ({how}) of the session server", server.log_tail)
            failure = None
        except AssertionError as raised:
            failure = str(raised)
        if failure is not None:
            # Later restarts are judged on their own, not on this one's loss again.
            witness.start_over()
            pytest.fail(failure, pytrace=False)
    yield client
    try:
        client.delete_queue()
    except ResourceNotFoundError:
        pass

"""Runs scripts/cluster-demo.sh as a user runs it, for the cluster suite.

`start_demo` runs the demo script with CLUSTER_PORT=0, the suite's accounts in AZURITE_ACCOUNTS
and the release binary (env AZQ_BIN, default target/release/azq), and reads what it prints: each
node's pid and URL, HAProxy's pid and stats page, then the line
`cluster ready: http://127.0.0.1:PORT (N nodes)`. `stop_demo` signals it as Ctrl-C or a service
manager would; `leftover_processes` names what it started that still runs. The script runs in
its own session, so a script that does not stop in time is killed with all its processes.

Needs haproxy on PATH (scripts/test.sh installs it, or skips this suite when it cannot).
"""

import base64
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_SCRIPT = REPO_ROOT / "scripts" / "cluster-demo.sh"
DEFAULT_BINARY = REPO_ROOT / "target" / "release" / "azq"

# Accounts of the suite: enough that three nodes all get some (the placement is a fixed function
# of the names, so this holds on every run; tests check it rather than assume it).
ACCOUNTS = [f"tenant{index}" for index in range(1, 11)]

START_TIMEOUT_S = 60.0
# The script gives its processes 15 s to stop before it kills them.
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
LOG_TAIL_BYTES_MAX = 4000

NODE_LINE = re.compile(r"^node (?P<index>\d+): pid (?P<pid>\d+), (?P<url>http://127\.0\.0\.1:\d+)$")
HAPROXY_LINE = re.compile(
    r"^haproxy: pid (?P<pid>\d+), stats (?P<stats>http://127\.0\.0\.1:\d+/stats)$"
)
READY_LINE = re.compile(
    r"^cluster ready: (?P<url>http://127\.0\.0\.1:(?P<port>\d+)) \((?P<count>\d+) nodes?\)$"
)

# prctl(2) option: signal to deliver to the child when the thread that forked it dies.
PR_SET_PDEATHSIG = 1


@dataclass
class Node:
    """One azq process of the cluster: its pid and its own URL (bypassing the proxy)."""

    index: int
    pid: int
    url: str


@dataclass
class Cluster:
    """A running scripts/cluster-demo.sh."""

    process: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    accounts: Dict[str, str]
    nodes: List[Node] = field(default_factory=list)
    haproxy_pid: int = 0
    stats_url: str = ""
    # The proxy: what clients use (account URLs are endpoint + "/" + account).
    endpoint: str = ""
    port: int = 0

    def output(self) -> str:
        """The last bytes of the script's stdout and stderr (which hold its processes' logs when
        one fails), for failure messages."""
        parts = []
        for label, path in (("stdout", self.stdout_path), ("stderr", self.stderr_path)):
            data = path.read_bytes()[-LOG_TAIL_BYTES_MAX:].decode("utf-8", "replace")
            parts.append(f"--- cluster-demo.sh {label} ---\n{data}")
        return "\n".join(parts)

    def haproxy_server_status(self, node: Node) -> str:
        """HAProxy's view of a node (UP, DOWN, ...), from the stats page's CSV export."""
        with urllib.request.urlopen(self.stats_url + ";csv", timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            cells = line.split(",")
            if cells[:2] == [f"node{node.index}", "azq"]:
                return cells[17]
        raise AssertionError(f"no row for node{node.index}/azq in HAProxy's stats:\n{text}")


def _die_with_parent():
    """In the child between fork and exec: if pytest dies, even by SIGKILL, the script gets
    SIGTERM and stops its processes."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def process_gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie waiting for its parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The state follows the parenthesised command name, which may contain spaces.
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def random_key() -> str:
    """A fresh account key: 64 random bytes in base64, like Azure's."""
    return base64.b64encode(os.urandom(64)).decode()


def start_demo(node_count: int, log_dir: Path, accounts: Dict[str, str]) -> Cluster:
    """Run scripts/cluster-demo.sh and return once it has printed its ready line."""
    binary = Path(os.environ.get("AZQ_BIN", str(DEFAULT_BINARY))).resolve()
    if not binary.is_file():
        raise RuntimeError(f"azq binary not found at {binary}: build it or set AZQ_BIN")
    env = {
        **os.environ,
        "AZQ_BIN": str(binary),
        "CLUSTER_PORT": "0",
        "AZURITE_ACCOUNTS": ";".join(f"{name}:{key}" for name, key in accounts.items()),
    }
    stdout_path = log_dir / "demo.stdout"
    stderr_path = log_dir / "demo.stderr"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [str(DEMO_SCRIPT), str(node_count)],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    cluster = Cluster(process, stdout_path, stderr_path, accounts)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        lines = stdout_path.read_text("utf-8", "replace").splitlines()
        ready = [match for match in map(READY_LINE.match, lines) if match]
        if ready:
            break
        if process.poll() is not None:
            raise RuntimeError(
                f"cluster-demo.sh exited with {process.returncode}\n{cluster.output()}"
            )
        if time.monotonic() >= deadline:
            kill_demo(cluster)
            raise RuntimeError(
                f"cluster-demo.sh was not ready in {START_TIMEOUT_S} s\n{cluster.output()}"
            )
        time.sleep(POLL_INTERVAL_S)
    cluster.endpoint = ready[0].group("url")
    cluster.port = int(ready[0].group("port"))
    for match in filter(None, map(NODE_LINE.match, lines)):
        cluster.nodes.append(
            Node(int(match.group("index")), int(match.group("pid")), match.group("url"))
        )
    proxy = next(filter(None, map(HAPROXY_LINE.match, lines)))
    cluster.haproxy_pid = int(proxy.group("pid"))
    cluster.stats_url = proxy.group("stats")
    assert [node.index for node in cluster.nodes] == list(
        range(1, node_count + 1)
    ), cluster.output()
    assert int(ready[0].group("count")) == node_count
    return cluster


def kill_demo(cluster: Cluster):
    """The last resort: SIGKILL to the script's whole session."""
    try:
        os.killpg(cluster.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    cluster.process.wait()


def stop_demo(cluster: Cluster, signal_number: int = signal.SIGTERM) -> Optional[int]:
    """Send `signal_number` to the script, as Ctrl-C (SIGINT) or a service manager (SIGTERM)
    would, and return its exit code; None when it had to be killed."""
    if cluster.process.poll() is not None:
        return cluster.process.returncode
    cluster.process.send_signal(signal_number)
    try:
        return cluster.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_demo(cluster)
        return None


def leftover_processes(cluster: Cluster) -> List[str]:
    """The processes the script started that still run."""
    started = [(f"node {node.index}", node.pid) for node in cluster.nodes]
    started.append(("haproxy", cluster.haproxy_pid))
    return [f"{name} (pid {pid})" for name, pid in started if not process_gone(pid)]


class ClusterStarter:
    """Starts demos and stops them all at the end, checking that every process went with them."""

    def __init__(self, log_root: Path):
        self.log_root = log_root
        self.started: List[Cluster] = []

    def start(self, node_count: int) -> Cluster:
        log_dir = self.log_root / f"cluster{len(self.started)}"
        log_dir.mkdir()
        accounts = {name: random_key() for name in ACCOUNTS}
        self.started.append(start_demo(node_count, log_dir, accounts))
        return self.started[-1]

    def stop_all(self):
        for cluster in self.started:
            exit_code = stop_demo(cluster)
            assert exit_code is not None, f"cluster-demo.sh ignored SIGTERM\n{cluster.output()}"
            assert not leftover_processes(cluster), cluster.output()

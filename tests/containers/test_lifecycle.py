"""The container's life and its data: stop, kill and restart with a named volume, a read-only root
file system, bind mounts (a root-owned one refused with a message naming the uid and the fixes),
an arbitrary uid in group 0 (OpenShift), and seccomp (the default profile denies io_uring; the
committed one allows it)."""

import os
import tempfile
from pathlib import Path

from azure.storage.queue import QueueClient

from conftest import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, podman, unique

REPO_ROOT = Path(__file__).resolve().parents[2]
SECCOMP_PROFILE = REPO_ROOT / "deploy" / "seccomp" / "default-with-io-uring.json"


def ready(container, run: int = 1) -> str:
    """The ready line of the container's `run`th start."""
    logs = container.wait_for_log("azq listening on http://0.0.0.0:10001 ", times=run)
    return [line for line in logs.splitlines() if line.startswith("azq listening on ")][run - 1]


def queue_client(container, name: str) -> QueueClient:
    return QueueClient(
        container.url(), name, credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
        **CLIENT_KWARGS,
    )


def count(container, name: str) -> int:
    return queue_client(container, name).get_queue_properties().approximate_message_count


def contents(container, name: str) -> dict:
    """Every message of the queue, ID to text, read without leasing it (at most 32)."""
    return {message.id: message.content
            for message in queue_client(container, name).peek_messages(max_messages=32)}


def test_stop_kill_and_restart_keep_every_message(run, volume):
    data = volume()
    container = run("-v", f"{data}:/data", command=["azurite-queue"], ports=(10001,))
    ready(container)
    name = unique("kept")
    queue = queue_client(container, name)
    queue.create_queue()
    # Texts of a few bytes to more than a block: the log's flushes end at various offsets.
    acknowledged = {}
    for number in range(5):
        sent = queue.send_message(f"message {number} " + "x" * (number * 1500))
        acknowledged[sent.id] = sent.content
    # SIGTERM: a graceful stop, exit status 0.
    podman("stop", "-t", "10", container.name)
    assert container.wait_for_exit() == 0
    logs = container.logs()
    assert "Azurite Queue service is closing..." in logs, logs
    podman("start", container.name)
    ready(container, run=2)
    assert count(container, name) == 5
    assert contents(container, name) == acknowledged
    # SIGKILL: nothing acknowledged is lost.
    sent = queue_client(container, name).send_message("acknowledged just before the kill")
    acknowledged[sent.id] = sent.content
    podman("kill", "-s", "KILL", container.name)
    container.wait_for_exit()
    podman("start", container.name)
    ready(container, run=3)
    assert count(container, name) == 6
    assert contents(container, name) == acknowledged
    # A new container on the same volume finds the queue too.
    podman("rm", "-f", container.name)
    again = run("-v", f"{data}:/data", command=["azurite-queue"], ports=(10001,))
    ready(again)
    assert count(again, name) == 6
    assert contents(again, name) == acknowledged


def test_read_only_root_file_system(run):
    # Only /data (the image's volume) is written.
    container = run("--read-only", command=["azurite"])
    ready(container)
    queue = queue_client(container, unique("read-only"))
    queue.create_queue()
    queue.send_message("written to /data")
    assert queue.peek_messages()[0].content == "written to /data"
    assert container.healthcheck()


def test_root_owned_bind_mount_is_refused_clearly(run):
    with tempfile.TemporaryDirectory(prefix="azq-root-owned-") as directory:
        os.chmod(directory, 0o755)
        container = run("-v", f"{directory}:/data", command=["azurite-queue"], ports=(10001,))
        assert container.wait_for_exit() != 0
        logs = container.logs()
        for words in ("uid 65532", "gid 0", "chown 65532", ":U"):
            assert words in logs, logs
        # The fix it names works: podman's :U gives the directory to the container's user
        # (the image starts as root and becomes 65532, so the user is named).
        fixed = run("-v", f"{directory}:/data:U", "--user", "65532:65532",
                    command=["azurite-queue"], ports=(10001,))
        ready(fixed)
        queue_client(fixed, unique("fixed")).create_queue()


def test_arbitrary_uid_in_group_0(run, volume):
    # OpenShift runs images as a random uid in group 0; the image's /data is writable by group 0.
    container = run("--user", "1000650000:0", "-v", f"{volume()}:/data",
                    command=["azurite-queue"], ports=(10001,))
    ready(container)
    queue = queue_client(container, unique("any-uid"))
    queue.create_queue()
    queue.send_message("written by uid 1000650000")
    assert container.healthcheck()
    # Without a volume too (the image's anonymous one).
    bare = run("--user", "1000650001:0", command=["azurite-queue"], ports=(10001,))
    ready(bare)
    queue_client(bare, unique("any-uid-bare")).create_queue()


def test_seccomp_denial_is_named_and_the_committed_profile_allows_io_uring(run):
    default = run(command=["azurite-queue", "--inMemoryPersistence"], ports=(10001,))
    line = ready(default)
    assert ", portable, " in line, line
    logs = default.logs()
    assert "io_uring unavailable, using the portable backend" in logs, logs
    assert "seccomp" in logs and "no io_uring" not in logs, logs
    # `--runtime auto` is the portable backend everywhere (measured faster): io_uring is asked.
    allowed = run("--security-opt", f"seccomp={SECCOMP_PROFILE}",
                  command=["azurite-queue", "--inMemoryPersistence", "--runtime", "io_uring"],
                  ports=(10001,))
    line = ready(allowed)
    assert ", io_uring, " in line, (line, allowed.logs())

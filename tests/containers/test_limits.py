"""Container limits: a memory limit makes a full azq (every text in memory, `--text-memory all`)
answer 503 ServerBusy instead of being OOM-killed, before and after a restart with its data; by
default the texts beyond half its `--max-memory` stay on disk, so a backlog past the memory limit
is taken and comes back; a CPU quota sets the shard count. The ready line says where each
default came from."""

import re

from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient

from conftest import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, podman, unique

# Messages of 60,000 characters and up: about 2,200 fill the 128 MiB that half of 256 MiB
# allows. One byte longer each time, so that the log's flushes (one put each) end at every
# offset of a 4 KiB block in turn: a flush that ended 1 to 3 bytes short of a block once made
# the next start lose every message after it.
MESSAGE_BYTES_MIN = 60_000
PUTS_MAX = 4_000


def message_text(count: int) -> str:
    return f"{count:06}" + "m" * (MESSAGE_BYTES_MIN - 6 + count)


def ready_line(container, run: int = 1) -> str:
    """The ready line of the container's `run`th start."""
    logs = container.wait_for_log("azq listening on http://0.0.0.0:10001 ", times=run)
    return [line for line in logs.splitlines() if line.startswith("azq listening on ")][run - 1]


def queue_client(container, name: str) -> QueueClient:
    return QueueClient(
        container.url(), name, credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
        **CLIENT_KWARGS,
    )


def fill_until_busy(queue: QueueClient, first: int = 0) -> int:
    """Puts messages (`message_text(first)` on) until azq answers 503 ServerBusy; how many it
    took."""
    for count in range(PUTS_MAX):
        try:
            queue.send_message(message_text(first + count))
        except HttpResponseError as error:
            assert error.status_code == 503, error
            assert error.error_code == "ServerBusy", error
            return count
    raise AssertionError(f"{PUTS_MAX} puts of {MESSAGE_BYTES_MIN} bytes and up and still no 503")


def assert_alive(container) -> None:
    state = container.inspect()["State"]
    assert state["Running"], state
    assert not state["OOMKilled"], state


def test_memory_limit_answers_503_and_is_never_killed(run, volume):
    data = volume()
    container = run("--memory", "256m", "-v", f"{data}:/data",
                    command=["azurite-queue", "--text-memory", "all"], ports=(10001,))
    line = ready_line(container)
    assert re.search(r"max memory 128 MiB: half the cgroup v[12] memory limit \(256 MiB\)", line), line
    name = unique("full")
    queue = queue_client(container, name)
    queue.create_queue()
    stored = fill_until_busy(queue)
    assert stored > 1000, stored
    assert_alive(container)
    # Restarted with its data: everything acknowledged is back, and it is still full.
    podman("restart", "-t", "10", container.name)
    line = ready_line(container, run=2)
    assert "half the cgroup" in line, line
    queue = queue_client(container, name)
    assert queue.get_queue_properties().approximate_message_count == stored
    assert fill_until_busy(queue, stored) == 0
    assert_alive(container)
    # Every acknowledged put is back with its text, exactly once (each leased as it is read).
    messages = list(queue.receive_messages(messages_per_page=32, visibility_timeout=600))
    texts = sorted(message.content for message in messages)
    assert texts == [message_text(count) for count in range(stored)], (len(texts), stored)
    # Reading and deleting makes room again.
    for message in messages[:32]:
        queue.delete_message(message)
    queue.send_message("room again")
    assert_alive(container)


def test_a_backlog_past_the_memory_limit_stays_on_disk(run, volume):
    """The defaults in the same 256 MiB container: texts beyond half the 128 MiB `--max-memory`
    leave memory once written and count their message's slot alone, so puts of more text than
    the limit (about 1.4 times it) are all accepted, the container is never OOM-killed, and after
    a restart every text comes back, exactly once."""
    data = volume()
    container = run("--memory", "256m", "-v", f"{data}:/data", command=["azurite-queue"],
                    ports=(10001,))
    assert "max memory 128 MiB" in ready_line(container)
    name = unique("deep")
    queue = queue_client(container, name)
    queue.create_queue()
    stored = 3_000
    for count in range(stored):
        queue.send_message(message_text(count))
    assert_alive(container)
    podman("restart", "-t", "10", container.name)
    ready_line(container, run=2)
    queue = queue_client(container, name)
    assert queue.get_queue_properties().approximate_message_count == stored
    messages = list(queue.receive_messages(messages_per_page=32, visibility_timeout=600))
    texts = sorted(message.content for message in messages)
    assert texts == [message_text(count) for count in range(stored)], (len(texts), stored)
    assert_alive(container)


def test_shard_count_follows_the_cpu_quota(run):
    cases = [
        (["--cpus", "1"], r"\(1 shards?, .*1 shard: the cgroup v[12] CPU quota \(1 CPU\)"),
        (["--cpus", "1.5"], r"\(2 shards, .*2 shards: the cgroup v[12] CPU quota \(1\.5 CPUs\)"),
        ([], r"\((\d+) shards?, .*\1 shards?: every CPU this process may use"),
    ]
    for options, expected in cases:
        container = run(*options, command=["azurite-queue", "--inMemoryPersistence"],
                        ports=(10001,))
        line = ready_line(container)
        assert re.search(expected, line), (options, line)

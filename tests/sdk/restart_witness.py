"""What a durable server must still hold after a restart: a witness queue and the account's queues.

Every test that restarts a server keeping its data on disk (issue 39) records, just before the
restart, what the server acknowledged, and compares it with what the server holds after it:

- the witness queue's whole content: every message's id, text, insertion and expiry time and
  dequeue count (peeked: nothing is ever received, so all of it must be visible, and peeking
  changes nothing);
- every queue of the account with its metadata (the witness's changes every round).

These restarts once missed a loss: the log reader truncated the log at a flush that ended 1 to 3
bytes before a 4 KiB block boundary when another flush followed it, losing every acknowledged
record after it at an ordinary restart (fixed in commit 631e836), and the restarts compared
nothing while their messages were too small to end a flush there. So before each restart the
witness acknowledges a round of writes from one client:

- one at a time, so that each is a flush of its own (every flush starts on a fresh block): a
  put whose Put record (its text plus PUT_RECORD_OVERHEAD_BYTES) ends 1, 2 or 3 bytes before a
  block boundary (later also 0 and 4), one or two blocks long (NEAR_BLOCK_END, in turn round
  after round), then the next flush: a put whose record ends at the next offset of a walk
  through the block;
- then together, to keep the round short (about 3 flushes' time): an update of the oldest
  message (its record, when alone in a flush, at the walk's next offset) and deletes of the
  next oldest, with the receipts their put or last update handed out (before an earlier
  restart: receipts survive restarts), a metadata change, and the listing of the account's
  queues.

The walk's stride is coprime with 4096, so over the suite's rounds the flushes end at offsets
spread over the whole block. The witness holds at most WITNESS_MESSAGES_MAX messages, so that
one peek sees all of it. The texts are ASCII letters and digits: their bytes on the wire, in the
record and in the answer are the same, so a record's length is the text's plus the overhead.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from azure.core.exceptions import HttpResponseError

from support import unique_queue_name

# What a Put record adds to its text (src/queue/record.rs, `encode` and `encode_body` of
# MessagePut): the record header (length, CRC, sequence: 16), the type (1), queue, slot and
# generation (12), sequence (8), insertion time (8), time to live, delay, dequeue count and lease
# (16), visible time (8), the foreign-id flag (1; a put has no foreign id) and the text's length
# (4). Measured too: a put of 1,000 bytes after a flush ends 1,074 bytes into a fresh block.
PUT_RECORD_OVERHEAD_BYTES = 74
# The same for a MessageUpdated record with a text: header (16), type (1), slot, generation and
# lease (12), visible time (8), the text flag (1) and the text's length (4).
UPDATE_RECORD_OVERHEAD_BYTES = 42
# Every flush starts on a fresh block of this size and pads its last one with zeros.
BLOCK_BYTES = 4096
# The walk's step through a block's offsets: odd (coprime with BLOCK_BYTES, so it reaches every
# offset) and near the block's golden section, so that early rounds already spread over it.
OFFSET_STRIDE = 2531
# The near-end puts, in turn: (blocks, bytes of padding after the record). First 1-3 bytes,
# less than a record's length field, then none and exactly a length field's 4.
NEAR_BLOCK_END = [(blocks, padding) for paddings in ((1, 2, 3), (0, 4)) for blocks in (1, 2) for padding in paddings]
# Messages the witness keeps (a peek returns at most 32): with 2 puts a round, each lives
# through about 5 restarts; more would make every round's peek slower (a peek of 32 texts of up
# to 8 KB takes as long as a durable put) and add nothing the suite's 60-odd restarts lack.
WITNESS_MESSAGES_MAX = 10
# Room for a message's label at the start of its text (`text_of`).
LABEL_BYTES_MAX = 24


@dataclass
class WitnessMessage:
    """A message as acknowledged: what its put answered, its text, the receipt last handed out."""

    id: str
    text: str
    pop_receipt: str
    inserted_on: object
    expires_on: object


def text_of(length: int, label: str) -> str:
    """`length` ASCII characters: `label` (unique per message), a dash, then a pattern."""
    head = f"{label}-"
    assert len(head) <= LABEL_BYTES_MAX <= length, (label, length)
    pattern = "0123456789abcdefghijklmnopqrstuvwxyz"
    return (head + pattern * (length // len(pattern) + 1))[:length]


def text_length_ending_at(offset: int, overhead: int) -> int:
    """The text length whose record (the text plus `overhead`) ends `offset` bytes into a block
    (0: on a boundary), at least LABEL_BYTES_MAX long."""
    length = (offset - overhead) % BLOCK_BYTES
    while length < LABEL_BYTES_MAX:
        length += BLOCK_BYTES
    return length


class RestartWitness:
    """A witness queue on a server, and the account's queues, recorded before each restart and
    compared after it. `service` is a QueueServiceClient of the server (any credential that may
    list queues and use messages)."""

    def __init__(self, service, hint: str = "restart-witness"):
        self.service = service
        self.hint = hint
        self.queue = None
        self.rounds = 0
        self.puts = 0
        self.start_over()

    def start_over(self) -> None:
        """A new, empty witness queue (the old one deleted if it can be), after a failed check,
        so that later restarts are judged on their own and not on an earlier loss again."""
        if self.queue is not None:
            try:
                self.queue.delete_queue()
            except HttpResponseError:
                pass
        self.queue = self.service.get_queue_client(unique_queue_name(self.hint))
        self.queue.create_queue()
        self.messages = []
        self.expected_metadata = {}
        self.expected_queues = None

    def moved_to(self, service) -> None:
        """Reads and writes from now on through `service`: a client of the restarted server when
        it came back on another port."""
        self.service = service
        self.queue = service.get_queue_client(self.queue.queue_name)

    def before_restart(self) -> None:
        """One round of acknowledged writes (see the module's docstring), then a record of the
        account's queues. Fails when a write is refused, e.g. a receipt from before a restart."""
        round_index = self.rounds
        self.rounds += 1
        blocks, padding = NEAR_BLOCK_END[round_index % len(NEAR_BLOCK_END)]
        walk = [(2 * round_index + step) * OFFSET_STRIDE % BLOCK_BYTES for step in (1, 2)]
        self.put(blocks * BLOCK_BYTES - PUT_RECORD_OVERHEAD_BYTES - padding)
        self.put(text_length_ending_at(walk[0], PUT_RECORD_OVERHEAD_BYTES))
        # Then together (the round stays short): an update of the oldest message, deletes of the
        # next oldest, the metadata change, and the listing of the account's queues, whose entry
        # for the witness is then the metadata just acknowledged.
        updated, doomed = self.messages[0], self.messages[1 : max(1, len(self.messages) - WITNESS_MESSAGES_MAX + 1)]
        text = text_of(text_length_ending_at(walk[1], UPDATE_RECORD_OVERHEAD_BYTES), f"r{self.rounds}u{self.puts}")
        self.expected_metadata = {"round": str(self.rounds), "fill": "m" * (self.rounds % 64)}
        with ThreadPoolExecutor(max_workers=len(doomed) + 3) as pool:
            update = pool.submit(
                self.queue.update_message, updated.id, updated.pop_receipt, content=text, visibility_timeout=0
            )
            deletes = [pool.submit(self.queue.delete_message, message.id, message.pop_receipt) for message in doomed]
            metadata = pool.submit(self.queue.set_queue_metadata, metadata=self.expected_metadata)
            listing = pool.submit(self.queues)
        for what, message, future in [("updating", updated, update)] + [
            ("deleting", message, future) for message, future in zip(doomed, deletes)
        ]:
            if future.exception() is not None:
                raise AssertionError(
                    f"restart witness: {what} message {message.id} with the receipt its put or last "
                    f"update handed out (maybe before an earlier restart) was refused: {future.exception()}"
                )
        metadata.result()
        updated.text, updated.pop_receipt = text, update.result().pop_receipt
        # The updated message to the back: the next update takes another, deletes take it last.
        self.messages = self.messages[1 + len(doomed) :] + [updated]
        self.expected_queues = {**listing.result(), self.queue.queue_name: self.expected_metadata}

    def put(self, length: int) -> None:
        self.puts += 1
        text = text_of(length, f"r{self.rounds}p{self.puts}")
        sent = self.queue.send_message(text, time_to_live=-1)
        self.messages.append(WitnessMessage(sent.id, text, sent.pop_receipt, sent.inserted_on, sent.expires_on))

    def queues(self) -> dict:
        """Every queue of the account, by name, with its metadata."""
        return {item.name: dict(item.metadata or {}) for item in self.service.list_queues(include_metadata=True)}

    def differences(self) -> list:
        """What the server holds now that differs from what was recorded before the restart."""
        problems = []
        expected = {message.id: message for message in self.messages}
        with ThreadPoolExecutor(max_workers=2) as pool:
            peek = pool.submit(self.queue.peek_messages, max_messages=32)
            listing = pool.submit(self.queues)
        try:
            peeked, queues = peek.result(), listing.result()
        except HttpResponseError as error:
            return [f"the witness queue {self.queue.queue_name} or the account cannot be read: {error}"]
        found = {message.id: message for message in peeked}
        lost = [message_id for message_id in expected if message_id not in found]
        if lost:
            problems.append(
                f"{len(lost)} of {len(expected)} acknowledged witness messages lost: "
                + ", ".join(f"{message_id} ({len(expected[message_id].text)} bytes)" for message_id in lost)
            )
        extra = [message_id for message_id in found if message_id not in expected]
        if extra:
            problems.append(f"{len(extra)} witness messages never acknowledged (or deleted): {', '.join(extra)}")
        for message_id in expected.keys() & found.keys():
            want, got = expected[message_id], found[message_id]
            if got.content != want.text:
                problems.append(
                    f"message {message_id}: text of {len(got.content or '')} bytes "
                    f"({(got.content or '')[:24]!r}...), acknowledged {len(want.text)} ({want.text[:24]!r}...)"
                )
            if (got.inserted_on, got.expires_on) != (want.inserted_on, want.expires_on):
                problems.append(
                    f"message {message_id}: inserted {got.inserted_on}, expires {got.expires_on}; "
                    f"acknowledged {want.inserted_on}, {want.expires_on}"
                )
            if got.dequeue_count != 0:
                problems.append(f"message {message_id}: dequeue count {got.dequeue_count}, never received")
        for name in sorted(self.expected_queues.keys() - queues.keys()):
            problems.append(f"queue {name} lost")
        for name in sorted(queues.keys() - self.expected_queues.keys()):
            problems.append(f"queue {name} never created (or deleted)")
        for name in sorted(self.expected_queues.keys() & queues.keys()):
            if queues[name] != self.expected_queues[name]:
                problems.append(f"queue {name}: metadata {queues[name]!r}, acknowledged {self.expected_queues[name]!r}")
        return problems

    def check_after_restart(self, what: str, context=lambda: "") -> None:
        """Fails with every difference, naming `what` (the restart) and adding `context()` (e.g.
        the server's output)."""
        problems = self.differences()
        if problems:
            raise AssertionError(
                f"after {what}, the server does not hold what it acknowledged before it "
                f"(witness queue {self.queue.queue_name}, round {self.rounds}, {self.puts} puts so far):\n  "
                + "\n  ".join(problems)
                + "\n"
                + context()
            )

// What a persistent azq must still hold after a restart (issue 39), for the JavaScript suite's
// test that restarts one (queue.test.mjs): a witness queue, recorded before each restart and
// compared after it, as the Python suite's tests/sdk/restart_witness.py does for its restarts.
//
// Before each restart the witness acknowledges a round of writes, one at a time from one
// client, so that each is a flush of its own (every flush starts on a fresh 4 KiB block): for
// each padding of NEAR_BLOCK_END (1-3), a put whose Put record (its text plus
// PUT_RECORD_OVERHEAD_BYTES) ends that many bytes before a block boundary, one or two blocks
// long, followed by the next flush, a put whose record ends at the next offset of a walk through
// the block; then an update of the oldest message (its record too at the walk's next offset)
// and deletes of the two oldest, with the receipts their put or update handed out (before the
// previous restart, in later rounds), and a metadata change. A log reader once truncated the
// log at a flush ending 1-3 bytes before a boundary when another flush followed, losing every
// acknowledged record after it at an ordinary restart (fixed in commit 631e836); restarts that
// compared only a few short messages never saw it.
//
// After the restart: the witness's messages (ids, texts, insertion and expiry times, dequeue
// counts; peeked, as nothing is received), its approximate message count and metadata, and
// every queue of the account with its metadata must be exactly what was acknowledged. The
// texts are ASCII letters and digits, the same bytes on the wire and in the record.

import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";

// What a Put record adds to its text (src/queue/record.rs, `encode` and `encode_body` of
// MessagePut): header 16, type 1, queue, slot and generation 12, sequence 8, insertion time 8,
// time to live, delay, dequeue count and lease 16, visible time 8, foreign-id flag 1 (none on a
// put), text length 4. Measured too: a 1,000-byte put ends 1,074 bytes into its block.
export const PUT_RECORD_OVERHEAD_BYTES = 74;
// The same for a MessageUpdated record with a text: header 16, type 1, slot, generation and
// lease 12, visible time 8, text flag 1, text length 4.
export const UPDATE_RECORD_OVERHEAD_BYTES = 42;
const BLOCK_BYTES = 4096;
// Bytes of padding after the near-end puts' records: 1-3, less than a record's length field
// (the Python suite's witness, with many more restarts, also takes 0 and 4).
const NEAR_BLOCK_END = [1, 2, 3];
// The walk's step through a block's offsets: odd, so coprime with BLOCK_BYTES.
const OFFSET_STRIDE = 2531;
const LABEL_BYTES_MAX = 24;
const DELETES_PER_ROUND = 2;
const PEEK_MAX = 32;

/** `length` ASCII characters: `label`, a dash, then a pattern. */
function textOf(length, label) {
  const pattern = "0123456789abcdefghijklmnopqrstuvwxyz";
  return `${label}-${pattern.repeat(Math.ceil(length / pattern.length) + 1)}`.slice(0, length);
}

/** The text length whose record (text plus `overhead`) ends `offset` bytes into a block. */
function lengthEndingAt(offset, overhead) {
  let length = (((offset - overhead) % BLOCK_BYTES) + BLOCK_BYTES) % BLOCK_BYTES;
  while (length < LABEL_BYTES_MAX) {
    length += BLOCK_BYTES;
  }
  return length;
}

export class RestartWitness {
  /** A witness queue named `name` on the server `service` (a QueueServiceClient) reaches. */
  static async create(service, name) {
    const witness = new RestartWitness(service, name);
    await witness.queue.create();
    return witness;
  }

  constructor(service, name) {
    this.service = service;
    this.name = name;
    this.queue = service.getQueueClient(name);
    this.messages = [];
    this.rounds = 0;
    this.walk = 0;
    this.puts = 0;
    this.metadata = {};
    this.queues = null;
  }

  nextOffset() {
    this.walk += 1;
    return (this.walk * OFFSET_STRIDE) % BLOCK_BYTES;
  }

  async put(length) {
    this.puts += 1;
    const text = textOf(length, `r${this.rounds}p${this.puts}`);
    const sent = await this.queue.sendMessage(text, { messageTimeToLive: -1 });
    this.messages.push({
      id: sent.messageId,
      text,
      popReceipt: sent.popReceipt,
      insertedOn: sent.insertedOn.getTime(),
      expiresOn: sent.expiresOn.getTime(),
    });
  }

  /** One round of acknowledged writes, then a record of the account's queues. */
  async beforeRestart() {
    this.rounds += 1;
    for (const [index, padding] of NEAR_BLOCK_END.entries()) {
      const blocks = 1 + ((this.rounds + index) % 2);
      await this.put(blocks * BLOCK_BYTES - PUT_RECORD_OVERHEAD_BYTES - padding);
      await this.put(lengthEndingAt(this.nextOffset(), PUT_RECORD_OVERHEAD_BYTES));
    }
    const oldest = this.messages.shift();
    const text = textOf(
      lengthEndingAt(this.nextOffset(), UPDATE_RECORD_OVERHEAD_BYTES),
      `r${this.rounds}u${this.puts}`,
    );
    const updated = await this.queue.updateMessage(oldest.id, oldest.popReceipt, text, 0);
    this.messages.push({ ...oldest, text, popReceipt: updated.popReceipt });
    for (const doomed of this.messages.splice(0, DELETES_PER_ROUND)) {
      await this.queue.deleteMessage(doomed.id, doomed.popReceipt);
    }
    assert.ok(this.messages.length <= PEEK_MAX, "the witness outgrew one peek");
    this.metadata = { round: String(this.rounds), fill: "m".repeat(this.rounds) };
    await this.queue.setMetadata(this.metadata);
    this.queues = await this.listQueues();
  }

  /** Every queue of the account, by name, with its metadata. */
  async listQueues() {
    const queues = {};
    for await (const item of this.service.listQueues({ includeMetadata: true })) {
      queues[item.name] = { ...item.metadata };
    }
    return queues;
  }

  /** Fails with every difference from what was acknowledged before the restart `what`. */
  async checkAfterRestart(what) {
    const problems = [];
    const expected = new Map(this.messages.map((message) => [message.id, message]));
    const peeked = (await this.queue.peekMessages({ numberOfMessages: PEEK_MAX }))
      .peekedMessageItems;
    const found = new Map(peeked.map((message) => [message.messageId, message]));
    const lost = [...expected.keys()].filter((id) => !found.has(id));
    if (lost.length > 0) {
      problems.push(
        `${lost.length} of ${expected.size} acknowledged witness messages lost: ` +
          lost.map((id) => `${id} (${expected.get(id).text.length} bytes)`).join(", "),
      );
    }
    const extra = [...found.keys()].filter((id) => !expected.has(id));
    if (extra.length > 0) {
      problems.push(`witness messages never acknowledged (or deleted): ${extra.join(", ")}`);
    }
    for (const [id, want] of expected) {
      const got = found.get(id);
      if (got === undefined) {
        continue;
      }
      if (got.messageText !== want.text) {
        problems.push(
          `message ${id}: text of ${got.messageText.length} bytes, acknowledged ${want.text.length}`,
        );
      }
      if (got.insertedOn.getTime() !== want.insertedOn || got.expiresOn.getTime() !== want.expiresOn) {
        problems.push(`message ${id}: inserted ${got.insertedOn.toISOString()}, expires ` +
          `${got.expiresOn.toISOString()}, not as acknowledged`);
      }
      if (got.dequeueCount !== 0) {
        problems.push(`message ${id}: dequeue count ${got.dequeueCount}, never received`);
      }
    }
    const properties = await this.queue.getProperties();
    if (properties.approximateMessagesCount !== expected.size) {
      problems.push(
        `witness approximate message count ${properties.approximateMessagesCount}, ` +
          `acknowledged ${expected.size}`,
      );
    }
    if (!isDeepStrictEqual({ ...properties.metadata }, this.metadata)) {
      problems.push(`witness metadata ${JSON.stringify(properties.metadata)}, acknowledged ` +
        JSON.stringify(this.metadata));
    }
    const queues = await this.listQueues();
    for (const name of Object.keys(this.queues)) {
      if (!(name in queues)) {
        problems.push(`queue ${name} lost`);
      } else if (!isDeepStrictEqual(queues[name], this.queues[name])) {
        problems.push(`queue ${name}: metadata ${JSON.stringify(queues[name])}, acknowledged ` +
          JSON.stringify(this.queues[name]));
      }
    }
    for (const name of Object.keys(queues)) {
      if (!(name in this.queues)) {
        problems.push(`queue ${name} never created (or deleted)`);
      }
    }
    if (problems.length > 0) {
      assert.fail(
        `after ${what}, the server does not hold what it acknowledged before it ` +
          `(witness queue ${this.name}, round ${this.rounds}):\n  ${problems.join("\n  ")}`,
      );
    }
  }
}

// The official JavaScript SDK (@azure/storage-queue, pinned in package.json) against the real
// azq binary: the calls a Node.js application, Aspire or testcontainers setup makes, unchanged.
// The Python suite (tests/sdk) covers the contract in depth; this one proves the second SDK's
// wire format (its XML, dates, headers, SAS strings) is accepted and answered as it expects.
//
// Starts `AZQ_BIN` (default target/release/azq) on 127.0.0.1 with `--queuePort 0 --shards 2`
// (in memory, or with `AZQ_PERSISTENCE=disk` in a temporary directory), reads the port from its
// ready line and stops it with SIGTERM at the end; one test runs its own persistent server
// through a kill -9 and a SIGTERM, each restart compared with what was acknowledged before it
// (its queue's metadata, ACL, messages and receipts, and a witness queue whose puts end log
// flushes next to 4 KiB block boundaries: restart-witness.mjs). `AZQ_WRAPPER` runs
// azq through a command (the no-io-uring helper: io_uring denied as by Docker's default seccomp
// profile), and `AZQ_EXPECT_BACKEND` insists on the backend the ready line names (both read by
// azq-process.mjs, which starts and stops the server for both suites). Run with
// `node --test tests/sdk-js/queue.test.mjs` after `npm ci --prefix tests/sdk-js`;
// scripts/test.sh does both.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  AccountSASPermissions,
  AccountSASResourceTypes,
  AccountSASServices,
  QueueClient,
  QueueServiceClient,
  SASProtocol,
  StorageSharedKeyCredential,
  generateAccountSASQueryParameters,
  generateQueueSASQueryParameters,
} from "@azure/storage-queue";

import { startAzq, stopAzq } from "./azq-process.mjs";
import { RestartWitness } from "./restart-witness.mjs";

const ACCOUNT = "devstoreaccount1";
const KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
// Bounded retries: a failure shows at once instead of after the SDK's default backoff.
const CLIENT_OPTIONS = { retryOptions: { maxTries: 1, tryTimeoutInMs: 10_000 } };

let server;
let endpoint;
let service;
let queueNumber = 0;
const dataDirectories = [];

/** A new temporary directory for a server's data, removed at the end. */
function dataDirectory() {
  const directory = mkdtempSync(path.join(tmpdir(), "azq-js-"));
  dataDirectories.push(directory);
  return path.join(directory, "data");
}

/**
 * Starts azq on `port` (0: any free one) with its data in `location` (`null`: in memory) and
 * resolves with the process and its account URL once the ready line is printed.
 */
async function startServer({ port = 0, location = null } = {}) {
  const storage = location === null ? ["--inMemoryPersistence"] : ["--location", location];
  const { child, origin } = await startAzq([
    "--queueHost", "127.0.0.1", "--queuePort", String(port), "--shards", "2",
    ...storage,
  ]);
  return { child, endpoint: `${origin}/${ACCOUNT}` };
}

/** A fresh queue, created. */
async function newQueue(options = {}) {
  queueNumber += 1;
  const queue = service.getQueueClient(`js-${process.pid}-${queueNumber}`);
  await queue.create(options);
  return queue;
}

/** The rejection of `promise`: its HTTP status and `x-ms-error-code`. */
async function refusal(promise) {
  const error = await promise.then(
    () => assert.fail("expected the request to be refused"),
    (error) => error,
  );
  return [error.statusCode, error.code];
}

before(async () => {
  // AZQ_PERSISTENCE=disk: the session server keeps its data in a temporary directory.
  const location = process.env.AZQ_PERSISTENCE === "disk" ? dataDirectory() : null;
  ({ child: server, endpoint } = await startServer({ location }));
  const credential = new StorageSharedKeyCredential(ACCOUNT, KEY);
  service = new QueueServiceClient(endpoint, credential, CLIENT_OPTIONS);
});

after(async () => {
  await stopAzq(server);
  for (const directory of dataDirectories) {
    rmSync(directory, { recursive: true, force: true });
  }
});

test("queue metadata round trips", async () => {
  const queue = await newQueue({ metadata: { colour: "blue", size: "2" } });
  const properties = await queue.getProperties();
  assert.deepEqual(properties.metadata, { colour: "blue", size: "2" });
  assert.equal(properties.approximateMessagesCount, 0);
  await queue.setMetadata({ changed: "yes" });
  assert.deepEqual((await queue.getProperties()).metadata, { changed: "yes" });
});

test("messages: put, peek, receive, update, delete, clear", async () => {
  const queue = await newQueue();
  const sent = await queue.sendMessage("hello <&> 'world' ✓", { messageTimeToLive: -1 });
  assert.equal(sent.expiresOn.toISOString(), "9999-12-31T23:59:59.000Z");
  for (let index = 0; index < 40; index += 1) {
    await queue.sendMessage(`m${index}`);
  }
  const peeked = await queue.peekMessages({ numberOfMessages: 32 });
  assert.equal(peeked.peekedMessageItems.length, 32);
  assert.equal(peeked.peekedMessageItems[0].messageText, "hello <&> 'world' ✓");
  assert.equal(peeked.peekedMessageItems[0].dequeueCount, 0);

  const received = await queue.receiveMessages({ numberOfMessages: 3, visibilityTimeout: 60 });
  assert.deepEqual(
    received.receivedMessageItems.map((message) => message.messageText),
    ["hello <&> 'world' ✓", "m0", "m1"],
  );
  const [first] = received.receivedMessageItems;
  assert.equal(first.messageId, sent.messageId);
  assert.equal(first.dequeueCount, 1);

  const updated = await queue.updateMessage(first.messageId, first.popReceipt, "changed", 0);
  const [code] = await refusal(queue.deleteMessage(first.messageId, first.popReceipt));
  assert.equal(code, 400, "the receipt before the update no longer works");
  const again = await queue.peekMessages({ numberOfMessages: 1 });
  assert.equal(again.peekedMessageItems[0].messageText, "changed");
  await queue.deleteMessage(first.messageId, updated.popReceipt);
  assert.equal((await queue.getProperties()).approximateMessagesCount, 40);

  await queue.clearMessages();
  assert.equal((await queue.getProperties()).approximateMessagesCount, 0);
});

test("a leased message is hidden until its lease runs out", async () => {
  const queue = await newQueue();
  await queue.sendMessage("leased");
  const received = await queue.receiveMessages({ visibilityTimeout: 1 });
  assert.equal(received.receivedMessageItems.length, 1);
  assert.equal((await queue.receiveMessages()).receivedMessageItems.length, 0);
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const redelivered = await queue.receiveMessages();
  assert.equal(redelivered.receivedMessageItems[0].messageText, "leased");
  assert.equal(redelivered.receivedMessageItems[0].dequeueCount, 2);
});

test("errors carry Azure's status and code", async () => {
  const queue = await newQueue();
  assert.deepEqual(await refusal(queue.sendMessage("x".repeat(65_537))), [
    413,
    "RequestBodyTooLarge",
  ]);
  assert.deepEqual(await refusal(service.getQueueClient("Bad_Name").create()), [
    400,
    "InvalidResourceName",
  ]);
  assert.deepEqual(await refusal(queue.receiveMessages({ numberOfMessages: 33 })), [
    400,
    "OutOfRangeQueryParameterValue",
  ]);
  await queue.delete();
  assert.deepEqual(await refusal(queue.getProperties()), [404, "QueueNotFound"]);
});

test("list queues pages through every queue with metadata", async () => {
  const prefix = `jslist-${process.pid}-`;
  for (let index = 0; index < 7; index += 1) {
    await service.getQueueClient(`${prefix}${index}`).create({ metadata: { index: `${index}` } });
  }
  const listed = [];
  for await (const page of service.listQueues({ prefix, includeMetadata: true }).byPage({
    maxPageSize: 3,
  })) {
    assert.ok(page.queueItems.length <= 3);
    listed.push(...page.queueItems.map((item) => `${item.name}=${item.metadata.index}`));
  }
  assert.deepEqual(
    listed,
    [0, 1, 2, 3, 4, 5, 6].map((index) => `${prefix}${index}=${index}`),
  );
});

test("stored access policies and a service SAS that uses one", async () => {
  const queue = await newQueue();
  const policy = {
    id: "writers",
    accessPolicy: {
      permissions: "raup",
      startsOn: new Date("2026-01-01T00:00:00Z"),
      expiresOn: new Date("2099-01-01T00:00:00Z"),
    },
  };
  await queue.setAccessPolicy([policy]);
  const stored = await queue.getAccessPolicy();
  assert.deepEqual(stored.signedIdentifiers, [policy]);

  const credential = new StorageSharedKeyCredential(ACCOUNT, KEY);
  const sas = generateQueueSASQueryParameters(
    { queueName: queue.name, identifier: "writers" },
    credential,
  );
  const viaPolicy = new QueueClient(`${queue.url}?${sas}`, undefined, CLIENT_OPTIONS);
  await viaPolicy.sendMessage("via policy");
  const peeked = await viaPolicy.peekMessages();
  assert.equal(peeked.peekedMessageItems[0].messageText, "via policy");

  // Dropping the policy revokes the SAS.
  await queue.setAccessPolicy([]);
  assert.deepEqual(await refusal(viaPolicy.peekMessages()), [403, "AuthenticationFailed"]);
});

// The SDK's own live test of that name (queueclient.spec.ts): a policy with only a permission
// comes back as it went; one with no field comes back with no accessPolicy at all, as the
// service answers it (no AccessPolicy element; azq answered an empty one, read as
// {permissions: undefined}).
test("setAccessPolicy should work when permissions, expiry and start undefined", async () => {
  const queue = await newQueue();
  const id = "6D97528B-8412-48AE-9DB1-6BF69C9F83A6";
  const permissionOnly = [{ accessPolicy: { permissions: "raup" }, id }];
  await queue.setAccessPolicy(permissionOnly);
  assert.deepEqual((await queue.getAccessPolicy()).signedIdentifiers, permissionOnly);
  await queue.setAccessPolicy([{ accessPolicy: {}, id }]);
  const empty = await queue.getAccessPolicy();
  assert.deepEqual(empty.signedIdentifiers, [{ accessPolicy: undefined, id }]);
});

// The SDK's own live test of that name (sas.spec.ts): an account SAS that expired a day ago and
// carries no start. The service takes now as its start and says the window is empty; the test
// expects that detail ("Signed expiry time …"), not "Signature not valid in the specified time
// frame".
test("create queue with invalid SAS should fail", async () => {
  const yesterday = new Date(Date.now() - 86_400_000);
  const sas = generateAccountSASQueryParameters(
    {
      expiresOn: yesterday,
      permissions: AccountSASPermissions.parse("rwdlacup"),
      protocol: SASProtocol.HttpsAndHttp,
      resourceTypes: AccountSASResourceTypes.parse("sco").toString(),
      services: AccountSASServices.parse("btqf").toString(),
    },
    new StorageSharedKeyCredential(ACCOUNT, KEY),
  ).toString();
  assert.doesNotMatch(sas, /(^|&)st=/);
  const withSas = new QueueServiceClient(`${endpoint}?${sas}`, undefined, CLIENT_OPTIONS);
  const error = await withSas
    .getQueueClient(`js-${process.pid}-invalid-sas`)
    .create()
    .then(
      () => assert.fail("an expired SAS created a queue"),
      (refused) => refused,
    );
  assert.equal(error.statusCode, 403);
  assert.equal(error.details?.errorCode, "AuthenticationFailed");
  const detail = error.details?.authenticationErrorDetail ?? "";
  assert.ok(detail.startsWith("Signed expiry time ["), detail);
  assert.match(detail, /\] must be after signed start time \[/);
});

test("an account SAS authorises what it grants and nothing more", async () => {
  const queue = await newQueue();
  await queue.sendMessage("readable");
  const credential = new StorageSharedKeyCredential(ACCOUNT, KEY);
  const sas = (permissions) =>
    generateAccountSASQueryParameters(
      {
        expiresOn: new Date(Date.now() + 3_600_000),
        permissions: AccountSASPermissions.parse(permissions),
        resourceTypes: AccountSASResourceTypes.parse("sco").toString(),
        services: AccountSASServices.parse("q").toString(),
      },
      credential,
    ).toString();
  const reader = new QueueClient(`${queue.url}?${sas("r")}`, undefined, CLIENT_OPTIONS);
  assert.equal((await reader.peekMessages()).peekedMessageItems[0].messageText, "readable");
  assert.deepEqual(await refusal(reader.sendMessage("no")), [
    403,
    "AuthorizationPermissionMismatch",
  ]);
  const writer = new QueueClient(`${queue.url}?${sas("rwdlacup")}`, undefined, CLIENT_OPTIONS);
  await writer.sendMessage("yes");
  assert.equal((await queue.getProperties()).approximateMessagesCount, 2);
});

test("service properties: CORS rules and analytics settings round trip", async () => {
  const cors = [
    {
      allowedOrigins: "https://a.example",
      allowedMethods: "GET,PUT",
      allowedHeaders: "x-ms-meta-*",
      exposedHeaders: "x-ms-*",
      maxAgeInSeconds: 500,
    },
  ];
  const hourMetrics = {
    version: "1.0",
    enabled: true,
    includeAPIs: true,
    retentionPolicy: { enabled: true, days: 7 },
  };
  await service.setProperties({ cors, hourMetrics });
  try {
    const properties = await service.getProperties();
    assert.deepEqual(properties.cors, cors);
    assert.deepEqual(properties.hourMetrics, hourMetrics);
    assert.equal(properties.queueAnalyticsLogging.version, "1.0");
  } finally {
    await service.setProperties({ cors: [] });
  }
  assert.deepEqual((await service.getProperties()).cors, []);
});

test("a persistent server keeps queues, messages, receipts and policies across restarts", async () => {
  const location = dataDirectory();
  let running = await startServer({ location });
  const port = new URL(running.endpoint).port;
  try {
    const credential = new StorageSharedKeyCredential(ACCOUNT, KEY);
    const durable = new QueueServiceClient(running.endpoint, credential, CLIENT_OPTIONS);
    // Every restart below is also checked against a witness (restart-witness.mjs).
    const witness = await RestartWitness.create(durable, "js-witness");
    const queue = durable.getQueueClient("js-durable");
    await queue.create({ metadata: { owner: "js" } });
    const policy = {
      id: "readers",
      accessPolicy: {
        permissions: "rp",
        startsOn: new Date("2026-01-01T00:00:00Z"),
        expiresOn: new Date("2099-01-01T00:00:00Z"),
      },
    };
    await queue.setAccessPolicy([policy]);
    const sent = [];
    for (let index = 0; index < 5; index += 1) {
      sent.push(await queue.sendMessage(`kept ${index}`, { messageTimeToLive: -1 }));
    }
    await queue.deleteMessage(sent[0].messageId, sent[0].popReceipt);
    const [leased] = (await queue.receiveMessages({ visibilityTimeout: 300 }))
      .receivedMessageItems;
    assert.equal(leased.messageText, "kept 1");

    // kill -9: everything acknowledged above was on disk before its answer.
    await witness.beforeRestart();
    await stopAzq(running.child, "SIGKILL");
    running = await startServer({ port, location });
    await witness.checkAfterRestart("kill -9 and a restart");
    const properties = await queue.getProperties();
    assert.deepEqual(properties.metadata, { owner: "js" });
    assert.equal(properties.approximateMessagesCount, 4);
    assert.deepEqual((await queue.getAccessPolicy()).signedIdentifiers, [policy]);
    const peeked = await queue.peekMessages({ numberOfMessages: 32 });
    assert.deepEqual(
      peeked.peekedMessageItems.map((message) => message.messageText),
      ["kept 2", "kept 3", "kept 4"],
      "the leased message stays hidden and the deleted one stays gone",
    );
    // The receipt handed out before the crash still works after it.
    const updated = await queue.updateMessage(leased.messageId, leased.popReceipt, "moved", 0);

    await witness.beforeRestart();
    await stopAzq(running.child, "SIGTERM");
    running = await startServer({ port, location });
    await witness.checkAfterRestart("SIGTERM and a restart");
    const received = await queue.receiveMessages({ numberOfMessages: 32 });
    const texts = received.receivedMessageItems.map((message) => message.messageText);
    assert.deepEqual(texts.sort(), ["kept 2", "kept 3", "kept 4", "moved"]);
    const moved = received.receivedMessageItems.find((message) => message.messageText === "moved");
    assert.equal(moved.messageId, leased.messageId);
    assert.equal(moved.dequeueCount, 2);
    const [code] = await refusal(queue.deleteMessage(leased.messageId, updated.popReceipt));
    assert.equal(code, 400, "the receive after the restart replaced the receipt");
  } finally {
    await stopAzq(running.child);
  }
});

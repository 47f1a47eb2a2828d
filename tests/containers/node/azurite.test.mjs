// @testcontainers/azurite 11.7 (the last line for Node 20: 12.x needs Node 22), unchanged but for
// the image name: it replaces the entrypoint with `azurite`, passes the hosts as the command and
// waits for the three "service is successfully listening" lines. scripts/container-test.sh points
// it at podman's Docker-compatible socket (DOCKER_HOST), turns Ryuk off and forces the host to
// 127.0.0.1. Its connection string carries a queue round trip with the official JS SDK.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { QueueServiceClient } from "@azure/storage-queue";
import { AzuriteContainer } from "@testcontainers/azurite";

const image = process.env.AZQ_IMAGE;

const options = {
  skip: !image && "AZQ_IMAGE unset: run through scripts/container-test.sh",
  timeout: 180_000,
};

test("@testcontainers/azurite starts azq; its connection string works", options, async () => {
  const azurite = await new AzuriteContainer(image).withInMemoryPersistence().start();
  try {
    const connectionString = azurite.getConnectionString();
    assert.match(connectionString, /QueueEndpoint=http:\/\/127\.0\.0\.1:\d+\/devstoreaccount1/);
    const service = QueueServiceClient.fromConnectionString(connectionString, {
      retryOptions: { maxTries: 1 },
    });
    const queue = service.getQueueClient(`node-${randomUUID().slice(0, 12)}`);
    await queue.create();
    await queue.sendMessage("through @testcontainers/azurite");
    const received = await queue.receiveMessages({ numberOfMessages: 1 });
    assert.equal(received.receivedMessageItems.length, 1);
    assert.equal(received.receivedMessageItems[0].messageText, "through @testcontainers/azurite");
    await queue.delete();
  } finally {
    await azurite.stop();
  }
});

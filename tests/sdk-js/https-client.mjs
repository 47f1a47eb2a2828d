// The JavaScript SDK's side of https.test.mjs, run in a process of its own because Node reads
// NODE_EXTRA_CA_CERTS (the certificate azq made, trusted exactly as README tells Node users)
// only at start. With a token credential handing out a well-formed, unsigned JWT for the
// storage audience, as `--oauth basic` accepts: create a queue, send, receive, update, delete;
// then an expired token must be refused with 401. Prints what failed and exits 1, else exits 0.
//
//   AZQ_HTTPS_ENDPOINT=https://127.0.0.1:PORT/devstoreaccount1 \
//     NODE_EXTRA_CA_CERTS=cert.pem node tests/sdk-js/https-client.mjs

import assert from "node:assert/strict";
import { QueueServiceClient } from "@azure/storage-queue";

const endpoint = process.env.AZQ_HTTPS_ENDPOINT;
const CLIENT_OPTIONS = { retryOptions: { maxTries: 1, tryTimeoutInMs: 10_000 } };

/** base64url of `value` as JSON. */
function part(value) {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

/** A TokenCredential whose tokens expire `lifetimeS` seconds from now (negative: expired). */
function credential(lifetimeS) {
  return {
    async getToken() {
      const now = Math.floor(Date.now() / 1000);
      const claims = {
        aud: "https://storage.azure.com",
        iss: "https://sts.windows.net/ab1f708d-50f6-404c-a006-d71b2ac7a606/",
        nbf: now - 600,
        iat: now - 600,
        exp: now + lifetimeS,
        oid: "23657296-5cd5-45b0-a809-d972a7f4dfe1",
        tid: "ab1f708d-50f6-404c-a006-d71b2ac7a606",
      };
      const token = `${part({ alg: "RS256", typ: "JWT" })}.${part(claims)}.c2lnbmF0dXJl`;
      return { token, expiresOnTimestamp: (now + Math.max(lifetimeS, 1)) * 1000 };
    },
  };
}

async function main() {
  assert.ok(endpoint?.startsWith("https://"), `AZQ_HTTPS_ENDPOINT: ${endpoint}`);
  const service = new QueueServiceClient(endpoint, credential(3600), CLIENT_OPTIONS);
  const queue = service.getQueueClient(`js-https-${process.pid}`);
  await queue.create();
  await queue.sendMessage("over https with a bearer token");
  const received = await queue.receiveMessages({ numberOfMessages: 1, visibilityTimeout: 30 });
  assert.equal(received.receivedMessageItems.length, 1);
  const [message] = received.receivedMessageItems;
  assert.equal(message.messageText, "over https with a bearer token");
  const updated = await queue.updateMessage(message.messageId, message.popReceipt, "updated", 0);
  const peeked = await queue.peekMessages();
  assert.equal(peeked.peekedMessageItems[0].messageText, "updated");
  await queue.deleteMessage(message.messageId, updated.popReceipt);
  const properties = await queue.getProperties();
  assert.equal(properties.approximateMessagesCount, 0);

  const expired = new QueueServiceClient(endpoint, credential(-3600), CLIENT_OPTIONS);
  const refused = await expired
    .getQueueClient(queue.name)
    .getProperties()
    .then(
      () => assert.fail("an expired token was accepted"),
      (error) => error,
    );
  assert.equal(refused.statusCode, 401, String(refused));
  assert.equal(refused.details?.errorCode, "InvalidAuthenticationInfo", String(refused));
  await queue.delete();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);

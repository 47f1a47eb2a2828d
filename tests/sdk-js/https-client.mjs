// The JavaScript SDK's side of https.test.mjs, run in a process of its own because Node reads
// NODE_EXTRA_CA_CERTS (the certificate azq made, trusted exactly as README tells Node users)
// only at start. With a token credential handing out a well-formed, unsigned JWT for the
// storage audience, as `--oauth basic` accepts: create a queue, send, receive, update, delete;
// then an expired token must be refused with 401, and a token for another audience must be
// refused with a challenge the SDK follows. Prints what failed and exits 1, else exits 0.
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

const TENANT = "ab1f708d-50f6-404c-a006-d71b2ac7a606";

/**
 * A TokenCredential whose tokens expire `lifetimeS` seconds from now (negative: expired), for
 * the audience `audienceFor(options)` names (the storage resource unless told otherwise).
 */
function credential(lifetimeS, audienceFor = () => "https://storage.azure.com") {
  return {
    async getToken(scopes, options) {
      const now = Math.floor(Date.now() / 1000);
      const claims = {
        aud: audienceFor(options),
        iss: "https://sts.windows.net/ab1f708d-50f6-404c-a006-d71b2ac7a606/",
        nbf: now - 600,
        iat: now - 600,
        exp: now + lifetimeS,
        oid: "23657296-5cd5-45b0-a809-d972a7f4dfe1",
        tid: TENANT,
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

  // The bearer challenge: a token for the wrong audience is refused with 401 and a challenge
  // naming a tenant GUID (the token's); the SDK follows it, asking its credential again for
  // that tenant, and the request succeeds with the token it gets. With `common` in the
  // challenge (azq before issue 30) the SDK did not follow, and the request failed.
  const tenantsAsked = [];
  const challenged = new QueueServiceClient(
    endpoint,
    credential(3600, (options) => {
      tenantsAsked.push(options?.tenantId);
      return options?.tenantId ? "https://storage.azure.com" : "https://vault.azure.net";
    }),
    CLIENT_OPTIONS,
  );
  const followed = await challenged.getQueueClient(queue.name).getProperties();
  assert.equal(followed.approximateMessagesCount, 0);
  assert.deepEqual(tenantsAsked, [undefined, TENANT]);
  await queue.delete();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);

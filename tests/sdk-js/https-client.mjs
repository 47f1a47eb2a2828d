// The JavaScript SDK's side of https.test.mjs, run in a process of its own because Node reads
// NODE_EXTRA_CA_CERTS (the certificate azq made, trusted exactly as README tells Node users)
// only at start. With a token credential handing out a well-formed, unsigned JWT for the
// storage audience, as `--oauth basic` accepts: create a queue, send, receive, update, delete;
// then an expired token must be refused with 401, and a token for another audience must be
// refused with a challenge the SDK follows; then a user delegation SAS made with the SDK's own
// getUserDelegationKey and generateUserDelegationSasUrl, used and abused; the SDK's two live user
// delegation tests, which sign with `sv=2025-07-05`; and a bearer token beside a SAS that is
// broken, forged or another user's, which must not carry it through. Prints what failed and
// exits 1, else exits 0.
//
//   AZQ_HTTPS_ENDPOINT=https://127.0.0.1:PORT/devstoreaccount1 \
//     NODE_EXTRA_CA_CERTS=cert.pem node tests/sdk-js/https-client.mjs

import assert from "node:assert/strict";
import {
  QueueClient,
  QueueSASPermissions,
  QueueServiceClient,
  SASProtocol,
  generateQueueSASQueryParameters,
} from "@azure/storage-queue";

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
  await userDelegation(service);
  await liveUserDelegationTests(service);
  await tokenBesideSas(service);
}

const ACCOUNT = "devstoreaccount1";
const OID = "23657296-5cd5-45b0-a809-d972a7f4dfe1";

/**
 * The SDK's live tests "GenerateUserDelegationSAS with skuoid should work" and
 * "QueueClient.generateUserDelegationSasUrl should work" (sas.spec.ts), as they are written:
 * both sign with `version: "2025-07-05"` and expect success from the service.
 */
async function liveUserDelegationTests(service) {
  const now = new Date(Date.now() - 3_600_000);
  const tmr = new Date(Date.now() + 86_400_000);
  const key = await service.getUserDelegationKey(now, tmr);

  const bound = service.getQueueClient(`js-skuoid-${process.pid}`);
  await bound.create();
  const queueSAS = generateQueueSASQueryParameters(
    {
      queueName: bound.name,
      expiresOn: tmr,
      permissions: QueueSASPermissions.parse("raup"),
      protocol: SASProtocol.HttpsAndHttp,
      startsOn: now,
      delegatedUserObjectId: OID,
      version: "2025-07-05",
    },
    key,
    ACCOUNT,
  ).toString();
  assert.match(queueSAS, /sv=2025-07-05/);
  assert.match(queueSAS, new RegExp(`sduoid=${OID}`));
  const withToken = new QueueClient(`${bound.url}?${queueSAS}`, credential(3600), CLIENT_OPTIONS);
  await withToken.getProperties();
  await bound.delete();

  const queue = service.getQueueClient(`js-udsasurl-${process.pid}`);
  await queue.create();
  const queueSASUrl = queue.generateUserDelegationSasUrl(
    {
      expiresOn: tmr,
      permissions: QueueSASPermissions.parse("raup"),
      protocol: SASProtocol.HttpsAndHttp,
      startsOn: now,
      version: "2025-07-05",
    },
    key,
  );
  await new QueueClient(queueSASUrl, undefined, CLIENT_OPTIONS).getProperties();
  await queue.delete();
}

/**
 * A bearer token beside a SAS (issue 41): the SAS is checked and decides, so a token cannot
 * carry a SAS whose `sig` does not even read, a forged one, or another user's; nor widen what
 * a SAS grants.
 */
async function tokenBesideSas(service) {
  const key = await service.getUserDelegationKey(
    new Date(Date.now() - 60_000),
    new Date(Date.now() + 7_200_000),
  );
  const queue = service.getQueueClient(`js-token-sas-${process.pid}`);
  await queue.create();
  await queue.sendMessage("kept");
  const sas = (permissions, delegatedUserObjectId) =>
    new URL(
      queue.generateUserDelegationSasUrl(
        {
          permissions: QueueSASPermissions.parse(permissions),
          expiresOn: new Date(Date.now() + 3_600_000),
          delegatedUserObjectId,
        },
        key,
      ),
    );
  const withToken = (url) => new QueueClient(url.toString(), credential(3600), CLIENT_OPTIONS);

  const mine = sas("raup", OID);
  assert.equal((await withToken(mine).peekMessages()).peekedMessageItems.length, 1);
  const unreadable = new URL(mine);
  unreadable.searchParams.set("sig", `!${mine.searchParams.get("sig")}`);
  const forged = new URL(mine);
  forged.searchParams.set("sig", Buffer.alloc(32).toString("base64"));
  const brokenAndSomeoneElses = sas("raup", "someone-else");
  brokenAndSomeoneElses.searchParams.set("sig", "not base64!");
  for (const url of [unreadable, forged, sas("raup", "someone-else"), brokenAndSomeoneElses]) {
    assert.deepEqual(
      await refusal(withToken(url).sendMessage("carried by the token")),
      [403, "AuthenticationFailed"],
      url.search,
    );
  }
  // Readable and good, but read-only: the token does not widen it.
  assert.deepEqual(await refusal(withToken(sas("r")).sendMessage("no")), [
    403,
    "AuthorizationPermissionMismatch",
  ]);
  const left = await queue.peekMessages({ numberOfMessages: 32 });
  assert.deepEqual(
    left.peekedMessageItems.map((message) => message.messageText),
    ["kept"],
  );
  await queue.delete();
}

/** The status and error code a refused call ends with. */
async function refusal(call) {
  return call.then(
    () => assert.fail("accepted"),
    (error) => [error.statusCode, error.details?.errorCode],
  );
}

/**
 * User delegation SAS through the SDK's own paths: `getUserDelegationKey`, then
 * `generateUserDelegationSasUrl`, used by a client with no credential of its own; tampered,
 * expired and wrongly scoped URLs are refused with Azure's codes.
 */
async function userDelegation(service) {
  const startsOn = new Date(Date.now() - 60_000);
  const expiresOn = new Date(Date.now() + 7_200_000);
  const key = await service.getUserDelegationKey(startsOn, expiresOn);
  assert.equal(key.signedObjectId, "23657296-5cd5-45b0-a809-d972a7f4dfe1");
  assert.equal(key.signedTenantId, TENANT);
  assert.equal(key.signedService, "q");
  assert.equal(key.signedExpiresOn.getTime(), Math.floor(expiresOn.getTime() / 1000) * 1000);
  const queue = service.getQueueClient(`js-delegated-${process.pid}`);
  const other = service.getQueueClient(`js-other-${process.pid}`);
  await queue.create();
  await other.create();
  const sasUrl = (permissions, options = {}) =>
    queue.generateUserDelegationSasUrl(
      {
        permissions: QueueSASPermissions.parse(permissions),
        expiresOn: new Date(Date.now() + 3_600_000),
        ...options,
      },
      key,
    );
  const anonymous = (url) => new QueueClient(url, undefined, CLIENT_OPTIONS);

  const url = sasUrl("raup");
  assert.match(url, /skoid=.*sks=q/);
  const delegated = anonymous(url);
  await delegated.sendMessage("delegated by a key");
  const received = await delegated.receiveMessages({ numberOfMessages: 1 });
  const [message] = received.receivedMessageItems;
  assert.equal(message.messageText, "delegated by a key");
  await delegated.deleteMessage(message.messageId, message.popReceipt);
  assert.equal((await delegated.peekMessages()).peekedMessageItems.length, 0);

  // Tampered after signing: another object, a wider grant.
  for (const [name, value] of [
    ["skoid", "someone-else"],
    ["sp", "raup"],
  ]) {
    const tampered = new URL(sasUrl("r"));
    tampered.searchParams.set(name, value);
    assert.deepEqual(await refusal(anonymous(tampered.toString()).peekMessages()), [
      403,
      "AuthenticationFailed",
    ]);
  }
  // Expired.
  const expired = sasUrl("raup", {
    startsOn: new Date(Date.now() - 7_200_000),
    expiresOn: new Date(Date.now() - 3_600_000),
  });
  assert.deepEqual(await refusal(anonymous(expired).peekMessages()), [
    403,
    "AuthenticationFailed",
  ]);
  // Wrongly scoped: another queue, an operation not granted, one no SAS may do.
  const reader = new URL(sasUrl("r"));
  const elsewhere = new URL(reader);
  elsewhere.pathname = elsewhere.pathname.replace(queue.name, other.name);
  assert.deepEqual(await refusal(anonymous(elsewhere.toString()).peekMessages()), [
    403,
    "AuthenticationFailed",
  ]);
  assert.deepEqual(await refusal(anonymous(reader.toString()).sendMessage("no")), [
    403,
    "AuthorizationPermissionMismatch",
  ]);
  assert.deepEqual(await refusal(anonymous(reader.toString()).delete()), [
    403,
    "AuthorizationFailure",
  ]);
  await queue.delete();
  await other.delete();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);

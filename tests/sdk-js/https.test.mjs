// The official JavaScript SDK over HTTPS against `azq --cert auto --oauth basic` (issue 16): the
// certificate azq makes is fetched from /_azq/cert.pem, checked against the fingerprint azq
// printed, and trusted the way README tells Node users (NODE_EXTRA_CA_CERTS); the SDK then runs
// a queue's life with a bearer token, follows a bearer challenge, and gets a user delegation key
// to make and use user delegation SAS URLs (tests/sdk-js/https-client.mjs, in a process of its
// own).
// Without the certificate trusted, the same client must fail: the TLS check is real.
//
// Starts `AZQ_BIN` (default target/release/azq) on 127.0.0.1, in memory, with azq-process.mjs
// (`AZQ_WRAPPER` and `AZQ_EXPECT_BACKEND` as in queue.test.mjs). Run with
// `node --test tests/sdk-js/https.test.mjs`.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import path from "node:path";

import { startAzq, stopAzq } from "./azq-process.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CLIENT_TIMEOUT_MS = 60_000;

let server;
let origin;
let fingerprint;
let scratch;

/** GET `url` without checking the certificate (it is checked by its fingerprint instead). */
function fetchUnchecked(url) {
  return new Promise((resolve, reject) => {
    https
      .get(url, { rejectUnauthorized: false }, (response) => {
        let body = "";
        response.on("data", (chunk) => (body += chunk));
        response.on("end", () => resolve({ status: response.statusCode, body }));
      })
      .on("error", reject);
  });
}

/** Runs https-client.mjs against the server with `environment` added; its exit status and output. */
function runClient(environment) {
  const result = spawnSync(process.execPath, [path.join(HERE, "https-client.mjs")], {
    env: { ...process.env, AZQ_HTTPS_ENDPOINT: `${origin}/devstoreaccount1`, ...environment },
    encoding: "utf8",
    timeout: CLIENT_TIMEOUT_MS,
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

before(async () => {
  scratch = mkdtempSync(path.join(tmpdir(), "azq-js-https-"));
  ({ child: server, origin, fingerprint } = await startAzq(
    [
      "--queueHost", "127.0.0.1", "--queuePort", "0", "--shards", "2", "--inMemoryPersistence",
      "--cert", "auto", "--oauth", "basic",
    ],
    { fingerprint: true },
  ));
  assert.match(origin, /^https:/);
});

after(async () => {
  await stopAzq(server);
  if (scratch) {
    rmSync(scratch, { recursive: true, force: true });
  }
});

test("the served certificate is the one whose fingerprint azq printed", async () => {
  const { status, body } = await fetchUnchecked(`${origin}/_azq/cert.pem`);
  assert.equal(status, 200);
  assert.equal(new X509Certificate(body).fingerprint256, fingerprint);
  writeFileSync(path.join(scratch, "azq.pem"), body);
});

test("the SDK with a bearer token and a user delegation SAS over HTTPS, the certificate trusted by NODE_EXTRA_CA_CERTS", () => {
  const { status, output } = runClient({ NODE_EXTRA_CA_CERTS: path.join(scratch, "azq.pem") });
  assert.equal(status, 0, output);
});

test("without the certificate trusted the same client fails its TLS check", () => {
  const environment = { NODE_EXTRA_CA_CERTS: "" };
  const { status, output } = runClient(environment);
  assert.notEqual(status, 0, output);
  assert.match(output, /self[- ]signed|unable to verify|certificate/i);
});

// The official JavaScript SDK over HTTPS against `azq --cert auto --oauth basic` (issue 16): the
// certificate azq makes is fetched from /_azq/cert.pem, checked against the fingerprint azq
// printed, and trusted the way README tells Node users (NODE_EXTRA_CA_CERTS); the SDK then runs
// a queue's life with a bearer token (tests/sdk-js/https-client.mjs, in a process of its own).
// Without the certificate trusted, the same client must fail: the TLS check is real.
//
// Starts `AZQ_BIN` (default target/release/azq) on 127.0.0.1, in memory; `AZQ_WRAPPER` and
// `AZQ_EXPECT_BACKEND` as in queue.test.mjs. Run with `node --test tests/sdk-js/https.test.mjs`.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import path from "node:path";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(HERE, "..", "..");
const AZQ_BIN = process.env.AZQ_BIN ?? path.join(REPO_ROOT, "target", "release", "azq");
const AZQ_WRAPPER = (process.env.AZQ_WRAPPER ?? "").split(" ").filter((word) => word !== "");
const AZQ_EXPECT_BACKEND = process.env.AZQ_EXPECT_BACKEND;
const STARTUP_TIMEOUT_MS = 30_000;
const CLIENT_TIMEOUT_MS = 60_000;

let server;
let origin;
let fingerprint;
let scratch;

/** Starts azq with HTTPS and OAuth; resolves once both the ready and the certificate line are out. */
function startAzq() {
  return new Promise((resolve, reject) => {
    const args = [
      "--queueHost", "127.0.0.1", "--queuePort", "0", "--shards", "2", "--inMemoryPersistence",
      "--cert", "auto", "--oauth", "basic",
    ];
    const [command, ...prefix] = [...AZQ_WRAPPER, AZQ_BIN];
    const child = spawn(command, [...prefix, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const timer = setTimeout(() => reject(new Error("azq printed no ready line")), STARTUP_TIMEOUT_MS);
    let output = "";
    const seen = (chunk) => {
      output += chunk;
      const ready = output.match(/azq listening on (https:\/\/\S+:\d+) \(\d+ shards?, (\w+), in memory\)/);
      const certificate = output.match(/SHA-256 ([0-9A-F:]{95})/);
      if (ready && certificate) {
        clearTimeout(timer);
        if (AZQ_EXPECT_BACKEND && ready[2] !== AZQ_EXPECT_BACKEND) {
          reject(new Error(`azq runs on ${ready[2]}, not ${AZQ_EXPECT_BACKEND}`));
        } else {
          resolve({ child, origin: ready[1], fingerprint: certificate[1] });
        }
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", seen);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`azq exited (${code ?? signal}): ${output}`));
    });
  });
}

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
  ({ child: server, origin, fingerprint } = await startAzq());
});

after(() => {
  server?.kill("SIGTERM");
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

test("the SDK with a bearer token over HTTPS, the certificate trusted by NODE_EXTRA_CA_CERTS", () => {
  const { status, output } = runClient({ NODE_EXTRA_CA_CERTS: path.join(scratch, "azq.pem") });
  assert.equal(status, 0, output);
});

test("without the certificate trusted the same client fails its TLS check", () => {
  const environment = { NODE_EXTRA_CA_CERTS: "" };
  const { status, output } = runClient(environment);
  assert.notEqual(status, 0, output);
  assert.match(output, /self[- ]signed|unable to verify|certificate/i);
});

// Starting and stopping the real azq binary for the JavaScript SDK suites (queue.test.mjs,
// https.test.mjs): the ready line is awaited on stdout or stderr, and stderr is passed through
// to the test's own, so nothing azq says is lost.
//
// Environment: `AZQ_BIN` (default target/release/azq); `AZQ_WRAPPER`, a command that runs azq
// (its command line follows), e.g. the no-io-uring helper, words split on spaces; `AZQ_ARGS`,
// extra arguments appended to every server's command line (words split on spaces), as the
// Python suite's; and `AZQ_EXPECT_BACKEND`, the backend the ready line must name (io_uring or
// portable).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const AZQ_BIN = process.env.AZQ_BIN ?? path.join(REPO_ROOT, "target", "release", "azq");
const AZQ_WRAPPER = (process.env.AZQ_WRAPPER ?? "").split(" ").filter((word) => word !== "");
const AZQ_ARGS = (process.env.AZQ_ARGS ?? "").split(" ").filter((word) => word !== "");
const AZQ_EXPECT_BACKEND = process.env.AZQ_EXPECT_BACKEND;
const STARTUP_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;
const READY_LINE = /azq listening on (https?:\/\/\S+:\d+) \(\d+ shards?, (\w+), (in memory|data [^)]+)\)/;
const FINGERPRINT_LINE = /SHA-256 ([0-9A-F:]{95})/;

/**
 * Starts azq with `args` (then AZQ_ARGS) and resolves once its ready line is out (and, with
 * `fingerprint`, the line naming its certificate's SHA-256 fingerprint): `{ child, origin,
 * fingerprint }`, `origin` being the scheme, host and port it serves. Rejects when azq exits
 * first, prints no ready line within STARTUP_TIMEOUT_MS, or runs on another backend than
 * AZQ_EXPECT_BACKEND.
 */
export function startAzq(args, { fingerprint: wantFingerprint = false } = {}) {
  return new Promise((resolve, reject) => {
    const [command, ...prefix] = [...AZQ_WRAPPER, AZQ_BIN];
    const child = spawn(command, [...prefix, ...args, ...AZQ_ARGS], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const timer = setTimeout(
      () => reject(new Error("azq printed no ready line")),
      STARTUP_TIMEOUT_MS,
    );
    let output = "";
    const seen = (chunk) => {
      output += chunk;
      const ready = output.match(READY_LINE);
      const fingerprint = output.match(FINGERPRINT_LINE);
      if (!ready || (wantFingerprint && !fingerprint)) {
        return;
      }
      clearTimeout(timer);
      if (AZQ_EXPECT_BACKEND && ready[2] !== AZQ_EXPECT_BACKEND) {
        reject(new Error(`azq runs on ${ready[2]}, not ${AZQ_EXPECT_BACKEND}`));
      } else {
        resolve({ child, origin: ready[1], fingerprint: fingerprint?.[1] });
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", (chunk) => {
      process.stderr.write(chunk);
      seen(chunk);
    });
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

/** Stops `child` with `signal` and resolves once it has exited; fails after STOP_TIMEOUT_MS. */
export async function stopAzq(child, signal = "SIGTERM") {
  // Nothing to stop when the spawn failed or azq already ended (by exit code or signal).
  if (!child || child.pid === undefined || child.exitCode !== null || child.signalCode) {
    return;
  }
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill(signal);
  let timer;
  const stopped = await Promise.race([
    exited.then(() => true),
    new Promise((resolve) => {
      timer = setTimeout(() => resolve(false), STOP_TIMEOUT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (!stopped) {
    child.kill("SIGKILL");
    assert.fail(`azq did not exit within ${STOP_TIMEOUT_MS} ms of ${signal}`);
  }
}

// azq console: plain JavaScript, no framework, no build step. Every second it reads
// /_azq/stats (server-wide history), /_azq/inspect (queues and their counts) and, on a queue's
// page, /_azq/inspect/{account}/{queue} (its messages). Per-queue rates are differences of the
// queues' activity counters between two reads. Mutations go to /_azq/admin/... and answer 403
// unless azq runs with --admin. Accounts with a private key show only after a sign-in
// (/_azq/session: the key is sent once, answered with an HttpOnly session cookie).
"use strict";

const REFRESH_MS = 1000;
const PAGE_SIZE = 50;
const COLORS = ["#0a66c2", "#d1495b", "#2a9d8f", "#e9a23b", "#7b5ea7", "#6c757d", "#3d5a80",
  "#c05299", "#4f772d", "#9c6644"];
const ACTIVITY = ["puts", "delivered", "empty_gets", "deletes", "updates", "redelivered"];

const state = {
  rangeS: 60,
  points: [],
  stepS: 1,
  admin: false,
  previousQueues: null, // {time, byKey: Map(key -> activity)}
  rates: new Map(),
  queue: null, // {account, name} on a queue's page
  offset: 0,
  nextOffset: null,
  busy: false,
};

const $ = (selector) => document.querySelector(selector);

function format(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(digits) + "M";
  if (Math.abs(value) >= 1e4) return (value / 1e3).toFixed(digits) + "k";
  if (Number.isInteger(value)) return String(value);
  return value.toFixed(digits);
}

function bytes(value) {
  if (value < 1024) return value + " B";
  if (value < 1 << 20) return (value / 1024).toFixed(1) + " KiB";
  return (value / (1 << 20)).toFixed(1) + " MiB";
}

function time(iso) {
  if (!iso) return "never";
  const date = new Date(iso);
  const seconds = Math.round((date.getTime() - Date.now()) / 1000);
  // UTC, as the server's times; the date only when it is not within a day.
  const clock = Math.abs(seconds) < 86400
    ? date.toISOString().slice(11, 19)
    : date.toISOString().slice(0, 16).replace("T", " ");
  if (Math.abs(seconds) < 1) return clock + " (now)";
  const span = (total) => (total >= 86400 ? `${Math.round(total / 86400)}d`
    : total >= 3600 ? `${Math.round(total / 3600)}h` : total >= 60 ? `${Math.round(total / 60)}m`
      : `${total}s`);
  return clock + (seconds > 0 ? ` (in ${span(seconds)})` : ` (${span(-seconds)} ago)`);
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

async function admin(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.error || `${response.status}`);
  return answer;
}

function text(element, value) {
  element.textContent = value;
}

function cell(row, value, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = value;
  row.appendChild(td);
  return td;
}

// ---- Charts: a line per series, drawn as SVG. ----

function chart(container, series, { minMax = 1 } = {}) {
  const width = 600, height = 140, pad = 30;
  const times = state.points.map((point) => point.t);
  const now = times.length ? times[times.length - 1] : Date.now();
  const start = now - state.rangeS * 1000;
  let max = minMax;
  for (const line of series) for (const value of line.values) if (value > max) max = value;
  const x = (t) => pad + ((t - start) / (now - start || 1)) * (width - pad - 4);
  const y = (value) => height - 14 - (value / max) * (height - 24);
  let svg = `<svg viewBox="0 0 ${width} ${height}" preserveAspectRatio="none" role="img">`;
  svg += `<line x1="${pad}" y1="${y(0)}" x2="${width}" y2="${y(0)}" stroke="#dfe3ea"/>`;
  svg += `<line x1="${pad}" y1="${y(max)}" x2="${width}" y2="${y(max)}" stroke="#f0f2f5"/>`;
  svg += `<text x="2" y="${y(max) + 4}" font-size="10" fill="#6b7482">${format(max)}</text>`;
  svg += `<text x="2" y="${y(0)}" font-size="10" fill="#6b7482">0</text>`;
  series.forEach((line, index) => {
    const coordinates = [];
    line.values.forEach((value, at) => {
      if (value !== null && value !== undefined && times[at] >= start) {
        coordinates.push(`${x(times[at]).toFixed(1)},${y(value).toFixed(1)}`);
      }
    });
    if (coordinates.length) {
      const color = COLORS[index % COLORS.length];
      svg += `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${coordinates.join(" ")}"/>`;
    }
  });
  svg += "</svg>";
  container.innerHTML = svg;
  // The legend is built with the DOM: the page's Content-Security-Policy forbids inline styles
  // in markup (and names come from the server).
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((line, index) => {
    const entry = document.createElement("span");
    entry.style.setProperty("--swatch", COLORS[index % COLORS.length]);
    entry.textContent = line.name;
    legend.appendChild(entry);
  });
  container.appendChild(legend);
}

function drawCharts() {
  const points = state.points;
  const operations = new Set();
  for (const point of points) for (const name of Object.keys(point.ops)) operations.add(name);
  const names = [...operations].sort();
  // Requests no REST operation answered: azq's own endpoints (this console, metrics scrapes).
  const label = (name) => (name === "none" ? "azq endpoints" : name);
  chart($("#chart-requests"), names.map((name) => ({
    name: label(name), values: points.map((point) => (point.ops[name] ? point.ops[name].rate : 0)),
  })));
  chart($("#chart-latency"), names.map((name) => ({
    name: label(name),
    values: points.map((point) => (point.ops[name] ? point.ops[name].p99_ms : null)),
  })), { minMax: 0.1 });
  chart($("#chart-consumers"), ACTIVITY.map((name) => ({
    name: name.replace("_", " "), values: points.map((point) => point[name]),
  })));
  chart($("#chart-governor"), ["throttled", "faults", "wal_flushes"].map((name) => ({
    name: name.replace("_", " "), values: points.map((point) => point[name]),
  })));
  chart($("#chart-messages"), [{ name: "messages", values: points.map((point) => point.messages) }]);
  const last = points[points.length - 1];
  const table = $("#latency-table");
  table.innerHTML = "<tr><th>operation</th><th class=num>req/s</th><th class=num>p50</th>" +
    "<th class=num>p99</th><th class=num>errors/s</th></tr>";
  if (last) {
    for (const name of Object.keys(last.ops).sort()) {
      const op = last.ops[name];
      const row = document.createElement("tr");
      cell(row, label(name));
      cell(row, format(op.rate), "num");
      cell(row, op.p50_ms === null ? "–" : "≤ " + op.p50_ms, "num");
      cell(row, op.p99_ms === null ? "–" : "≤ " + op.p99_ms, "num");
      cell(row, format(op.errors), "num");
      table.appendChild(row);
    }
    const rps = Object.values(last.ops).reduce((sum, op) => sum + op.rate, 0);
    text($("#tile-rps"), format(rps));
    text($("#tile-empty"), format(last.empty_gets));
    text($("#tile-redelivered"), format(last.redelivered));
    text($("#tile-throttled"), format(last.throttled));
    text($("#tile-faults"), format(last.faults));
    text($("#tile-wal"), format(last.wal_flushes));
    text($("#tile-connections"), format(last.connections));
  }
}

async function refreshStats() {
  const since = state.points.length ? state.points[state.points.length - 1].t : 0;
  const answer = await getJson(`/_azq/stats?range=${state.rangeS}&since=${since}`);
  if (answer.step_s !== state.stepS) state.points = [];
  state.stepS = answer.step_s;
  state.points.push(...answer.points);
  const newest = state.points.length ? state.points[state.points.length - 1].t : 0;
  state.points = state.points.filter((point) => point.t > newest - state.rangeS * 1000);
  drawCharts();
}

// ---- Queues ----

function queueKey(queue) {
  return `${queue.account}/${queue.name}`;
}

function updateRates(answer) {
  const now = answer.time_ms;
  const byKey = new Map(answer.queues.map((queue) => [queueKey(queue), queue.activity]));
  const previous = state.previousQueues;
  if (previous && now > previous.time) {
    const seconds = (now - previous.time) / 1000;
    for (const [key, activity] of byKey) {
      const before = previous.byKey.get(key);
      if (!before) continue;
      const rate = {};
      for (const name of ACTIVITY) rate[name] = Math.max(0, activity[name] - before[name]) / seconds;
      state.rates.set(key, rate);
    }
  }
  state.previousQueues = { time: now, byKey };
}

function setAdmin(admin) {
  state.admin = admin;
  document.body.classList.toggle("admin", admin);
  const badge = $("#admin-state");
  badge.textContent = admin ? "admin actions on" : "read-only";
  badge.classList.toggle("on", admin);
  $("#admin-note").hidden = admin;
}

async function refreshQueues() {
  const answer = await getJson("/_azq/inspect?limit=1000");
  setAdmin(answer.admin);
  updateRates(answer);
  const body = $("#queues tbody");
  body.replaceChildren();
  let messages = 0;
  for (const queue of answer.queues) {
    messages += queue.messages;
    const rate = state.rates.get(queueKey(queue)) || {};
    const row = document.createElement("tr");
    row.dataset.account = queue.account;
    row.dataset.queue = queue.name;
    cell(row, queue.account);
    cell(row, queue.name);
    for (const name of ["messages", "visible", "leased", "delayed", "expired"]) {
      cell(row, format(queue[name]), "num");
    }
    cell(row, bytes(queue.text_bytes), "num");
    for (const name of ["puts", "delivered", "empty_gets", "deletes", "updates", "redelivered"]) {
      cell(row, format(rate[name]), "num");
    }
    row.addEventListener("click", () => {
      location.hash = `#/queue/${encodeURIComponent(queue.account)}/${encodeURIComponent(queue.name)}`;
    });
    body.appendChild(row);
  }
  $("#queues-empty").hidden = answer.queues.length > 0;
  text($("#tile-messages"), format(messages));
  text($("#tile-queues"), format(answer.queues.length) + (answer.next ? "+" : ""));
}

// ---- One queue ----

function queuePath(prefix) {
  const { account, name } = state.queue;
  return `${prefix}/${encodeURIComponent(account)}/${encodeURIComponent(name)}`;
}

async function refreshQueue() {
  if (!state.queue) return;
  let answer;
  try {
    answer = await getJson(`${queuePath("/_azq/inspect")}?offset=${state.offset}&limit=${PAGE_SIZE}`);
  } catch (error) {
    text($("#queue-title"), `${state.queue.account} / ${state.queue.name}: not found`);
    $("#messages tbody").replaceChildren();
    return;
  }
  const queue = answer.queue;
  text($("#queue-title"), `${queue.account} / ${queue.name}`);
  const counts = $("#queue-counts");
  counts.replaceChildren();
  for (const name of ["messages", "visible", "leased", "delayed", "expired"]) {
    const tile = document.createElement("div");
    tile.className = "tile";
    tile.innerHTML = `<div class="label">${name}</div><div class="value"></div>`;
    tile.querySelector(".value").textContent = format(queue[name]);
    tile.id = `queue-${name}`;
    counts.appendChild(tile);
  }
  const body = $("#messages tbody");
  body.replaceChildren();
  answer.messages.forEach((message, index) => {
    const row = document.createElement("tr");
    row.dataset.id = message.id;
    cell(row, String(state.offset + index + 1), "num");
    cell(row, message.id);
    cell(row, message.state, `state-${message.state}` + (message.expired ? " expired" : ""));
    cell(row, String(message.dequeue_count), "num");
    cell(row, time(message.insertion_time));
    cell(row, time(message.time_next_visible));
    cell(row, time(message.expiration_time));
    cell(row, bytes(message.bytes), "num");
    const textCell = cell(row, message.text_on_disk ? "(on disk)" : message.text, "text");
    if (message.text_decoded !== undefined) {
      const decoded = document.createElement("span");
      decoded.className = "decoded";
      decoded.textContent = "base64 → " + message.text_decoded;
      textCell.appendChild(decoded);
    }
    const actions = document.createElement("td");
    if (state.admin) {
      const remove = document.createElement("button");
      remove.textContent = "Delete";
      remove.className = "danger";
      remove.addEventListener("click", () => act(() =>
        admin("DELETE", `${queuePath("/_azq/admin")}/messages/${message.id}`), "deleted"));
      actions.appendChild(remove);
    }
    row.appendChild(actions);
    body.appendChild(row);
  });
  state.nextOffset = answer.next_offset;
  $("#previous-page").disabled = state.offset === 0;
  $("#next-page").disabled = answer.next_offset === null;
  const last = state.offset + answer.messages.length;
  text($("#page-info"), answer.messages.length
    ? `${state.offset + 1}–${last} of ${queue.messages}` : "no messages");
}

async function act(action, done) {
  const result = $("#action-result");
  try {
    const answer = await action();
    result.textContent = typeof done === "function" ? done(answer) : done;
  } catch (error) {
    result.textContent = "failed: " + error.message;
  }
  await refresh();
}

// ---- Routing and the refresh loop ----

function route() {
  const match = location.hash.match(/^#\/queue\/([^/]+)\/([^/]+)$/);
  state.queue = match
    ? { account: decodeURIComponent(match[1]), name: decodeURIComponent(match[2]) }
    : null;
  state.offset = 0;
  $("#overview").hidden = !!state.queue;
  $("#queues-section").hidden = !!state.queue;
  $("#queue-page").hidden = !state.queue;
  $("#action-result").textContent = "";
  refresh();
}

// ---- Sign-in ----

async function refreshSession() {
  const session = await getJson("/_azq/session");
  const who = $("#who");
  if (session.account) {
    const until = new Date(session.expires_ms).toISOString().slice(11, 16);
    text(who, `signed in as ${session.account} (until ${until} UTC)`);
  } else {
    text(who, `not signed in: showing ${session.open_accounts.join(", ") || "no account"}`);
  }
  who.hidden = !session.sign_in_required && !session.account;
  $("#sign-in-form").hidden = !session.sign_in_required || Boolean(session.account);
  $("#sign-out").hidden = !session.account;
  document.body.dataset.account = session.account || "";
}

async function signIn(event) {
  event.preventDefault();
  const key = $("#sign-in-key");
  const response = await fetch("/_azq/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ account: $("#sign-in-account").value, key: key.value }),
  });
  key.value = "";
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    alert(answer.error || `sign-in failed: ${response.status}`);
  }
  state.previousQueues = null;
  refresh();
}

async function signOut() {
  await fetch("/_azq/session", { method: "DELETE" });
  state.previousQueues = null;
  location.hash = "#/";
  refresh();
}

async function refreshHealth() {
  const health = await getJson("/_azq/health");
  text($("#server"), `${health.status} · ${health.shards} shards · ${health.backend} · up ${health.uptime_s}s`);
}

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    await refreshSession();
    await Promise.all([refreshHealth(), refreshStats(), refreshQueues(), refreshQueue()]);
    document.body.dataset.refreshed = String(Date.now());
  } catch (error) {
    text($("#server"), "unreachable: " + error.message);
  } finally {
    state.busy = false;
  }
}

function setup() {
  for (const button of document.querySelectorAll("#range button")) {
    button.addEventListener("click", () => {
      state.rangeS = Number(button.dataset.range);
      state.points = [];
      for (const other of document.querySelectorAll("#range button")) {
        other.classList.toggle("selected", other === button);
      }
      refresh();
    });
  }
  $("#send-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const count = Number($("#send-count").value) || 1;
    act(() => admin("POST", `${queuePath("/_azq/admin")}/messages`, {
      text: $("#send-text").value,
      visibility_delay_s: Number($("#send-delay").value) || 0,
      ttl_s: Number($("#send-ttl").value),
      count,
    }), (answer) => `sent ${answer.put}`);
  });
  $("#receive-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act(() => admin("POST", `${queuePath("/_azq/admin")}/receive`, {
      count: Number($("#receive-count").value) || 1,
      visibility_timeout_s: Number($("#receive-lease").value) || 30,
    }), (answer) => `received ${answer.messages.length}: ` +
      answer.messages.map((message) => message.text).join(", "));
  });
  $("#clear-button").addEventListener("click", () => {
    if (confirm("Delete every message of this queue?")) {
      act(() => admin("POST", `${queuePath("/_azq/admin")}/clear`), "cleared");
    }
  });
  $("#create-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const account = $("#create-account").value || "devstoreaccount1";
    const name = $("#create-name").value;
    act(() => admin("POST", `/_azq/admin/${encodeURIComponent(account)}/${encodeURIComponent(name)}`),
      `created ${name}`);
  });
  $("#previous-page").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - PAGE_SIZE);
    refresh();
  });
  $("#next-page").addEventListener("click", () => {
    if (state.nextOffset !== null) state.offset = state.nextOffset;
    refresh();
  });
  $("#sign-in-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  route();
  setInterval(refresh, REFRESH_MS);
}

setup();

//! What `GET /_azq/metrics` reports, in Prometheus' text format (version 0.0.4).
//!
//! Each shard counts its own requests in plain `Cell`s (no atomics, nothing shared): requests by
//! operation and status (rendered with Azure's `ResponseType` beside the status), request
//! latency by operation (histograms of power-of-two buckets: every answer's server time, then
//! successful answers' server time and end-to-end time, Azure's `SuccessServerLatency` and
//! `SuccessE2ELatency`), throttled requests by scope and injected faults by action. A scrape
//! asks every shard over the mesh for a `Snapshot` (these counters plus its connections, mesh
//! traffic, queues, messages, message events, its log's flushes and its deepest queues) and
//! `render` merges them. Series are bounded: 20 operation slots × 16 statuses of requests (only
//! those seen), 3 × 20 × 19 histogram lines (only operations seen), seven message events, the
//! log's four, a few per shard, and `METRICS_DEEPEST_QUEUES` queue depths (only with
//! `--metrics queues`: the endpoint needs no credentials, so by default it names no queue).
//!
//! Memory against disk: each shard's `--max-memory` charge and share (`azq_message_bytes`,
//! `azq_message_bytes_limit`), its files and share of `--max-disk` (`azq_disk_bytes`,
//! `azq_disk_limit_bytes`), the file system's free space (`azq_filesystem_free_bytes`, absent
//! in memory), texts on disk only and those read back (`azq_texts_on_disk`,
//! `azq_text_reads_total`, `azq_text_read_ahead_total`, …; `--text-memory`), the 503s each
//! limit answered (`azq_memory_refusals_total`, `azq_disk_refusals_total`) and the process's
//! resident memory (`process_resident_memory_bytes`, Prometheus' standard name, on Linux).

use std::cell::Cell;
use std::fmt::Write;

use crate::console::history::ACTIVITY_NAMES;
use crate::limits::METRICS_DEEPEST_QUEUES;
use crate::operation::Operation;
use crate::queue::{Activity, Refusals};
use crate::storage::log::LogStats;
use crate::time::{latency_bucket, LATENCY_BUCKETS};

/// The statuses counted by their own label; anything else is `other`.
const STATUSES: [u16; 15] = [
    200, 201, 204, 206, 304, 400, 401, 403, 404, 405, 409, 413, 431, 500, 503,
];
/// `STATUSES` and `other`.
const STATUS_SLOTS: usize = STATUSES.len() + 1;
/// `Operation::ALL` and requests that were never routed to an operation (`none`).
const OPERATION_SLOTS: usize = Operation::ALL.len() + 1;
/// Labels of the faults-fired counter, in slot order.
const FAULT_ACTIONS: [&str; 5] = [
    "ServerBusy",
    "OperationTimedOut",
    "InternalError",
    "delay",
    "reset",
];
/// Labels of the throttled counter, in slot order.
const THROTTLE_SCOPES: [&str; 2] = ["queue", "account"];

/// Where a request was throttled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `--queue-rate-limit`, on the queue's owner.
    Queue,
    /// `--account-rate-limit`, on the shard the request arrived on.
    Account,
}

/// One shard's counters; only its own thread touches them.
#[derive(Debug)]
pub struct ShardMetrics {
    requests: Box<[Cell<u64>]>,
    latency_buckets: Box<[Cell<u64>]>,
    latency_sum_us: Box<[Cell<u64>]>,
    /// The same for successful answers (below 400) only: Azure's SuccessServerLatency.
    success_buckets: Box<[Cell<u64>]>,
    success_sum_us: Box<[Cell<u64>]>,
    /// Successful answers from arrival to written (the log's wait included): SuccessE2ELatency.
    e2e_buckets: Box<[Cell<u64>]>,
    e2e_sum_us: Box<[Cell<u64>]>,
    throttled: [Cell<u64>; 2],
    faults_fired: [Cell<u64>; 5],
    /// Open connections on this shard.
    pub connections: Cell<usize>,
    /// Bytes of answers this shard's connections are writing (queued for clients).
    pub pending_output_bytes: Cell<usize>,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        let cells = |count: usize| (0..count).map(|_| Cell::new(0)).collect();
        ShardMetrics {
            requests: cells(OPERATION_SLOTS * STATUS_SLOTS),
            latency_buckets: cells(OPERATION_SLOTS * LATENCY_BUCKETS),
            latency_sum_us: cells(OPERATION_SLOTS),
            success_buckets: cells(OPERATION_SLOTS * LATENCY_BUCKETS),
            success_sum_us: cells(OPERATION_SLOTS),
            e2e_buckets: cells(OPERATION_SLOTS * LATENCY_BUCKETS),
            e2e_sum_us: cells(OPERATION_SLOTS),
            throttled: Default::default(),
            faults_fired: Default::default(),
            connections: Cell::new(0),
            pending_output_bytes: Cell::new(0),
        }
    }
}

fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().wrapping_add(by));
}

/// The operation's counter slot (`none`: never routed).
pub fn operation_slot(operation: Option<Operation>) -> usize {
    operation.map_or(Operation::ALL.len(), Operation::index)
}

/// Azure's `ResponseType` of an answer with the status of slot `status` (derived from the
/// status alone: a 500 is `ServerOtherError` whether or not it was a timeout).
fn response_type(status: Option<u16>) -> &'static str {
    match status {
        Some(200..=399) => "Success",
        Some(503) => "ServerBusyError",
        Some(500..=599) => "ServerOtherError",
        Some(401) => "AuthenticationError",
        Some(403) => "AuthorizationError",
        Some(400..=499) => "ClientOtherError",
        _ => "Other",
    }
}

impl ShardMetrics {
    /// Counts one answered request.
    pub fn request(&self, operation: Option<Operation>, status: u16, latency_us: u64) {
        let operation = operation_slot(operation);
        let slot = STATUSES
            .iter()
            .position(|&known| known == status)
            .unwrap_or(STATUSES.len());
        bump(&self.requests[operation * STATUS_SLOTS + slot], 1);
        let bucket = operation * LATENCY_BUCKETS + latency_bucket(latency_us);
        bump(&self.latency_buckets[bucket], 1);
        bump(&self.latency_sum_us[operation], latency_us);
        if status < 400 {
            bump(&self.success_buckets[bucket], 1);
            bump(&self.success_sum_us[operation], latency_us);
        }
    }

    /// Counts one successful answer of operation slot `operation` (`operation_slot`) written
    /// `latency_us` after its request arrived.
    pub fn end_to_end(&self, operation: usize, latency_us: u64) {
        bump(
            &self.e2e_buckets[operation * LATENCY_BUCKETS + latency_bucket(latency_us)],
            1,
        );
        bump(&self.e2e_sum_us[operation], latency_us);
    }

    /// Counts one throttled request.
    pub fn throttled(&self, scope: Scope) {
        bump(&self.throttled[scope as usize], 1);
    }

    /// Counts one fired fault, by its label (`Action::label`).
    pub fn fault_fired(&self, label: &str) {
        if let Some(slot) = FAULT_ACTIONS.iter().position(|&known| known == label) {
            bump(&self.faults_fired[slot], 1);
        }
    }

    /// The counters as plain data, to cross the mesh.
    pub fn counters(&self) -> Counters {
        let read = |cells: &[Cell<u64>]| cells.iter().map(Cell::get).collect();
        Counters {
            requests: read(&self.requests),
            latency_buckets: read(&self.latency_buckets),
            latency_sum_us: read(&self.latency_sum_us),
            success_buckets: read(&self.success_buckets),
            success_sum_us: read(&self.success_sum_us),
            e2e_buckets: read(&self.e2e_buckets),
            e2e_sum_us: read(&self.e2e_sum_us),
            throttled: read(&self.throttled),
            faults_fired: read(&self.faults_fired),
            connections: self.connections.get() as u64,
            pending_output_bytes: self.pending_output_bytes.get() as u64,
        }
    }
}

/// A shard's counters, read.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    requests: Vec<u64>,
    latency_buckets: Vec<u64>,
    latency_sum_us: Vec<u64>,
    success_buckets: Vec<u64>,
    success_sum_us: Vec<u64>,
    e2e_buckets: Vec<u64>,
    e2e_sum_us: Vec<u64>,
    throttled: Vec<u64>,
    faults_fired: Vec<u64>,
    connections: u64,
    pending_output_bytes: u64,
}

impl Counters {
    /// Requests answered per operation slot, and of those the ones answered 400 or above.
    pub fn requests_and_errors(&self) -> (Vec<u64>, Vec<u64>) {
        let mut requests = vec![0; OPERATION_SLOTS];
        let mut errors = vec![0; OPERATION_SLOTS];
        for (index, &count) in self.requests.iter().enumerate() {
            let (operation, slot) = (index / STATUS_SLOTS, index % STATUS_SLOTS);
            requests[operation] += count;
            if STATUSES.get(slot).is_none_or(|&status| status >= 400) {
                errors[operation] += count;
            }
        }
        (requests, errors)
    }

    /// Every answer's latency histogram, `LATENCY_BUCKETS` per operation slot.
    pub fn latency_buckets(&self) -> &[u64] {
        &self.latency_buckets
    }

    /// Requests throttled, any scope, and faults injected, any action.
    pub fn throttled_and_faults(&self) -> (u64, u64) {
        (self.throttled.iter().sum(), self.faults_fired.iter().sum())
    }

    /// Open connections.
    pub fn connections(&self) -> u64 {
        self.connections
    }
}

/// The names of the operation slots, as the console's history names them.
pub fn operation_names() -> Vec<&'static str> {
    (0..OPERATION_SLOTS)
        .map(|slot| Operation::ALL.get(slot).map_or("none", |op| op.name()))
        .collect()
}

/// Everything one shard reports to a scrape.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The shard's index.
    pub shard: usize,
    /// Its request counters.
    pub counters: Counters,
    /// Commands it sent to other shards, and received from them.
    pub mesh_sent: u64,
    /// Commands it received from other shards.
    pub mesh_received: u64,
    /// Live queues it owns.
    pub queues: u64,
    /// Messages stored in them (the approximate counts).
    pub messages: u64,
    /// Bytes charged for its stored messages (`--max-memory` accounting).
    pub message_bytes: u64,
    /// Its deepest queues: (account, queue, messages), deepest first, at most
    /// `METRICS_DEEPEST_QUEUES`.
    pub deepest: Vec<(String, String, u64)>,
    /// Fault rules it holds.
    pub fault_rules: u64,
    /// What clients did with its queues since it started.
    pub activity: Activity,
    /// What its log wrote, when it keeps its data on disk.
    pub wal: Option<LogStats>,
    /// Its share of `--max-memory`, bytes.
    pub message_bytes_max: u64,
    /// Requests it refused with 503 `ServerBusy` for memory and for disk.
    pub refusals: Refusals,
    /// Bytes of its files on disk (segments as allocated, snapshots); 0 in memory.
    pub disk_bytes: u64,
    /// Its share of `--max-disk`, bytes (0: none).
    pub disk_bytes_max: u64,
    /// Free bytes of the file system holding its files, as last measured (`None` in memory).
    pub filesystem_free_bytes: Option<u64>,
    /// Messages whose texts are on disk only (`--text-memory`), and those texts' bytes.
    pub texts_on_disk: (u64, u64),
    /// Texts read back from disk for Gets and Peeks, their bytes, the reads that failed, the
    /// requests that waited for texts, the texts among them read ahead of Gets, and of those
    /// the texts read ahead with no request waiting.
    pub texts_read: (u64, u64, u64, u64, u64, u64),
    /// Reads of texts the read cache answered, and chunks of the log read into it.
    pub text_read_cache: (u64, u64),
}

/// What `/_azq/metrics` shows (`--metrics`): it needs no credentials, so by default it names no
/// queue (queue names can say what a business does, and whoever reaches the port may not be
/// the account's owner).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exposure {
    /// `--metrics off`: the endpoint answers 404, for servers that others can reach.
    Off,
    /// `--metrics on` (the default): every series but the deepest queues' depths.
    #[default]
    Counts,
    /// `--metrics queues`: also `azq_queue_depth` of the `METRICS_DEEPEST_QUEUES` deepest
    /// queues, by account and queue name (what the Grafana dashboard's depth panel shows).
    Queues,
}

impl Exposure {
    /// Parses `--metrics`' value.
    pub fn parse(text: &str) -> Option<Exposure> {
        match text {
            "off" => Some(Exposure::Off),
            "on" => Some(Exposure::Counts),
            "queues" => Some(Exposure::Queues),
            _ => None,
        }
    }
}

/// Server-wide settings shown as gauges, and what the endpoint shows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// `--metrics`.
    pub exposure: Exposure,
    /// `--queue-rate-limit`, message operations per second per queue (0: none).
    pub queue_rate_limit: u64,
    /// `--account-rate-limit`, requests per second per account (0: none).
    pub account_rate_limit: u64,
}

/// A per-shard series: name, type, help, and how to read it from a snapshot.
type PerShardSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Snapshot) -> u64,
);

/// A histogram series: name, help, and its buckets and sums in the counters.
type HistogramSeries = (
    &'static str,
    &'static str,
    fn(&Counters) -> &Vec<u64>,
    fn(&Counters) -> &Vec<u64>,
);

/// Writes one histogram's buckets (cumulative, `le` in seconds), sum and count, labelled
/// `labels` (each followed by a comma); nothing for an operation never counted, a `labels`
/// that is not empty, and no count.
fn histogram(out: &mut String, metric: &str, labels: &str, counts: &[u64], sum_us: u64) {
    let total: u64 = counts.iter().sum();
    if total == 0 && !labels.is_empty() {
        return;
    }
    let mut cumulative = 0;
    for (bucket, count) in counts.iter().enumerate() {
        cumulative += count;
        let le = if bucket + 1 == LATENCY_BUCKETS {
            "+Inf".to_string()
        } else {
            format!("{}", (32u64 << bucket) as f64 / 1e6)
        };
        let _ = writeln!(out, "{metric}_bucket{{{labels}le=\"{le}\"}} {cumulative}");
    }
    let labels = labels.trim_end_matches(',');
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let sum_s = sum_us as f64 / 1e6;
    let _ = writeln!(out, "{metric}_sum{labels} {sum_s}");
    let _ = writeln!(out, "{metric}_count{labels} {total}");
}

/// Escapes a label value (`\`, `"` and newlines).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every shard's snapshot, and the process's resident memory where it is known, as one
/// Prometheus text exposition.
pub fn render(
    snapshots: &[Snapshot],
    settings: Settings,
    resident_memory_bytes: Option<u64>,
) -> String {
    let mut out = String::new();
    let sum = |pick: &dyn Fn(&Counters) -> &Vec<u64>, index: usize| -> u64 {
        snapshots
            .iter()
            .map(|snapshot| pick(&snapshot.counters).get(index).copied().unwrap_or(0))
            .sum()
    };
    let operation_name = |slot: usize| Operation::ALL.get(slot).map_or("none", |op| op.name());

    out.push_str(
        "# HELP azq_requests_total Requests answered, by REST operation (Azure's ApiName), \
         status and Azure's ResponseType (derived from the status).\n",
    );
    out.push_str("# TYPE azq_requests_total counter\n");
    for operation in 0..OPERATION_SLOTS {
        for status in 0..STATUS_SLOTS {
            let count = sum(&|c| &c.requests, operation * STATUS_SLOTS + status);
            if count > 0 {
                let known = STATUSES.get(status).copied();
                let status = known.map_or("other".to_string(), |status| status.to_string());
                let _ = writeln!(
                    out,
                    "azq_requests_total{{operation=\"{}\",status=\"{status}\",\
                     response_type=\"{}\"}} {count}",
                    operation_name(operation),
                    response_type(known)
                );
            }
        }
    }

    let histograms: [HistogramSeries; 3] = [
        (
            "azq_request_duration_seconds",
            "Time from a request's arrival to its answer being encoded, every answer",
            |c| &c.latency_buckets,
            |c| &c.latency_sum_us,
        ),
        (
            "azq_success_server_latency_seconds",
            "Azure's SuccessServerLatency: arrival to answer encoded, successful answers",
            |c| &c.success_buckets,
            |c| &c.success_sum_us,
        ),
        (
            "azq_success_e2e_latency_seconds",
            "Azure's SuccessE2ELatency: arrival to answer written, the wait for the log \
             included, successful answers",
            |c| &c.e2e_buckets,
            |c| &c.e2e_sum_us,
        ),
    ];
    for (metric, help, buckets, sums) in histograms {
        let _ = writeln!(out, "# HELP {metric} {help}, by operation.");
        let _ = writeln!(out, "# TYPE {metric} histogram");
        for operation in 0..OPERATION_SLOTS {
            let counts: Vec<u64> = (0..LATENCY_BUCKETS)
                .map(|bucket| sum(&buckets, operation * LATENCY_BUCKETS + bucket))
                .collect();
            let sum_us = sum(&sums, operation);
            histogram(
                &mut out,
                metric,
                &format!("operation=\"{}\",", operation_name(operation)),
                &counts,
                sum_us,
            );
        }
    }

    out.push_str(
        "# HELP azq_throttled_total Requests answered 503 ServerBusy by a rate limit, by scope.\n",
    );
    out.push_str("# TYPE azq_throttled_total counter\n");
    for (slot, scope) in THROTTLE_SCOPES.iter().enumerate() {
        let _ = writeln!(
            out,
            "azq_throttled_total{{scope=\"{scope}\"}} {}",
            sum(&|c| &c.throttled, slot)
        );
    }
    out.push_str("# HELP azq_faults_fired_total Injected faults, by action.\n");
    out.push_str("# TYPE azq_faults_fired_total counter\n");
    for (slot, action) in FAULT_ACTIONS.iter().enumerate() {
        let _ = writeln!(
            out,
            "azq_faults_fired_total{{action=\"{action}\"}} {}",
            sum(&|c| &c.faults_fired, slot)
        );
    }
    out.push_str("# HELP azq_rate_limit_per_second Configured rate limits (0: none), by scope.\n");
    out.push_str("# TYPE azq_rate_limit_per_second gauge\n");
    let _ = writeln!(
        out,
        "azq_rate_limit_per_second{{scope=\"queue\"}} {}",
        settings.queue_rate_limit
    );
    let _ = writeln!(
        out,
        "azq_rate_limit_per_second{{scope=\"account\"}} {}",
        settings.account_rate_limit
    );
    let fault_rules = snapshots.first().map_or(0, |snapshot| snapshot.fault_rules);
    out.push_str("# HELP azq_fault_rules Fault injection rules in force.\n");
    out.push_str("# TYPE azq_fault_rules gauge\n");
    let _ = writeln!(out, "azq_fault_rules {fault_rules}");

    out.push_str(
        "# HELP azq_message_events_total What clients did with messages: puts, deliveries, \
         redeliveries (dequeue count above 1), Gets that found nothing, deletes, updates, \
         expiries.\n",
    );
    out.push_str("# TYPE azq_message_events_total counter\n");
    for (index, event) in ACTIVITY_NAMES.iter().enumerate() {
        let total: u64 = snapshots
            .iter()
            .map(|snapshot| snapshot.activity.counts()[index])
            .sum();
        let _ = writeln!(out, "azq_message_events_total{{event=\"{event}\"}} {total}");
    }
    let wal: Vec<&LogStats> = snapshots.iter().filter_map(|s| s.wal.as_ref()).collect();
    let wal_sum = |pick: fn(&LogStats) -> u64| -> u64 { wal.iter().map(|stats| pick(stats)).sum() };
    for (name, help, value) in [
        (
            "azq_wal_flushes_total",
            "Log flushes (one write and, with --durability fsync, one fdatasync each).",
            wal_sum(|stats| stats.flushes),
        ),
        (
            "azq_wal_records_total",
            "Records the log flushes wrote.",
            wal_sum(|stats| stats.records),
        ),
        (
            "azq_wal_bytes_total",
            "Bytes of records the log flushes wrote.",
            wal_sum(|stats| stats.bytes),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help} 0 in memory.");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {value}");
    }
    out.push_str("# HELP azq_wal_flush_duration_seconds Time of one log flush's write and sync.\n");
    out.push_str("# TYPE azq_wal_flush_duration_seconds histogram\n");
    let flush_counts: Vec<u64> = (0..LATENCY_BUCKETS)
        .map(|bucket| wal.iter().map(|stats| stats.duration_buckets[bucket]).sum())
        .collect();
    histogram(
        &mut out,
        "azq_wal_flush_duration_seconds",
        "",
        &flush_counts,
        wal_sum(|stats| stats.duration_sum_us),
    );
    for (name, kind, help, value) in [
        (
            "azq_snapshots_total",
            "counter",
            "Snapshots written whole and put in place, the log and snapshot they replaced freed: \
             what gives disk back.",
            wal_sum(|stats| stats.snapshots).to_string(),
        ),
        (
            "azq_snapshot_bytes_total",
            "counter",
            "Bytes of those snapshots' files.",
            wal_sum(|stats| stats.snapshot_bytes).to_string(),
        ),
        (
            "azq_snapshot_seconds_total",
            "counter",
            "Time those snapshots took, from their start until the files they replaced were \
             freed.",
            (wal_sum(|stats| stats.snapshot_duration_us) as f64 / 1e6).to_string(),
        ),
        (
            "azq_snapshots_running",
            "gauge",
            "Shards writing a snapshot now.",
            wal_sum(|stats| u64::from(stats.snapshot_running)).to_string(),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help} 0 in memory.");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    }

    for (name, help, pick) in [
        (
            "azq_memory_refusals_total",
            "Requests answered 503 ServerBusy because stored data reached --max-memory.",
            (|refusals| refusals.memory) as fn(&Refusals) -> u64,
        ),
        (
            "azq_disk_refusals_total",
            "Requests answered 503 ServerBusy because a shard's files reached its share of \
             --max-disk, or the file system's free space --min-free-disk, with room kept for a \
             snapshot.",
            |refusals| refusals.disk,
        ),
    ] {
        let total: u64 = snapshots.iter().map(|s| pick(&s.refusals)).sum();
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {total}");
    }
    // Every shard measures the same file system: the lowest reading is the latest shortage.
    let free = snapshots
        .iter()
        .filter_map(|s| s.filesystem_free_bytes)
        .min();
    if let Some(free) = free {
        out.push_str(
            "# HELP azq_filesystem_free_bytes Free bytes (for unprivileged use) of the file \
             system holding the data, as last measured.\n",
        );
        out.push_str("# TYPE azq_filesystem_free_bytes gauge\n");
        let _ = writeln!(out, "azq_filesystem_free_bytes {free}");
    }
    if let Some(resident) = resident_memory_bytes {
        out.push_str("# HELP process_resident_memory_bytes Resident memory size in bytes.\n");
        out.push_str("# TYPE process_resident_memory_bytes gauge\n");
        let _ = writeln!(out, "process_resident_memory_bytes {resident}");
    }

    let per_shard: [PerShardSeries; 20] = [
        (
            "azq_open_connections",
            "gauge",
            "Open client connections.",
            |s| s.counters.connections,
        ),
        (
            "azq_pending_output_bytes",
            "gauge",
            "Bytes of answers being written to clients (queued, not yet taken by the socket).",
            |s| s.counters.pending_output_bytes,
        ),
        ("azq_queues", "gauge", "Live queues owned.", |s| s.queues),
        (
            "azq_messages",
            "gauge",
            "Messages stored (approximate counts).",
            |s| s.messages,
        ),
        (
            "azq_message_bytes",
            "gauge",
            "Bytes charged against --max-memory for stored messages (text in memory plus \
             overhead).",
            |s| s.message_bytes,
        ),
        (
            "azq_message_bytes_limit",
            "gauge",
            "The shard's share of --max-memory, bytes.",
            |s| s.message_bytes_max,
        ),
        (
            "azq_disk_bytes",
            "gauge",
            "Bytes of the shard's files on disk: log segments as allocated, snapshots (0 in \
             memory).",
            |s| s.disk_bytes,
        ),
        (
            "azq_disk_limit_bytes",
            "gauge",
            "The shard's share of --max-disk, bytes (0: none).",
            |s| s.disk_bytes_max,
        ),
        (
            "azq_texts_on_disk",
            "gauge",
            "Messages whose texts are on disk only (--text-memory).",
            |s| s.texts_on_disk.0,
        ),
        (
            "azq_text_bytes_on_disk",
            "gauge",
            "Bytes of message text on disk only (--text-memory).",
            |s| s.texts_on_disk.1,
        ),
        (
            "azq_text_reads_total",
            "counter",
            "Texts read back from disk for Get and Peek Messages and inspection.",
            |s| s.texts_read.0,
        ),
        (
            "azq_text_read_bytes_total",
            "counter",
            "Bytes of text read back from disk for Get and Peek Messages and inspection.",
            |s| s.texts_read.1,
        ),
        (
            "azq_text_read_failures_total",
            "counter",
            "Reads of texts from disk that failed (the request tried again or answered 500; \
             inspection shows the text as on disk).",
            |s| s.texts_read.2,
        ),
        (
            "azq_text_waits_total",
            "counter",
            "Get and Peek Messages that waited for texts on disk only (cold reads).",
            |s| s.texts_read.3,
        ),
        (
            "azq_text_read_ahead_total",
            "counter",
            "Texts read back ahead of Gets (in azq_text_reads_total).",
            |s| s.texts_read.4,
        ),
        (
            "azq_text_read_early_total",
            "counter",
            "Texts read back ahead of Gets before any waited for them (in \
             azq_text_read_ahead_total).",
            |s| s.texts_read.5,
        ),
        (
            "azq_text_read_cache_hits_total",
            "counter",
            "Texts read back from chunks of the log read for others near them (in \
             azq_text_reads_total, or read by snapshots).",
            |s| s.text_read_cache.0,
        ),
        (
            "azq_text_read_chunks_total",
            "counter",
            "Chunks of the log read whole for texts on disk only, and kept for the texts near \
             them.",
            |s| s.text_read_cache.1,
        ),
        (
            "azq_mesh_sent_total",
            "counter",
            "Commands sent to other shards.",
            |s| s.mesh_sent,
        ),
        (
            "azq_mesh_received_total",
            "counter",
            "Commands received from other shards.",
            |s| s.mesh_received,
        ),
    ];
    for (name, kind, help, value) in per_shard {
        let _ = writeln!(out, "# HELP {name} {help} By shard.");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for snapshot in snapshots {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\"}} {}",
                snapshot.shard,
                value(snapshot)
            );
        }
    }

    if settings.exposure != Exposure::Queues {
        return out;
    }
    let mut deepest: Vec<&(String, String, u64)> = snapshots
        .iter()
        .flat_map(|snapshot| snapshot.deepest.iter())
        .collect();
    deepest.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
    deepest.truncate(METRICS_DEEPEST_QUEUES);
    let _ = writeln!(
        out,
        "# HELP azq_queue_depth Messages in the {METRICS_DEEPEST_QUEUES} deepest queues."
    );
    out.push_str("# TYPE azq_queue_depth gauge\n");
    for (account, queue, messages) in deepest {
        let _ = writeln!(
            out,
            "azq_queue_depth{{account=\"{}\",queue=\"{}\"}} {messages}",
            label(account),
            label(queue)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_powers_of_two_from_32_us() {
        let cases = [
            (0, 0),
            (32, 0),
            (33, 1),
            (64, 1),
            (65, 2),
            (1_000, 5),
            (32 << 15, 15),
            ((32 << 15) + 1, 16),
            (u64::MAX, 16),
        ];
        for (us, bucket) in cases {
            assert_eq!(latency_bucket(us), bucket, "{us}");
        }
    }

    #[test]
    fn shards_are_merged_and_series_are_bounded() {
        let shards: Vec<Snapshot> = (0..2)
            .map(|shard| {
                let metrics = ShardMetrics::default();
                metrics.request(Some(Operation::PutMessage), 201, 100);
                metrics.request(None, 400, 10);
                metrics.throttled(Scope::Queue);
                metrics.fault_fired("reset");
                metrics.end_to_end(operation_slot(Some(Operation::PutMessage)), 150);
                let mut wal = LogStats {
                    flushes: 1 + shard as u64,
                    snapshots: 2,
                    snapshot_bytes: 2 << 20,
                    snapshot_duration_us: 1_500_000,
                    snapshot_running: shard == 0,
                    ..LogStats::default()
                };
                wal.duration_buckets[3] = wal.flushes;
                Snapshot {
                    shard,
                    counters: metrics.counters(),
                    refusals: Refusals {
                        memory: 1,
                        disk: 2 + shard as u64,
                    },
                    disk_bytes: 64 << 20,
                    disk_bytes_max: 256 << 20,
                    message_bytes_max: 1 << 30,
                    filesystem_free_bytes: Some(1000 - shard as u64),
                    texts_on_disk: (5, 500 + shard as u64),
                    texts_read: (7, 700, shard as u64, 3, 5, 4),
                    text_read_cache: (11, 2 + shard as u64),
                    activity: Activity {
                        puts: 3,
                        ..Activity::default()
                    },
                    wal: Some(wal),
                    deepest: (0..METRICS_DEEPEST_QUEUES as u64)
                        .map(|depth| ("a".into(), format!("q{shard}-{depth}"), depth))
                        .collect(),
                    ..Snapshot::default()
                }
            })
            .collect();
        let text = render(
            &shards,
            Settings {
                exposure: Exposure::Queues,
                ..Settings::default()
            },
            Some(4096),
        );
        assert!(text.contains(
            "azq_requests_total{operation=\"PutMessage\",status=\"201\",response_type=\"Success\"} 2\n"
        ));
        assert!(text.contains(
            "azq_requests_total{operation=\"none\",status=\"400\",\
             response_type=\"ClientOtherError\"} 2\n"
        ));
        // Only the successful put is in the success histograms.
        assert!(
            text.contains("azq_success_server_latency_seconds_count{operation=\"PutMessage\"} 2\n")
        );
        assert!(!text.contains("azq_success_server_latency_seconds_count{operation=\"none\"}"));
        assert!(
            text.contains("azq_success_e2e_latency_seconds_count{operation=\"PutMessage\"} 2\n")
        );
        assert!(text.contains("azq_message_events_total{event=\"puts\"} 6\n"));
        assert!(text.contains("azq_wal_flushes_total 3\n"));
        // Two shards, each with two snapshots of 1 MiB in 1.5 s, one of them writing another.
        assert!(text.contains("azq_snapshots_total 4\n"));
        assert!(text.contains("azq_snapshot_bytes_total 4194304\n"));
        assert!(text.contains("azq_snapshot_seconds_total 3\n"));
        assert!(text.contains("# TYPE azq_snapshots_running gauge\nazq_snapshots_running 1\n"));
        assert!(text.contains("azq_wal_flush_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("azq_wal_flush_duration_seconds_count 3\n"));
        assert!(text.contains(
            "azq_request_duration_seconds_bucket{operation=\"PutMessage\",le=\"0.000128\"} 2\n"
        ));
        assert!(text.contains("azq_throttled_total{scope=\"queue\"} 2\n"));
        assert!(text.contains("azq_faults_fired_total{action=\"reset\"} 2\n"));
        assert!(text.contains("azq_open_connections{shard=\"1\"} 0\n"));
        // Memory against disk.
        assert!(text.contains("azq_memory_refusals_total 2\n"));
        assert!(text.contains("azq_disk_refusals_total 5\n"));
        assert!(text.contains("azq_disk_bytes{shard=\"1\"} 67108864\n"));
        assert!(text.contains("azq_text_bytes_on_disk{shard=\"1\"} 501\n"));
        assert!(text.contains("azq_text_read_failures_total{shard=\"1\"} 1\n"));
        assert!(text.contains("azq_text_waits_total{shard=\"1\"} 3\n"));
        assert!(text.contains("azq_text_read_ahead_total{shard=\"1\"} 5\n"));
        assert!(text.contains("azq_text_read_early_total{shard=\"1\"} 4\n"));
        assert!(text.contains("azq_text_read_cache_hits_total{shard=\"1\"} 11\n"));
        assert!(text.contains("azq_text_read_chunks_total{shard=\"1\"} 3\n"));
        assert!(text.contains("azq_disk_limit_bytes{shard=\"0\"} 268435456\n"));
        assert!(text.contains("azq_message_bytes_limit{shard=\"0\"} 1073741824\n"));
        assert!(text.contains("azq_filesystem_free_bytes 999\n"));
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge\n"));
        assert!(text.contains("process_resident_memory_bytes 4096\n"));
        assert_eq!(
            text.matches("azq_queue_depth{").count(),
            METRICS_DEEPEST_QUEUES
        );
        assert!(!text.contains("GetMessages"));
        // By default no queue is named.
        let counts = render(&shards, Settings::default(), None);
        assert!(!counts.contains("azq_queue_depth") && !counts.contains("q0-"));
        assert!(!counts.contains("process_resident_memory_bytes"));
        // In memory there is no file system to measure: its gauge is absent.
        let memory: Vec<Snapshot> = vec![Snapshot::default()];
        let memory = render(&memory, Settings::default(), None);
        assert!(!memory.contains("azq_filesystem_free_bytes"));
        assert!(memory.contains("azq_disk_bytes{shard=\"0\"} 0\n"));
        assert!(counts.contains("azq_throttled_total{scope=\"queue\"} 2\n"));
        assert_eq!(label("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}

//! What `GET /_azq/metrics` reports, in Prometheus' text format (version 0.0.4).
//!
//! Each shard counts its own requests in plain `Cell`s (no atomics, nothing shared): requests by
//! operation and status, request latency by operation (a histogram of power-of-two buckets),
//! throttled requests by scope and injected faults by action. A scrape asks every shard over the
//! mesh for a `Snapshot` (these counters plus its connections, mesh traffic, queues, messages and
//! its deepest queues) and `render` merges them. Series are bounded: 19 operations × 15 statuses
//! of requests (only those seen), 19 × 18 histogram lines (only operations seen), a few per
//! shard, and `METRICS_DEEPEST_QUEUES` queue depths.

use std::cell::Cell;
use std::fmt::Write;

use crate::limits::METRICS_DEEPEST_QUEUES;
use crate::operation::Operation;

/// The statuses counted by their own label; anything else is `other`.
const STATUSES: [u16; 14] = [
    200, 201, 204, 206, 304, 400, 403, 404, 405, 409, 413, 431, 500, 503,
];
/// `STATUSES` and `other`.
const STATUS_SLOTS: usize = STATUSES.len() + 1;
/// `Operation::ALL` and requests that were never routed to an operation (`none`).
const OPERATION_SLOTS: usize = Operation::ALL.len() + 1;
/// Latency buckets: `le` = 32 µs × 2^k for k in 0..16 (32 µs to about 1 s), then +Inf.
const LATENCY_BUCKETS: usize = 17;
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
    throttled: [Cell<u64>; 2],
    faults_fired: [Cell<u64>; 5],
    /// Open connections on this shard.
    pub connections: Cell<usize>,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        let cells = |count: usize| (0..count).map(|_| Cell::new(0)).collect();
        ShardMetrics {
            requests: cells(OPERATION_SLOTS * STATUS_SLOTS),
            latency_buckets: cells(OPERATION_SLOTS * LATENCY_BUCKETS),
            latency_sum_us: cells(OPERATION_SLOTS),
            throttled: Default::default(),
            faults_fired: Default::default(),
            connections: Cell::new(0),
        }
    }
}

fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().wrapping_add(by));
}

/// The latency bucket of a request that took `us` µs.
fn latency_bucket(us: u64) -> usize {
    if us <= 32 {
        0
    } else {
        ((64 - ((us - 1) >> 5).leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
    }
}

impl ShardMetrics {
    /// Counts one answered request.
    pub fn request(&self, operation: Option<Operation>, status: u16, latency_us: u64) {
        let operation = operation.map_or(Operation::ALL.len(), Operation::index);
        let status = STATUSES
            .iter()
            .position(|&known| known == status)
            .unwrap_or(STATUSES.len());
        bump(&self.requests[operation * STATUS_SLOTS + status], 1);
        bump(
            &self.latency_buckets[operation * LATENCY_BUCKETS + latency_bucket(latency_us)],
            1,
        );
        bump(&self.latency_sum_us[operation], latency_us);
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
            throttled: read(&self.throttled),
            faults_fired: read(&self.faults_fired),
            connections: self.connections.get() as u64,
        }
    }
}

/// A shard's counters, read.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    requests: Vec<u64>,
    latency_buckets: Vec<u64>,
    latency_sum_us: Vec<u64>,
    throttled: Vec<u64>,
    faults_fired: Vec<u64>,
    connections: u64,
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
}

/// Server-wide settings shown as gauges.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
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

/// Escapes a label value (`\`, `"` and newlines).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every shard's snapshot as one Prometheus text exposition.
pub fn render(snapshots: &[Snapshot], settings: Settings) -> String {
    let mut out = String::new();
    let sum = |pick: &dyn Fn(&Counters) -> &Vec<u64>, index: usize| -> u64 {
        snapshots
            .iter()
            .map(|snapshot| pick(&snapshot.counters).get(index).copied().unwrap_or(0))
            .sum()
    };
    let operation_name = |slot: usize| Operation::ALL.get(slot).map_or("none", |op| op.name());

    out.push_str("# HELP azq_requests_total Requests answered, by REST operation and status.\n");
    out.push_str("# TYPE azq_requests_total counter\n");
    for operation in 0..OPERATION_SLOTS {
        for status in 0..STATUS_SLOTS {
            let count = sum(&|c| &c.requests, operation * STATUS_SLOTS + status);
            if count > 0 {
                let status = STATUSES
                    .get(status)
                    .map_or("other".to_string(), u16::to_string);
                let _ = writeln!(
                    out,
                    "azq_requests_total{{operation=\"{}\",status=\"{status}\"}} {count}",
                    operation_name(operation)
                );
            }
        }
    }

    out.push_str(
        "# HELP azq_request_duration_seconds Time from a request's arrival to its answer \
         being encoded, by operation.\n",
    );
    out.push_str("# TYPE azq_request_duration_seconds histogram\n");
    for operation in 0..OPERATION_SLOTS {
        let counts: Vec<u64> = (0..LATENCY_BUCKETS)
            .map(|bucket| {
                sum(
                    &|c| &c.latency_buckets,
                    operation * LATENCY_BUCKETS + bucket,
                )
            })
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            continue;
        }
        let name = operation_name(operation);
        let mut cumulative = 0;
        for (bucket, count) in counts.iter().enumerate() {
            cumulative += count;
            let le = if bucket + 1 == LATENCY_BUCKETS {
                "+Inf".to_string()
            } else {
                format!("{}", (32u64 << bucket) as f64 / 1e6)
            };
            let _ = writeln!(
                out,
                "azq_request_duration_seconds_bucket{{operation=\"{name}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let sum_s = sum(&|c| &c.latency_sum_us, operation) as f64 / 1e6;
        let _ = writeln!(
            out,
            "azq_request_duration_seconds_sum{{operation=\"{name}\"}} {sum_s}"
        );
        let _ = writeln!(
            out,
            "azq_request_duration_seconds_count{{operation=\"{name}\"}} {total}"
        );
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

    let per_shard: [PerShardSeries; 6] = [
        (
            "azq_open_connections",
            "gauge",
            "Open client connections.",
            |s| s.counters.connections,
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
            "Bytes charged for stored messages (text plus overhead).",
            |s| s.message_bytes,
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
                Snapshot {
                    shard,
                    counters: metrics.counters(),
                    deepest: (0..METRICS_DEEPEST_QUEUES as u64)
                        .map(|depth| ("a".into(), format!("q{shard}-{depth}"), depth))
                        .collect(),
                    ..Snapshot::default()
                }
            })
            .collect();
        let text = render(&shards, Settings::default());
        assert!(text.contains("azq_requests_total{operation=\"PutMessage\",status=\"201\"} 2\n"));
        assert!(text.contains("azq_requests_total{operation=\"none\",status=\"400\"} 2\n"));
        assert!(text.contains(
            "azq_request_duration_seconds_bucket{operation=\"PutMessage\",le=\"0.000128\"} 2\n"
        ));
        assert!(text.contains("azq_throttled_total{scope=\"queue\"} 2\n"));
        assert!(text.contains("azq_faults_fired_total{action=\"reset\"} 2\n"));
        assert!(text.contains("azq_open_connections{shard=\"1\"} 0\n"));
        assert_eq!(
            text.matches("azq_queue_depth{").count(),
            METRICS_DEEPEST_QUEUES
        );
        assert!(!text.contains("GetMessages"));
        assert_eq!(label("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}

//! The console's history: server-wide counters sampled once a second, kept in two bounded rings
//! (`HISTORY_SECOND_SAMPLES` at one second, `HISTORY_TEN_SECOND_SAMPLES` at ten seconds), so the
//! console can draw the last minute, ten minutes or hour the moment it opens. Samples hold
//! totals (counters only grow); a point of a chart is the difference of two consecutive samples
//! divided by the time between them, and a latency percentile is read from the difference of
//! two cumulative histograms (power-of-two buckets: a percentile is the bucket's upper bound).
//! Pure: the runtime takes the samples and hands them in.

use std::collections::VecDeque;
use std::fmt::Write;

use crate::limits::{HISTORY_SECOND_SAMPLES, HISTORY_TEN_SECOND_SAMPLES};
use crate::queue::Activity;

/// Server-wide totals at one moment (every shard's counters summed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// When it was taken, ms since the Unix epoch.
    pub time_ms: u64,
    /// Requests answered, per operation slot.
    pub requests: Vec<u64>,
    /// Of those, answered with a status of 400 or more, per operation slot.
    pub errors: Vec<u64>,
    /// Cumulative latency histogram per operation slot: `buckets` counts each, bucket `k`
    /// holding requests of at most `32 µs × 2^k` (the last: any longer).
    pub latency_buckets: Vec<u64>,
    /// Requests refused by a rate limit.
    pub throttled: u64,
    /// Faults injected.
    pub faults: u64,
    /// Messages put, delivered, delivered again, Gets that found nothing, deletes, updates,
    /// expiries.
    pub activity: [u64; 7],
    /// Log flushes (group commits) and the bytes they wrote.
    pub wal_flushes: u64,
    /// Bytes the log flushes wrote.
    pub wal_bytes: u64,
    /// Messages stored now.
    pub messages: u64,
    /// Live queues now.
    pub queues: u64,
    /// Open connections now.
    pub connections: u64,
}

/// Names of `Sample::activity`'s counters, in order, as the JSON names them.
pub const ACTIVITY_NAMES: [&str; 7] = Activity::NAMES;

/// The two rings.
#[derive(Debug, Default)]
pub struct History {
    seconds: VecDeque<Sample>,
    ten_seconds: VecDeque<Sample>,
}

impl History {
    /// Keeps `sample` (taken after every earlier one).
    pub fn record(&mut self, sample: Sample) {
        let ten_second_slot = |sample: &Sample| sample.time_ms / 10_000;
        if self
            .ten_seconds
            .back()
            .is_none_or(|last| ten_second_slot(last) < ten_second_slot(&sample))
        {
            if self.ten_seconds.len() == HISTORY_TEN_SECOND_SAMPLES {
                self.ten_seconds.pop_front();
            }
            self.ten_seconds.push_back(sample.clone());
        }
        if self.seconds.len() == HISTORY_SECOND_SAMPLES {
            self.seconds.pop_front();
        }
        self.seconds.push_back(sample);
    }

    /// The points of the last `range_s` seconds after `since_ms` (0: all), as JSON: from the
    /// one-second ring up to its reach, else from the ten-second ring. `operations` names the
    /// operation slots; `buckets` is the histogram's bucket count.
    pub fn points_json(
        &self,
        range_s: u64,
        since_ms: u64,
        operations: &[&str],
        buckets: usize,
    ) -> String {
        let (ring, step_s) = if range_s <= HISTORY_SECOND_SAMPLES as u64 {
            (&self.seconds, 1)
        } else {
            (&self.ten_seconds, 10)
        };
        let newest_ms = ring.back().map_or(0, |sample| sample.time_ms);
        let oldest_ms = newest_ms.saturating_sub(range_s * 1000).max(since_ms);
        let mut out = format!("{{\"step_s\":{step_s},\"points\":[");
        let mut first = true;
        for (before, after) in ring.iter().zip(ring.iter().skip(1)) {
            if after.time_ms <= oldest_ms || after.time_ms <= before.time_ms {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            point_json(&mut out, before, after, operations, buckets);
        }
        out.push_str("]}");
        out
    }
}

/// One point: the rates between `before` and `after`, and `after`'s gauges.
fn point_json(
    out: &mut String,
    before: &Sample,
    after: &Sample,
    operations: &[&str],
    buckets: usize,
) {
    let seconds = (after.time_ms - before.time_ms) as f64 / 1000.0;
    let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
    let at = |values: &[u64], index: usize| values.get(index).copied().unwrap_or(0);
    let _ = write!(out, "{{\"t\":{},\"ops\":{{", after.time_ms);
    let mut first = true;
    for (slot, name) in operations.iter().enumerate() {
        let count = at(&after.requests, slot).saturating_sub(at(&before.requests, slot));
        if count == 0 {
            continue;
        }
        let errors = at(&after.errors, slot).saturating_sub(at(&before.errors, slot));
        let histogram: Vec<u64> = (0..buckets)
            .map(|bucket| {
                let index = slot * buckets + bucket;
                at(&after.latency_buckets, index).saturating_sub(at(&before.latency_buckets, index))
            })
            .collect();
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(
            out,
            "\"{name}\":{{\"rate\":{:.3},\"errors\":{:.3},\"p50_ms\":{},\"p99_ms\":{}}}",
            count as f64 / seconds,
            errors as f64 / seconds,
            percentile_ms(&histogram, 0.50),
            percentile_ms(&histogram, 0.99)
        );
    }
    out.push('}');
    for (index, name) in ACTIVITY_NAMES.iter().enumerate() {
        let _ = write!(
            out,
            ",\"{name}\":{:.3}",
            rate(after.activity[index], before.activity[index])
        );
    }
    let _ = write!(
        out,
        ",\"throttled\":{:.3},\"faults\":{:.3},\"wal_flushes\":{:.3},\"wal_bytes\":{:.1},\
         \"messages\":{},\"queues\":{},\"connections\":{}}}",
        rate(after.throttled, before.throttled),
        rate(after.faults, before.faults),
        rate(after.wal_flushes, before.wal_flushes),
        rate(after.wal_bytes, before.wal_bytes),
        after.messages,
        after.queues,
        after.connections
    );
}

/// The `quantile` of a histogram of power-of-two buckets (bucket `k`: at most `32 µs × 2^k`),
/// as the upper bound of the bucket it falls in, ms; `null` for an empty histogram and for the
/// last (open) bucket.
fn percentile_ms(histogram: &[u64], quantile: f64) -> String {
    let total: u64 = histogram.iter().sum();
    if total == 0 {
        return "null".to_string();
    }
    let rank = ((total as f64) * quantile).ceil().max(1.0) as u64;
    let mut cumulative = 0;
    for (bucket, count) in histogram.iter().enumerate() {
        cumulative += count;
        if cumulative >= rank {
            if bucket + 1 == histogram.len() {
                return "null".to_string();
            }
            return format!("{}", (32u64 << bucket) as f64 / 1000.0);
        }
    }
    "null".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_ms: u64, puts: u64, latency: [u64; 3]) -> Sample {
        Sample {
            time_ms,
            requests: vec![latency.iter().sum(), 0],
            errors: vec![1, 0],
            latency_buckets: latency.iter().copied().chain([0, 0, 0]).collect(),
            activity: [puts, 0, 0, 0, 0, 0, 0],
            messages: puts,
            ..Sample::default()
        }
    }

    #[test]
    fn points_are_rates_and_percentiles_between_samples() {
        let mut history = History::default();
        history.record(sample(10_000, 0, [0, 0, 0]));
        history.record(sample(11_000, 100, [90, 8, 2]));
        history.record(sample(13_000, 300, [90, 8, 2]));
        let json = history.points_json(60, 0, &["PutMessage", "GetMessages"], 3);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["step_s"], 1);
        let points = value["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[0]["t"], 11_000);
        assert_eq!(points[0]["puts"], 100.0);
        assert_eq!(points[0]["ops"]["PutMessage"]["rate"], 100.0);
        assert_eq!(points[0]["ops"]["PutMessage"]["p50_ms"], 0.032);
        // The 99th of 100 falls in the last bucket: open-ended, so unknown.
        assert!(points[0]["ops"]["PutMessage"]["p99_ms"].is_null());
        assert!(points[0]["ops"].get("GetMessages").is_none());
        // Two seconds between samples: the rate is per second.
        assert_eq!(points[1]["puts"], 100.0);
        assert_eq!(points[1]["messages"], 300);
        assert!(points[1]["ops"].as_object().unwrap().is_empty());
        let since = history.points_json(60, 11_000, &["PutMessage", "GetMessages"], 3);
        let value: serde_json::Value = serde_json::from_str(&since).unwrap();
        assert_eq!(value["points"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn rings_are_bounded_and_the_hour_reads_the_ten_second_ring() {
        let mut history = History::default();
        let samples = HISTORY_SECOND_SAMPLES as u64 * 20;
        for second in 0..samples {
            history.record(sample(second * 1000, second, [0, 0, 0]));
        }
        assert_eq!(history.seconds.len(), HISTORY_SECOND_SAMPLES);
        assert_eq!(history.ten_seconds.len(), HISTORY_TEN_SECOND_SAMPLES);
        let hour = history.points_json(3600, 0, &[], 3);
        let value: serde_json::Value = serde_json::from_str(&hour).unwrap();
        assert_eq!(value["step_s"], 10);
        let points = value["points"].as_array().unwrap();
        assert_eq!(points.len(), HISTORY_TEN_SECOND_SAMPLES - 1);
        assert_eq!(points[0]["puts"], 1.0);
        let minute = history.points_json(60, 0, &[], 3);
        let value: serde_json::Value = serde_json::from_str(&minute).unwrap();
        assert_eq!(value["points"].as_array().unwrap().len(), 60);
    }

    #[test]
    fn percentiles_read_the_bucket_bounds() {
        assert_eq!(percentile_ms(&[0, 0, 0], 0.5), "null");
        assert_eq!(percentile_ms(&[1, 0, 0], 0.99), "0.032");
        assert_eq!(percentile_ms(&[50, 50, 0], 0.5), "0.032");
        assert_eq!(percentile_ms(&[50, 50, 0], 0.51), "0.064");
        assert_eq!(percentile_ms(&[0, 0, 5], 0.5), "null");
    }
}

//! Latency and error bookkeeping: per operation, counts, errors by HTTP status and Azure error
//! code, and HdrHistograms of latency in microseconds; for the whole run, end-to-end message
//! latency and the client's own send lag; and how each client core's thread spent the run.
//! Pure: each core records into its own `Measurements`, ships it to the main thread once a
//! second, and the main thread merges them.

use std::collections::HashMap;

use hdrhistogram::Histogram;

use crate::scenario::Operation;
use crate::theory::Moments;
use crate::wire::mark::PutMark;

/// Significant decimal digits the histograms keep: values are exact to 0.1%.
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// An empty histogram that grows as values arrive: a loopback run never pays for the buckets of
/// a one-minute latency it does not see.
pub fn new_histogram() -> Histogram<u64> {
    // Three significant digits is always a valid precision, so this cannot fail.
    Histogram::new(HISTOGRAM_SIGNIFICANT_DIGITS).unwrap_or_else(|_| unreachable!())
}

/// Records `value`, saturating at the histogram's largest trackable value. A growing histogram
/// only refuses values beyond u64's range of buckets, which a latency in microseconds never is.
fn record(histogram: &mut Histogram<u64>, value: u64) {
    if histogram.record(value).is_err() {
        histogram.saturating_record(value);
    }
}

/// Everything measured about one operation.
#[derive(Clone, Debug)]
pub struct OperationStats {
    /// Answers received, successful or not.
    pub count: u64,
    /// Answers with a status outside 2xx.
    pub errors: u64,
    /// Errors by HTTP status, in order of first appearance; errors are rare, so a short list.
    pub errors_by_status: Vec<(u16, u64)>,
    /// Errors by `x-ms-error-code` (answers without one are listed only by status).
    pub errors_by_code: Vec<(String, u64)>,
    /// Gets that found the queue empty: a normal answer, not an error, but it costs a round trip.
    pub empty_gets: u64,
    /// Tries after the first (`--retry`): not in `count`, which counts operations.
    pub retries: u64,
    /// Retries by the HTTP status that caused them.
    pub retries_by_status: Vec<(u16, u64)>,
    /// Retries caused by a lost connection or a failed connect.
    pub retries_after_connection_errors: u64,
    /// Messages returned by Gets and Peeks.
    pub messages: u64,
    /// Operations an open loop scheduled in the measured window and never sent: still behind
    /// its schedule when `--grace` ran out. Not in `count`, nor in the latencies.
    pub unsent: u64,
    /// Latency of successful answers from the intended send time, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Latency of successful answers from the actual send time, in microseconds. Equal to
    /// `latency_us` in a closed loop.
    pub latency_uncorrected_us: Histogram<u64>,
}

impl Default for OperationStats {
    fn default() -> OperationStats {
        OperationStats {
            count: 0,
            errors: 0,
            errors_by_status: Vec::new(),
            errors_by_code: Vec::new(),
            empty_gets: 0,
            retries: 0,
            retries_by_status: Vec::new(),
            retries_after_connection_errors: 0,
            messages: 0,
            unsent: 0,
            latency_us: new_histogram(),
            latency_uncorrected_us: new_histogram(),
        }
    }
}

impl OperationStats {
    /// Counts a successful answer and its latencies.
    pub fn record_success(&mut self, corrected_us: u64, uncorrected_us: u64) {
        self.count += 1;
        record(&mut self.latency_us, corrected_us);
        record(&mut self.latency_uncorrected_us, uncorrected_us);
    }

    /// Counts an error answer. Allocates only the first time a code is seen.
    pub fn record_error(&mut self, status: u16, error_code: Option<&[u8]>) {
        self.count += 1;
        self.errors += 1;
        add_count(&mut self.errors_by_status, status, 1);
        if let Some(code) = error_code {
            let code = String::from_utf8_lossy(code);
            match self
                .errors_by_code
                .iter_mut()
                .find(|(known, _)| *known == code)
            {
                Some((_, count)) => *count += 1,
                None => self.errors_by_code.push((code.into_owned(), 1)),
            }
        }
    }

    /// Error answers with the Azure error code `code`.
    pub fn errors_with_code(&self, code: &str) -> u64 {
        self.errors_by_code
            .iter()
            .find(|(known, _)| known == code)
            .map_or(0, |(_, count)| *count)
    }

    /// Counts a retry caused by an answer with `status`, or by a lost connection (`None`).
    pub fn record_retry(&mut self, status: Option<u16>) {
        self.retries += 1;
        match status {
            Some(status) => add_count(&mut self.retries_by_status, status, 1),
            None => self.retries_after_connection_errors += 1,
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &OperationStats) {
        self.count += other.count;
        self.errors += other.errors;
        self.unsent += other.unsent;
        for &(status, count) in &other.errors_by_status {
            add_count(&mut self.errors_by_status, status, count);
        }
        self.retries += other.retries;
        for &(status, count) in &other.retries_by_status {
            add_count(&mut self.retries_by_status, status, count);
        }
        self.retries_after_connection_errors += other.retries_after_connection_errors;
        for (code, count) in &other.errors_by_code {
            match self
                .errors_by_code
                .iter_mut()
                .find(|(known, _)| known == code)
            {
                Some((_, known_count)) => *known_count += count,
                None => self.errors_by_code.push((code.clone(), *count)),
            }
        }
        self.empty_gets += other.empty_gets;
        self.messages += other.messages;
        merge_histogram(&mut self.latency_us, &other.latency_us);
        merge_histogram(
            &mut self.latency_uncorrected_us,
            &other.latency_uncorrected_us,
        );
    }
}

fn add_count(counts: &mut Vec<(u16, u64)>, status: u16, count: u64) {
    match counts.iter_mut().find(|(known, _)| *known == status) {
        Some((_, known_count)) => *known_count += count,
        None => counts.push((status, count)),
    }
}

fn merge_histogram(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    // Both grow on demand, so adding never runs out of range.
    if into.add(from).is_err() {
        for value in from.iter_recorded() {
            into.saturating_record_n(value.value_iterated_to(), value.count_at_value());
        }
    }
}

/// What the workers of a `workers` run did with the messages they received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Messages Gets handed to workers.
    pub received: u64,
    /// Deliveries worked on (all of them: a crash comes after the work, before the delete).
    pub processed: u64,
    /// Deliveries abandoned undeleted (`--crash-rate`).
    pub crashed: u64,
    /// Deliveries whose Delete succeeded.
    pub deleted: u64,
    /// Deliveries of a message delivered before (dequeue count above 1) whose previous delivery
    /// was not abandoned: its lease ran out before that worker deleted it.
    pub redelivered_after_lease_expiry: u64,
    /// Deliveries of a message whose previous delivery was abandoned by a crash.
    pub redelivered_after_crash: u64,
    /// Deletes sent after the Get's lease had run out (the work outlasted the visibility
    /// timeout): each one succeeds only if no other worker has received the message since.
    pub lease_expired_before_delete: u64,
    /// Time spent working, over all workers.
    pub busy_ns: u64,
}

impl WorkerStats {
    /// Deliveries of messages some worker had processed before: duplicate work.
    pub fn processed_more_than_once(&self) -> u64 {
        self.redelivered_after_lease_expiry + self.redelivered_after_crash
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &WorkerStats) {
        self.received += other.received;
        self.processed += other.processed;
        self.crashed += other.crashed;
        self.deleted += other.deleted;
        self.redelivered_after_lease_expiry += other.redelivered_after_lease_expiry;
        self.redelivered_after_crash += other.redelivered_after_crash;
        self.lease_expired_before_delete += other.lease_expired_before_delete;
        self.busy_ns += other.busy_ns;
    }
}

/// The fleet as it really was, for the theory check (`RunSummary::theory_check`): the
/// distributions a queueing model takes as given, as drawn and as observed, each as the exact
/// `Moments` of its samples in nanoseconds. Measured chains only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetStats {
    /// Gaps between the intended starts of a producer lane's puts: the arrivals as drawn.
    pub arrival_gap_drawn_ns: Moments,
    /// Gaps between the actual sends of a producer lane's puts: the arrivals as the server saw
    /// them begin.
    pub arrival_gap_sent_ns: Moments,
    /// Work times as drawn (`--work-time`).
    pub work_drawn_ns: Moments,
    /// Work times as done: from the Get's answer (or the last Delete's) to the Delete's send,
    /// the client's lateness in sending included.
    pub work_done_ns: Moments,
    /// A worker's time per message: from when it meant to send the Get that took it to its
    /// Delete's answer (with `--batch 1`; a later message of a batch from the Delete before).
    pub service_ns: Moments,
    /// An idle worker's gaps between looks: from an empty Get's send to its next Get's send.
    pub poll_gap_ns: Moments,
    /// Each delivered message's wait: from its put's send to when the worker that took it
    /// meant to send its Get (by the wall clock, to the microsecond).
    pub wait_ns: Moments,
}

impl FleetStats {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &FleetStats) {
        self.arrival_gap_drawn_ns.merge(&other.arrival_gap_drawn_ns);
        self.arrival_gap_sent_ns.merge(&other.arrival_gap_sent_ns);
        self.work_drawn_ns.merge(&other.work_drawn_ns);
        self.work_done_ns.merge(&other.work_done_ns);
        self.service_ns.merge(&other.service_ns);
        self.poll_gap_ns.merge(&other.poll_gap_ns);
        self.wait_ns.merge(&other.wait_ns);
    }
}

/// Which copies of which puts the workers received, over a whole run, to count the messages a
/// retried put stored twice: a put that failed (an error answer, a lost connection) may have
/// been stored anyway, and its retry then stores another copy with the same token. A copy
/// written by a put's first try is one bit; copies written by retries, rare, are listed.
#[derive(Clone, Debug, Default)]
pub struct PutCopyTally {
    /// By producer lane (the token's high bits), a bit per put (its low bits) whose first
    /// try's copy was received.
    first_tries: HashMap<u64, Vec<u64>>,
    /// Copies written by a retry.
    retried: Vec<PutMark>,
}

/// Bits of a put token that count the puts of one lane (the rest name the lane).
pub const PUT_TOKEN_SEQUENCE_BITS: u32 = 40;

impl PutCopyTally {
    /// Takes in a delivery of the copy `mark` names (again, for a redelivery: it counts once).
    pub fn add(&mut self, mark: PutMark) {
        if mark.attempt > 0 {
            self.retried.push(mark);
            return;
        }
        let lane = mark.token >> PUT_TOKEN_SEQUENCE_BITS;
        let sequence = mark.token & ((1 << PUT_TOKEN_SEQUENCE_BITS) - 1);
        let bits = self.first_tries.entry(lane).or_default();
        let word = (sequence / 64) as usize;
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << (sequence % 64);
    }

    /// Messages beyond the first that one put stored, summed over the puts: for each put with a
    /// retry's copy received, its received copies (one per attempt) less one.
    pub fn duplicates(&self) -> u64 {
        let mut retried = self.retried.clone();
        retried.sort_unstable_by_key(|mark| (mark.token, mark.attempt));
        retried.dedup();
        let mut duplicates = 0;
        for group in retried.chunk_by(|a, b| a.token == b.token) {
            let token = group[0].token;
            let lane = token >> PUT_TOKEN_SEQUENCE_BITS;
            let sequence = token & ((1 << PUT_TOKEN_SEQUENCE_BITS) - 1);
            let first_try = self.first_tries.get(&lane).is_some_and(|bits| {
                bits.get((sequence / 64) as usize)
                    .is_some_and(|word| word & (1 << (sequence % 64)) != 0)
            });
            duplicates += group.len() as u64 + u64::from(first_try) - 1;
        }
        duplicates
    }
}

/// What one core measured over one interval, or what the whole run measured once merged.
#[derive(Clone, Debug)]
pub struct Measurements {
    /// Indexed by `Operation::index`.
    pub operations: [OperationStats; 5],
    /// Microseconds from a producer's Put to the consumer's receipt of the message (in a
    /// `workers` run: to the worker's successful Delete), from the send timestamp the producer
    /// wrote into the text.
    pub end_to_end_us: Histogram<u64>,
    /// The client's own delay in sending requests it was free to send (see `Timing::send_lag_us`).
    pub send_lag_us: Histogram<u64>,
    /// Requests lost to a refused, reset or closed connection (no HTTP answer to count).
    pub connection_errors: u64,
    /// Answers that were not valid HTTP or not the expected XML.
    pub protocol_errors: u64,
    /// Requests answered during the warm-up: counted for the progress line only.
    pub warmup_requests: u64,
    /// Of the puts answered, those a consumer sent to replace a message it deleted
    /// (`--refill`): counted as puts, but part of a chain a get started, not of the schedule.
    pub refills: u64,
    /// The workers' side of a `workers` run.
    pub workers: WorkerStats,
    /// The arrivals, work, services, polls and waits of a `workers` run, for the theory.
    pub fleet: FleetStats,
    /// The put marks of this run's messages the workers received, warm-up included (a copy
    /// redelivered is listed again). The main thread moves them into the run's `PutCopyTally`
    /// as each interval closes, so the totals never hold them.
    pub deliveries: Vec<PutMark>,
}

impl Default for Measurements {
    fn default() -> Measurements {
        Measurements {
            operations: Default::default(),
            end_to_end_us: new_histogram(),
            send_lag_us: new_histogram(),
            connection_errors: 0,
            protocol_errors: 0,
            warmup_requests: 0,
            refills: 0,
            workers: WorkerStats::default(),
            fleet: FleetStats::default(),
            deliveries: Vec::new(),
        }
    }
}

impl Measurements {
    /// The statistics of `operation`.
    pub fn operation(&self, operation: Operation) -> &OperationStats {
        &self.operations[operation.index()]
    }

    /// The statistics of `operation`, to record into.
    pub fn operation_mut(&mut self, operation: Operation) -> &mut OperationStats {
        &mut self.operations[operation.index()]
    }

    /// Records an end-to-end message latency.
    pub fn record_end_to_end(&mut self, latency_us: u64) {
        record(&mut self.end_to_end_us, latency_us);
    }

    /// Records the client's send lag of one request.
    pub fn record_send_lag(&mut self, lag_us: u64) {
        record(&mut self.send_lag_us, lag_us);
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Measurements) {
        for (into, from) in self.operations.iter_mut().zip(&other.operations) {
            into.merge(from);
        }
        merge_histogram(&mut self.end_to_end_us, &other.end_to_end_us);
        merge_histogram(&mut self.send_lag_us, &other.send_lag_us);
        self.connection_errors += other.connection_errors;
        self.protocol_errors += other.protocol_errors;
        self.warmup_requests += other.warmup_requests;
        self.refills += other.refills;
        self.workers.merge(&other.workers);
        self.fleet.merge(&other.fleet);
        self.deliveries.extend_from_slice(&other.deliveries);
    }

    /// Operations scheduled in the window and never sent, over every operation.
    pub fn unsent(&self) -> u64 {
        self.operations.iter().map(|stats| stats.unsent).sum()
    }

    /// Answers received plus requests lost, over every operation.
    pub fn requests(&self) -> u64 {
        self.operations.iter().map(|stats| stats.count).sum::<u64>() + self.connection_errors
    }

    /// Error answers, lost requests and unreadable answers, over every operation.
    pub fn errors(&self) -> u64 {
        self.operations
            .iter()
            .map(|stats| stats.errors)
            .sum::<u64>()
            + self.connection_errors
            + self.protocol_errors
    }

    /// Errors per request (0 when nothing was sent).
    pub fn error_ratio(&self) -> f64 {
        match self.requests() {
            0 => 0.0,
            requests => self.errors() as f64 / requests as f64,
        }
    }
}

/// The percentiles every report shows, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LatencySummary {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
}

impl LatencySummary {
    /// The percentiles of `histogram`. Each is the highest value equivalent to the recorded one
    /// at the histogram's precision, so a percentile is never reported lower than it was.
    pub fn of(histogram: &Histogram<u64>) -> LatencySummary {
        let at = |quantile: f64| histogram.value_at_quantile(quantile);
        LatencySummary {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: histogram.highest_equivalent(histogram.max()),
        }
    }

    /// The percentile named `label` as reports name it (`p50` … `p9999`, `max`).
    pub fn percentile(&self, label: &str) -> Option<u64> {
        self.labelled()
            .into_iter()
            .find(|(known, _)| *known == label)
            .map(|(_, value)| value)
    }

    /// `(label, value)` pairs in report order.
    pub fn labelled(&self) -> [(&'static str, u64); 6] {
        [
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("p999", self.p999),
            ("p9999", self.p9999),
            ("max", self.max),
        ]
    }
}

/// How one client core's thread spent the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreUsage {
    pub cpu: usize,
    /// From run time zero to the core's end.
    pub elapsed_ns: u64,
    /// On the CPU.
    pub running_ns: u64,
    /// Runnable but waiting for the CPU: another process had it.
    pub waiting_ns: u64,
}

impl CoreUsage {
    /// Share of the run spent on the CPU.
    pub fn running_ratio(&self) -> f64 {
        self.running_ns as f64 / self.elapsed_ns.max(1) as f64
    }

    /// Share of the run spent waiting for the CPU.
    pub fn waiting_ratio(&self) -> f64 {
        self.waiting_ns as f64 / self.elapsed_ns.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(lane: u64, sequence: u64, attempt: u8) -> PutMark {
        PutMark {
            nonce: 1,
            token: (lane << PUT_TOKEN_SEQUENCE_BITS) | sequence,
            attempt,
        }
    }

    /// A put counts once per copy beyond its first, whichever attempts stored them and in
    /// whichever order they were received; a copy delivered twice counts once.
    #[test]
    fn copies_of_one_put_beyond_the_first_are_duplicates() {
        let mut tally = PutCopyTally::default();
        assert_eq!(tally.duplicates(), 0);
        // Many puts stored once, on two lanes, one far into its sequence.
        for sequence in 1..=1000 {
            tally.add(mark(0, sequence, 0));
        }
        tally.add(mark(3, 1 << 30, 0));
        assert_eq!(tally.duplicates(), 0);
        // Put 0/5: its first try and its first retry both stored.
        tally.add(mark(0, 5, 1));
        assert_eq!(tally.duplicates(), 1);
        // Put 3/7: its first try failed unstored; retries 1 and 3 stored (2 did not).
        tally.add(mark(3, 7, 3));
        tally.add(mark(3, 7, 1));
        assert_eq!(tally.duplicates(), 2);
        // Put 3/8: only its retry stored: no duplicate. The retry's copy redelivered: still one.
        tally.add(mark(3, 8, 1));
        tally.add(mark(3, 8, 1));
        // A first try's copy redelivered: no more than once either.
        tally.add(mark(0, 5, 0));
        assert_eq!(tally.duplicates(), 2);
        // Put 3/2^30 (first try stored) gets a retry's copy received later: one more.
        tally.add(mark(3, 1 << 30, 2));
        assert_eq!(tally.duplicates(), 3);
    }

    #[test]
    fn percentiles_of_a_uniform_sequence_are_exact_below_2048() {
        let mut stats = OperationStats::default();
        for value in 1..=1000 {
            stats.record_success(value, value);
        }
        let summary = LatencySummary::of(&stats.latency_us);
        assert_eq!(
            summary,
            LatencySummary {
                p50: 500,
                p90: 900,
                p99: 990,
                p999: 999,
                p9999: 1000,
                max: 1000,
            }
        );
        assert_eq!(stats.count, 1000);
        assert_eq!(stats.errors, 0);
    }

    #[test]
    fn percentiles_of_a_tail() {
        // 9,900 fast answers, 99 slow ones and one very slow one.
        let mut histogram = new_histogram();
        histogram.record_n(100, 9_900).unwrap();
        histogram.record_n(20_000, 99).unwrap();
        histogram.record(1_000_000).unwrap();
        let summary = LatencySummary::of(&histogram);
        assert_eq!(summary.p50, 100);
        assert_eq!(summary.p90, 100);
        assert_eq!(summary.p99, 100);
        // Above 2,048 values share buckets; each percentile is the top of its bucket.
        assert!(histogram.equivalent(summary.p999, 20_000));
        assert!(summary.p999 >= 20_000);
        assert!(histogram.equivalent(summary.p9999, 20_000));
        assert!(histogram.equivalent(summary.max, 1_000_000));
        assert!(summary.max >= 1_000_000);
    }

    #[test]
    fn errors_are_counted_by_status_and_code_and_merged() {
        let mut left = OperationStats::default();
        left.record_error(404, Some(b"MessageNotFound"));
        left.record_error(404, Some(b"MessageNotFound"));
        left.record_error(503, None);
        left.record_success(10, 10);
        let mut right = OperationStats::default();
        right.record_error(400, Some(b"PopReceiptMismatch"));
        right.record_error(404, Some(b"MessageNotFound"));
        right.record_success(30, 20);
        left.merge(&right);
        assert_eq!(left.count, 7);
        assert_eq!(left.errors, 5);
        assert_eq!(left.errors_by_status, vec![(404, 3), (503, 1), (400, 1)]);
        assert_eq!(
            left.errors_by_code,
            vec![
                ("MessageNotFound".to_string(), 3),
                ("PopReceiptMismatch".to_string(), 1)
            ]
        );
        assert_eq!(left.latency_us.len(), 2);
        assert_eq!(left.latency_uncorrected_us.max(), 20);
    }

    #[test]
    fn error_ratio_includes_lost_requests() {
        let mut measurements = Measurements::default();
        assert_eq!(measurements.error_ratio(), 0.0);
        for _ in 0..97 {
            measurements
                .operation_mut(Operation::Put)
                .record_success(5, 5);
        }
        measurements
            .operation_mut(Operation::Delete)
            .record_error(404, Some(b"MessageNotFound"));
        measurements.connection_errors = 2;
        assert_eq!(measurements.requests(), 100);
        assert_eq!(measurements.errors(), 3);
        assert!((measurements.error_ratio() - 0.03).abs() < 1e-12);
    }
}

//! When group commit's next flush starts: at once, or after a short hold that lets the clients a
//! flush has just acknowledged come back into the same batch. Synchronous and deterministic:
//! time and counts are passed in, and the log task (`runtime::engine`) does the waiting.
//!
//! **Why.** With many connections in a closed loop, flushing whenever records are pending splits
//! them into two cohorts: one waits for the sync in flight while the other's requests gather
//! into the next batch, so every request waits about two flushes. Once a flush acknowledges `k`
//! records, the clients behind them answer within a round trip and some work of the client's
//! and the shard's: holding the next flush until those records are back (with the ones that
//! gathered during the flush) lets both cohorts share one sync.
//!
//! **The policy.** After a flush that acknowledged `k` records while `p` more gathered, the next
//! flush waits for `p + k` pending records (or `LOG_FLUSH_BYTES_MAX` of them), but only while
//! they come back promptly: the first new record within `LOG_FLUSH_HOLD_GAP_US` and
//! `LOG_FLUSH_HOLD_FIRST_US_PER_RECORD` per acknowledged record of the flush's end (the shard
//! answers the whole batch before it reads the next requests), each later one
//! within `LOG_FLUSH_HOLD_GAP_US` of the one before (returning clients come back to back, an
//! open loop's arrivals are spaced by its rate), and all of them within `LOG_FLUSH_HOLD_US_MAX`
//! of the flush's end. A single client in a closed loop is never held (its one record is all
//! that is expected back). A hold that ends by time is met if three quarters of the expected
//! records are pending, or if half the clients the flush acknowledged came back while the hold
//! still waited for them (a fleet's returns are spread out: the slower ones then join the flush
//! after); otherwise it is a miss. Arrivals are timed by the shard as it emits each record
//! (`arrived`), not when the log task next looks: a busy shard runs that task late. After a
//! miss, clients that do not come back at once (think time, an open loop) do not pay for holds
//! again for `LOG_FLUSH_HOLD_BACKOFF_MS_MIN`, doubled at each miss in a row up to
//! `LOG_FLUSH_HOLD_BACKOFF_MS_MAX`; a hold that gets its records resets the backoff.

use std::time::{Duration, Instant};

use crate::limits::{
    LOG_FLUSH_BYTES_MAX, LOG_FLUSH_HOLD_BACKOFF_MS_MAX, LOG_FLUSH_HOLD_BACKOFF_MS_MIN,
    LOG_FLUSH_HOLD_FIRST_US_PER_RECORD, LOG_FLUSH_HOLD_GAP_US, LOG_FLUSH_HOLD_US_MAX,
};

/// What the log task does with the records pending now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Flush them.
    Flush,
    /// Wait for more until this deadline (or a new record, then ask again).
    Hold(Instant),
}

/// How holds have ended since the shard started (the log's summary line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldStats {
    /// Holds that ended with the expected records pending, or by time with three quarters of
    /// them pending or half the acknowledged clients back in time.
    pub met: u64,
    /// Holds that ended by time without their records (each starts or doubles a backoff).
    pub missed: u64,
}

/// The hold policy of one shard's log.
#[derive(Debug)]
pub struct FlushHold {
    /// Pending records the next flush waits for (0: none expected, flush at once).
    expected_records: u64,
    /// Records the last flush acknowledged: the clients expected back.
    acknowledged: u64,
    /// When the last flush ended: the hold's cap counts from it.
    flushed_at: Option<Instant>,
    /// Records that arrived since the flush while the hold still waited for them, and when the
    /// last of them arrived (`None`: none yet).
    returned: u64,
    last_arrival: Option<Instant>,
    /// Whether the current hold has already waited (a hold that never waited is no hold).
    holding: bool,
    /// Misses in a row, and the time before which nothing is held.
    misses: u32,
    backoff_until: Option<Instant>,
    stats: HoldStats,
}

impl Default for FlushHold {
    fn default() -> FlushHold {
        FlushHold::new()
    }
}

impl FlushHold {
    /// A policy that expects nothing yet: the first records are flushed at once.
    pub fn new() -> FlushHold {
        FlushHold {
            expected_records: 0,
            acknowledged: 0,
            flushed_at: None,
            returned: 0,
            last_arrival: None,
            holding: false,
            misses: 0,
            backoff_until: None,
            stats: HoldStats::default(),
        }
    }

    /// A flush that wrote `acknowledged` records ended at `now`, with `pending` more gathered
    /// meanwhile: the next flush expects those and the acknowledged clients' next records.
    pub fn flushed(&mut self, acknowledged: u64, pending: u64, now: Instant) {
        self.expected_records = pending + acknowledged;
        self.acknowledged = acknowledged;
        self.flushed_at = Some(now);
        self.returned = 0;
        self.last_arrival = None;
        self.holding = false;
    }

    /// A record arrived at `now` (the shard emitted it). Told by the shard as it happens, not
    /// when the log task next looks: a busy shard runs the log task late, and records that came
    /// in time must not look late. One that comes after the hold's deadline does not count.
    pub fn arrived(&mut self, now: Instant) {
        if self.deadline().is_some_and(|deadline| now < deadline) {
            self.returned += 1;
            self.last_arrival = Some(now);
        }
    }

    /// When the current hold ends unless a record arrives first: the first record back may take
    /// the shard's answers to the whole batch and a round trip; after it, the rest come back to
    /// back. `None` when no flush is being held for.
    fn deadline(&self) -> Option<Instant> {
        let flushed_at = self.flushed_at?;
        let cap = flushed_at + Duration::from_micros(LOG_FLUSH_HOLD_US_MAX);
        let gap = Duration::from_micros(LOG_FLUSH_HOLD_GAP_US);
        let first_us = self
            .acknowledged
            .saturating_mul(LOG_FLUSH_HOLD_FIRST_US_PER_RECORD)
            .min(LOG_FLUSH_HOLD_US_MAX);
        let deadline = match self.last_arrival {
            Some(at) => at + gap,
            None => flushed_at + gap + Duration::from_micros(first_us),
        };
        Some(deadline.min(cap))
    }

    /// What to do with `pending` records of `pending_bytes` at `now`. `urgent` (a stop's drain)
    /// flushes at once. With nothing pending the answer is `Flush` and nothing changes: the
    /// caller finds nothing to write and waits for a record.
    pub fn decide(
        &mut self,
        pending: u64,
        pending_bytes: usize,
        now: Instant,
        urgent: bool,
    ) -> Decision {
        let Some(deadline) = self.deadline() else {
            return Decision::Flush;
        };
        if pending == 0 {
            return Decision::Flush;
        }
        if pending >= self.expected_records {
            if self.holding {
                self.stats.met += 1;
                self.misses = 0;
                self.backoff_until = None;
            }
            return self.flush();
        }
        if urgent
            || pending_bytes >= LOG_FLUSH_BYTES_MAX
            || self.backoff_until.is_some_and(|until| now < until)
        {
            return self.flush();
        }
        // Only prompt returns are worth waiting for: the hold ends at its deadline.
        if now >= deadline
            && (pending * 4 >= self.expected_records * 3 || self.returned * 2 >= self.acknowledged)
        {
            // Most came back, or half the acknowledged clients did in time (a straggler's
            // client was busy): the hold worked.
            self.stats.met += 1;
            self.misses = 0;
            self.backoff_until = None;
            return self.flush();
        }
        if now >= deadline && !self.holding && self.returned == 0 {
            // No hold began and none came back in time: the first record after an idle spell
            // (or a slow client's). Nothing was held, so nothing is missed: flush it.
            return self.flush();
        }
        if now >= deadline {
            // The hold waited and the expected records did not come in time: back off, and
            // flush these at once.
            self.stats.missed += 1;
            self.misses = self.misses.saturating_add(1);
            let backoff_ms = LOG_FLUSH_HOLD_BACKOFF_MS_MIN
                .saturating_mul(1 << (self.misses - 1).min(16))
                .min(LOG_FLUSH_HOLD_BACKOFF_MS_MAX);
            self.backoff_until = Some(now + Duration::from_millis(backoff_ms));
            return self.flush();
        }
        self.holding = true;
        Decision::Hold(deadline)
    }

    /// How holds have ended so far.
    pub fn stats(&self) -> HoldStats {
        self.stats
    }

    /// Flush now: nothing is expected until the flush reports back.
    fn flush(&mut self) -> Decision {
        self.flushed_at = None;
        self.holding = false;
        Decision::Flush
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD_BYTES: usize = 1100;

    fn us(start: Instant, micros: u64) -> Instant {
        start + Duration::from_micros(micros)
    }

    fn decide(hold: &mut FlushHold, pending: u64, now: Instant) -> Decision {
        hold.decide(pending, pending as usize * RECORD_BYTES, now, false)
    }

    #[test]
    fn first_records_flush_at_once() {
        let mut hold = FlushHold::new();
        assert_eq!(decide(&mut hold, 1, Instant::now()), Decision::Flush);
    }

    #[test]
    fn single_client_in_a_closed_loop_is_never_held() {
        let start = Instant::now();
        let mut hold = FlushHold::new();
        for round in 0..10 {
            let flush_end = us(start, round * 1000);
            hold.flushed(1, 0, flush_end);
            // Nothing pending yet: nothing to hold (the task sleeps until a record arrives).
            assert_eq!(hold.decide(0, 0, flush_end, false), Decision::Flush);
            assert_eq!(decide(&mut hold, 1, us(flush_end, 30)), Decision::Flush);
        }
        assert_eq!(hold.stats(), HoldStats::default());
    }

    #[test]
    fn two_cohorts_merge_into_one_flush() {
        let start = Instant::now();
        let cap = us(start, LOG_FLUSH_HOLD_US_MAX);
        let mut hold = FlushHold::new();
        // Cohort A (16) was acknowledged while cohort B (16) gathered.
        hold.flushed(16, 16, start);
        // Until the first of A is back: the gap, and time for the shard to answer 16.
        let first = us(
            start,
            LOG_FLUSH_HOLD_GAP_US + 16 * LOG_FLUSH_HOLD_FIRST_US_PER_RECORD,
        );
        assert_eq!(
            decide(&mut hold, 16, us(start, 1)),
            Decision::Hold(first.min(cap))
        );
        // A comes back a record at a time, each well within the gap.
        for (index, returned) in (1..16).enumerate() {
            let now = us(start, 200 + 5 * index as u64);
            let expected = us(now, LOG_FLUSH_HOLD_GAP_US).min(cap);
            hold.arrived(now);
            assert_eq!(
                decide(&mut hold, 16 + returned, now),
                Decision::Hold(expected)
            );
        }
        assert_eq!(decide(&mut hold, 32, us(start, 290)), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 1, missed: 0 });
        // All 32 in one flush; none gathered during it: the next waits for all 32.
        hold.flushed(32, 0, us(start, 800));
        assert!(matches!(
            decide(&mut hold, 5, us(start, 1000)),
            Decision::Hold(_)
        ));
        assert_eq!(decide(&mut hold, 32, us(start, 1020)), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 2, missed: 0 });
    }

    /// An open loop at 10,000/s: 4 records a flush, 4 more gathered during it, the next ones
    /// 100 µs apart. Returns the time of the miss.
    fn open_loop_miss(hold: &mut FlushHold, flush_end: Instant) -> Instant {
        hold.flushed(4, 4, flush_end);
        let arrival = us(flush_end, 50);
        hold.arrived(arrival);
        let gap_end = us(arrival, LOG_FLUSH_HOLD_GAP_US);
        assert_eq!(decide(hold, 5, arrival), Decision::Hold(gap_end));
        // The gap passes with no new record: a miss, flushed at once.
        assert_eq!(decide(hold, 5, gap_end), Decision::Flush);
        gap_end
    }

    #[test]
    fn clients_that_never_return_back_off() {
        let start = Instant::now();
        let mut hold = FlushHold::new();
        let missed_at = open_loop_miss(&mut hold, start);
        assert_eq!(hold.stats(), HoldStats { met: 0, missed: 1 });
        // During the backoff nothing is held.
        let backoff = Duration::from_millis(LOG_FLUSH_HOLD_BACKOFF_MS_MIN);
        let later = missed_at + Duration::from_millis(1);
        hold.flushed(4, 4, later);
        assert_eq!(decide(&mut hold, 5, us(later, 1)), Decision::Flush);
        // After it, a hold is tried again; a second miss doubles the backoff.
        let missed_at = open_loop_miss(&mut hold, missed_at + backoff);
        assert_eq!(hold.stats(), HoldStats { met: 0, missed: 2 });
        let within_double = missed_at + backoff + Duration::from_millis(1);
        hold.flushed(4, 4, within_double);
        assert_eq!(decide(&mut hold, 5, within_double), Decision::Flush);
        open_loop_miss(&mut hold, missed_at + 2 * backoff);
        assert_eq!(hold.stats(), HoldStats { met: 0, missed: 3 });
    }

    #[test]
    fn half_a_cohort_back_in_time_is_a_met_hold() {
        // A fleet of 32 whose returns are spread out (consumers: Get, Delete and Put replies
        // take the client different times): 20 come back within the gaps, then a pause.
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(32, 0, start);
        let mut now = us(start, 150);
        for pending in 1..=20 {
            now = us(now, 5);
            hold.arrived(now);
            assert!(matches!(decide(&mut hold, pending, now), Decision::Hold(_)));
        }
        let gap_end = us(now, LOG_FLUSH_HOLD_GAP_US);
        assert_eq!(decide(&mut hold, 20, gap_end), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 1, missed: 0 });
        // No backoff: the next flush is held again.
        hold.flushed(20, 12, us(gap_end, 300));
        assert!(matches!(
            decide(&mut hold, 13, us(gap_end, 310)),
            Decision::Hold(_)
        ));
    }

    #[test]
    fn records_that_came_in_time_count_when_the_log_task_looks_late() {
        // A busy shard runs the log task long after the records that woke it: 20 of 32 came
        // back 5 µs apart, and the task looks only after the hold's deadline.
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(32, 0, start);
        let mut now = us(start, 150);
        for _ in 0..20 {
            now = us(now, 5);
            hold.arrived(now);
        }
        let late = us(now, 3 * LOG_FLUSH_HOLD_GAP_US);
        assert_eq!(decide(&mut hold, 20, late), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 1, missed: 0 });
        // One that arrives after the deadline is late, whenever the task looks: it is not
        // counted back (counted, it would make this a missed hold), and nothing was held.
        hold.flushed(20, 0, late);
        let after = us(
            late,
            LOG_FLUSH_HOLD_GAP_US + 20 * LOG_FLUSH_HOLD_FIRST_US_PER_RECORD + 1,
        );
        hold.arrived(after);
        assert_eq!(decide(&mut hold, 1, after), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 1, missed: 0 });
    }

    #[test]
    fn a_record_after_the_first_allowance_is_flushed_at_once() {
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(2, 0, start);
        let late = us(
            start,
            LOG_FLUSH_HOLD_GAP_US + 2 * LOG_FLUSH_HOLD_FIRST_US_PER_RECORD,
        );
        assert_eq!(decide(&mut hold, 1, late), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats::default());
    }

    #[test]
    fn the_first_record_after_idle_time_is_no_miss() {
        // A burst's first record, long after the last flush: nothing was held, so no backoff
        // keeps the burst's clients from sharing flushes.
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(32, 0, start);
        let burst = start + Duration::from_secs(1);
        hold.arrived(burst);
        assert_eq!(decide(&mut hold, 1, burst), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats::default());
        hold.flushed(16, 16, us(burst, 300));
        assert!(matches!(
            decide(&mut hold, 16, us(burst, 301)),
            Decision::Hold(_)
        ));
    }

    #[test]
    fn a_slow_open_loop_waits_only_for_one_answer_and_a_gap() {
        // At 1,000/s a flush acknowledged one record while one more arrived: that one is held
        // only as long as the one client answered could take to come back.
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(1, 1, start);
        let first = us(
            start,
            LOG_FLUSH_HOLD_GAP_US + LOG_FLUSH_HOLD_FIRST_US_PER_RECORD,
        );
        assert_eq!(decide(&mut hold, 1, start), Decision::Hold(first));
        assert_eq!(decide(&mut hold, 1, first), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats { met: 0, missed: 1 });
    }

    #[test]
    fn backoff_is_capped() {
        let mut hold = FlushHold::new();
        let mut now = Instant::now();
        for _ in 0..40 {
            // Each miss's backoff has ended by the next try, whose hold is tried again.
            now = open_loop_miss(&mut hold, now)
                + Duration::from_millis(LOG_FLUSH_HOLD_BACKOFF_MS_MAX);
        }
        assert_eq!(hold.stats().missed, 40);
    }

    #[test]
    fn records_that_keep_coming_are_held_no_longer_than_the_cap() {
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(1000, 0, start);
        let mut pending = 1;
        let mut now = start;
        while let Decision::Hold(deadline) = decide(&mut hold, pending, now) {
            assert!(deadline <= us(start, LOG_FLUSH_HOLD_US_MAX));
            pending += 1;
            now = us(now, LOG_FLUSH_HOLD_GAP_US / 2);
            hold.arrived(now);
        }
        assert!(now >= us(start, LOG_FLUSH_HOLD_US_MAX));
        assert_eq!(hold.stats(), HoldStats { met: 0, missed: 1 });
    }

    #[test]
    fn a_full_batch_or_an_urgent_flush_is_not_held() {
        let start = Instant::now();
        let mut hold = FlushHold::new();
        hold.flushed(10_000, 0, start);
        assert_eq!(
            hold.decide(10, LOG_FLUSH_BYTES_MAX, us(start, 1), false),
            Decision::Flush
        );
        hold.flushed(32, 0, start);
        assert_eq!(hold.decide(10, 10_000, us(start, 1), true), Decision::Flush);
        assert_eq!(hold.stats(), HoldStats::default());
    }
}

//! A shard's queue state inside its executor: applies commands at the current time and keeps one
//! backend timer armed for the state's next deadline (lease ends, delayed puts, TTL expiry), so
//! expired messages are freed without any request touching their queue. One timer per shard, not
//! per message: glommio keeps its timers in a BTreeMap, and the wheel in `queue/` is cheaper than
//! either backend's timers for millions of messages.
//!
//! A durable shard also runs its log (`storage::log`): a task that group-commits the records its
//! state emits, a task that writes snapshots a step at a time, and, with `--durability write`, a
//! task that syncs in the background. A command that emitted records is answered only once they
//! count as written (`Applied::durable_at`). A log that cannot be written ends the process: the
//! shard has changed its state in memory and can no longer say what is on disk.
//!
//! A durable shard also watches its disk (`--max-disk`, `--min-free-disk`): after every flush
//! and snapshot, and every `DISK_SAMPLE_INTERVAL_MS` (reading the file system's free space as
//! its `SpaceGauge` thread last measured it, so a file system that hangs never stalls the
//! shard's thread), it tells the state whether it may still grow (`storage::space`). A full file
//! system is then met by 503 `ServerBusy` answers, not by a failed write: that stays the last
//! resort (the process exits, nothing acknowledged is lost).

use std::cell::{Cell, Ref, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::backend::Backend;
use super::os;

use crate::error::StorageError;
use crate::governor::metrics::Scope;
use crate::governor::throttle::is_message_operation;
use crate::governor::Governor;
use crate::limits::{
    DISK_SAMPLE_INTERVAL_MS, MEMORY_GIVE_BACK_BYTES_MIN, TEXT_READS_AHEAD_MAX,
    TEXT_READ_FAILURES_MAX, TEXT_WAIT_ROUNDS_MAX, TIMER_ENTRIES_PER_STEP_MAX, TIMER_STEP_PAUSE_US,
    WRITE_MODE_SYNC_INTERVAL_MS,
};
use crate::queue::command::TextWait;
use crate::queue::state::texts::TextOnDisk;
use crate::queue::{Census, Command, Replicas, Reply, ShardState};
use crate::storage::hold::{Decision, FlushHold};
use crate::storage::log::{Durability, Log, LogStats};
use crate::storage::space::{DiskLimits, Space, SpaceGauge};
use crate::time::{Clock, SystemClock};

/// Longest the timer task sleeps without a deadline, so a clock step is noticed eventually.
const TIMER_IDLE_MS: u64 = 60_000;

/// One shard's state, its timer and, when durable, its log.
pub struct Engine<B: Backend> {
    state: RefCell<ShardState>,
    clock: SystemClock,
    /// The deadline the timer task is sleeping towards (`u64::MAX`: none).
    armed_deadline_ms: Cell<u64>,
    /// Wakes the timer task when a command adds an earlier deadline.
    wake: Wake,
    /// The shard's log; `None` in memory-only mode.
    log: Option<Log<B::Disk>>,
    /// The shard's disk limits, with its log.
    disk_limits: Option<DiskLimits>,
    /// Bytes of message text the shard keeps in memory once written to its log
    /// (`--text-memory`); `None`: every text.
    text_bytes_max: Option<u64>,
    /// Texts read back from the log for a Get or Peek (`apply_serving`): texts and their bytes,
    /// and the reads that failed.
    texts_read: Cell<TextsRead>,
    /// The queues (records' indices) a Get or Peek is reading texts for (`serve_rounds`): one
    /// read at a time per queue, so that competing consumers wait for the texts the first one
    /// reads (and reads ahead) rather than each read the same.
    reading: RefCell<Vec<u32>>,
    /// The requests waiting for another's read of their queue's texts to end.
    read_waiters: RefCell<Vec<Waker>>,
    /// Wakes the task that reads texts ahead of Gets (`run_reads_ahead`) when a queue is due
    /// (`ShardState::read_ahead_is_due`) or one of its reads has ended.
    read_ahead_wake: Wake,
    /// Reads ahead of Gets in flight (`run_reads_ahead`), at most `TEXT_READS_AHEAD_MAX`.
    reads_ahead: Cell<usize>,
    /// The file system holding the shard's files, measured on a thread of its own (`None`: in
    /// memory, or no thread could be started; without a measurement only `--max-disk`
    /// applies).
    gauge: Option<SpaceGauge>,
    /// Whether the last snapshot wanted fitted in the free space (`snapshot_wanted`), so that
    /// a change is said once.
    snapshot_fits: Cell<bool>,
    /// Wakes the log task when the state has emitted records.
    log_wake: Wake,
    /// When the log task's next flush starts (`storage::hold`).
    hold: RefCell<FlushHold>,
    /// A stop's drain is waiting: flush without holding.
    draining: Cell<bool>,
    /// Wakes the snapshot task when the log has outgrown the live data.
    snapshot_wake: Wake,
    /// Wakes the eviction task when a step of evictions left texts beyond `--text-memory`.
    evict_wake: Wake,
    /// `ShardState::freed_message_bytes` when the shard last gave free memory back
    /// (`give_back_memory`).
    given_back_at: Cell<u64>,
    /// The shard's index, for messages.
    index: usize,
    /// Rate limits, faults, latency and counters (`governor`): the per-queue limit is decided
    /// here, on the queue's owner, before the state sees the command.
    pub governor: Governor,
}

/// A command applied: its outcome, and the log sequence its changes must reach before the
/// client may hear of them.
pub struct Applied {
    /// The command's reply.
    pub outcome: Result<Reply, StorageError>,
    /// On a durable shard, the last record emitted so far when it is not written yet: the
    /// command's own changes, and any change its reply may show.
    pub durable_at: Option<u64>,
}

/// What the shard read back from its log for Gets and Peeks.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextsRead {
    /// Texts read.
    pub texts: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Reads that failed (the request was tried again, or answered 500 `InternalError`; a
    /// failed read ahead changes nothing).
    pub failures: u64,
    /// Gets and Peeks that waited for texts on disk only.
    pub waits: u64,
    /// Texts read ahead of such a request (`TextWait::ahead`), among `texts`.
    pub ahead: u64,
    /// Texts read ahead of Gets with none waiting (`run_reads_ahead`), among `ahead`: asked
    /// for, some may have been taken or evicted again before their read ended.
    pub early: u64,
}

/// A queue's read of texts in flight, for a Get or Peek (`Engine::serve_rounds`) or ahead of
/// Gets (`run_reads_ahead`): once it ends, or its request is dropped, others may read for that
/// queue, those waiting apply again, and a read ahead of its Gets may start.
struct Reading<'a, B: Backend> {
    engine: &'a Engine<B>,
    queue: u32,
}

impl<B: Backend> Drop for Reading<'_, B> {
    fn drop(&mut self) {
        let engine = self.engine;
        engine
            .reading
            .borrow_mut()
            .retain(|&queue| queue != self.queue);
        for waiter in engine.read_waiters.take() {
            waiter.wake();
        }
        // A queue due while this read ran was passed over (`ShardState::next_read_ahead`).
        engine.read_ahead_wake.notify();
    }
}

/// A wake-up for one task on the same thread: set by `notify`, taken by `woken`.
#[derive(Default)]
struct Wake {
    pending: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Wake {
    fn notify(&self) {
        self.pending.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Completes once `notify` has been called since the last wake-up.
    fn woken(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(|context| {
            if self.pending.replace(false) {
                Poll::Ready(())
            } else {
                self.waker.set(Some(context.waker().clone()));
                Poll::Pending
            }
        })
    }
}

impl<B: Backend> Engine<B> {
    /// Creates the engine of shard `index` and starts its timer task, and with a `log` (its
    /// disk limits, and the text it keeps in memory) its log tasks and disk watch, on the
    /// current executor.
    pub fn start(
        index: usize,
        state: ShardState,
        log: Option<(Log<B::Disk>, DiskLimits, Option<u64>)>,
        governor: Governor,
    ) -> Rc<Engine<B>> {
        let (log, (disk_limits, text_bytes_max)) = match log {
            Some((log, limits, text_bytes_max)) => (Some(log), (Some(limits), text_bytes_max)),
            None => (None, (None, None)),
        };
        assert_eq!(
            text_bytes_max.is_some(),
            state.tracks_texts(),
            "texts are tracked (from the start, `ShardState::track_texts`) when they leave memory"
        );
        assert!(
            state.texts_evicted().0 == 0 || state.tracks_texts(),
            "texts recovery left on disk are tracked"
        );
        let durability = log.as_ref().map(Log::durability);
        let gauge = log.as_ref().and_then(|log| {
            SpaceGauge::start(log.directory(), index)
                .inspect_err(|error| {
                    eprintln!(
                        "azq: shard {index}: no thread to measure the file system ({error}); \
                         only --max-disk applies"
                    )
                })
                .ok()
        });
        let engine = Rc::new(Engine {
            state: RefCell::new(state),
            clock: SystemClock,
            armed_deadline_ms: Cell::new(u64::MAX),
            wake: Wake::default(),
            log,
            disk_limits,
            text_bytes_max,
            texts_read: Cell::new(TextsRead::default()),
            reading: RefCell::new(Vec::new()),
            read_waiters: RefCell::new(Vec::new()),
            read_ahead_wake: Wake::default(),
            reads_ahead: Cell::new(0),
            gauge,
            snapshot_fits: Cell::new(true),
            log_wake: Wake::default(),
            hold: RefCell::new(FlushHold::new()),
            draining: Cell::new(false),
            snapshot_wake: Wake::default(),
            evict_wake: Wake::default(),
            given_back_at: Cell::new(0),
            index,
            governor,
        });
        B::spawn(run_timer::<B>(engine.clone()));
        if let Some(durability) = durability {
            // Measured first: a snapshot recovery left due must fit in the free space (else
            // it would end the process with ENOSPC at every start).
            engine.watch_disk();
            if engine.snapshot_wanted(true) {
                engine.snapshot_wake.notify();
            }
            if engine.state.borrow().journal_untaken_sequence()
                < engine.state.borrow().journal_next_sequence()
            {
                // Changes made before the shard started (an `--init` file's) are written first.
                engine.log_wake.notify();
            }
            B::spawn(run_log::<B>(engine.clone()));
            B::spawn(run_snapshots::<B>(engine.clone()));
            B::spawn(run_disk_watch::<B>(engine.clone()));
            if engine.text_bytes_max.is_some() {
                B::spawn(run_evictions::<B>(engine.clone()));
                B::spawn(run_reads_ahead::<B>(engine.clone()));
                // After a change of `--shards` the texts recovery copied into the new
                // generation's snapshot may leave memory at once, to its entries.
                engine.evict_wake.notify();
            }
            if durability == Durability::Write {
                B::spawn(run_background_sync::<B>(engine.clone()));
            }
        }
        engine
    }

    /// Completes once log record `sequence` counts as written.
    pub async fn durable(&self, sequence: u64) {
        if let Some(log) = &self.log {
            log.durable(sequence).await;
        }
    }

    /// Completes once every record the state has emitted so far counts as written (at once in
    /// memory). The drain waits for it before the shard stops: a reply waits only for the
    /// records up to its own, so without it a graceful stop could drop changes no reply waited
    /// for, such as an `--init` file's, which the first flush writes after the shard serves.
    pub async fn written(&self) {
        let Some(log) = &self.log else {
            return;
        };
        let last = self
            .state
            .borrow()
            .journal_next_sequence()
            .and_then(|next| next.checked_sub(1));
        if let Some(last) = last.filter(|&last| log.durable_sequence() < Some(last)) {
            // The log task flushes whatever is left, whoever emitted it, without a hold.
            self.draining.set(true);
            self.log_wake.notify();
            log.durable(last).await;
        }
    }

    /// One line on what the shard's log wrote, for the end of the run; `None` in memory.
    pub fn log_summary(&self) -> Option<String> {
        let stats = self.log.as_ref()?.stats();
        let holds = self.hold.borrow().stats();
        let per_flush = stats.records as f64 / stats.flushes.max(1) as f64;
        Some(format!(
            "shard {}: {} records in {} flushes ({per_flush:.1} per flush, at most {}), {} µs a \
             flush on average, {:.1} MiB; holds: {} met, {} missed",
            self.index,
            stats.records,
            stats.flushes,
            stats.records_max,
            stats.duration_sum_us / stats.flushes.max(1),
            stats.bytes as f64 / (1 << 20) as f64,
            holds.met,
            holds.missed
        ))
    }

    /// The current time, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The shard's copy of the replicated settings, for planning a request. Planning never
    /// waits, so the borrow ends before any command is applied.
    pub fn replicas(&self) -> Ref<'_, Replicas> {
        Ref::map(self.state.borrow(), ShardState::replicas)
    }

    /// The shard's queues, messages and deepest queues, for a metrics scrape.
    pub fn census(&self, deepest_max: usize) -> Census {
        self.state.borrow().census(deepest_max)
    }

    /// The shard's state, read only (inspection, the console's samples). Never held across a
    /// wait.
    pub fn state(&self) -> Ref<'_, ShardState> {
        self.state.borrow()
    }

    /// Bytes of the shard's files on disk (0 in memory): `Log::disk_bytes`.
    pub fn disk_bytes(&self) -> u64 {
        self.log.as_ref().map_or(0, Log::disk_bytes)
    }

    /// The shard's share of `--max-disk`, bytes (0: none, or in memory).
    pub fn disk_bytes_max(&self) -> u64 {
        self.disk_limits
            .and_then(|limits| limits.shard_bytes_max)
            .unwrap_or(0)
    }

    /// Free bytes of the file system holding the shard's files, as last measured (`None` in
    /// memory, or when it could not be measured).
    pub fn filesystem_free_bytes(&self) -> Option<u64> {
        self.space().map(|space| space.free_bytes)
    }

    /// The file system holding the shard's files as last measured.
    fn space(&self) -> Option<Space> {
        self.gauge.as_ref().and_then(SpaceGauge::space)
    }

    /// Reads the file system's free space as last measured and tells the state whether it may
    /// still grow (`Log::watch_space`: the disk rule, with the shard's files as the log counts
    /// them). Cheap (the log's own bookkeeping and two atomics), so it runs after every flush.
    fn watch_disk(&self) {
        let (Some(log), Some(limits)) = (&self.log, &self.disk_limits) else {
            return;
        };
        let mut state = self.state.borrow_mut();
        let refusing = state.disk_full();
        let refusal = log.watch_space(&state, limits, self.space());
        // One line when refusals start and one when they stop: a client sees only 503s.
        match (&refusal, refusing) {
            (Some(why), false) => eprintln!(
                "azq: shard {}: refusing puts, updates with a text and new queues (503 \
                 ServerBusy) until deletes or a snapshot make room: {why}",
                self.index
            ),
            (None, true) => eprintln!(
                "azq: shard {}: room on disk again; accepting puts",
                self.index
            ),
            _ => {}
        }
        state.set_disk_full(refusal.is_some());
    }

    /// Whether to start a snapshot: the log wants one (`Log::wants_snapshot`) and the file
    /// system, as last measured, can hold what it writes keeping every segment with texts on
    /// disk only (`Log::snapshot_bytes_max`; it copies more only within the copy budget). A
    /// snapshot that cannot fit would end the process with ENOSPC, and at every restart again
    /// (recovery leaves the log that made it due): it waits instead, said once on stderr, for
    /// deletes to shrink the live data or for free space.
    /// `sweep`: also when segments have died enough for one (`Log::dead_segments_due`,
    /// a pass over them: asked every `DISK_SAMPLE_INTERVAL_MS`, not after every flush).
    fn snapshot_wanted(&self, sweep: bool) -> bool {
        let Some(log) = &self.log else {
            return false;
        };
        let due = log.wants_snapshot(&self.state) || sweep && log.dead_segments_due(&self.state);
        if !due {
            return false;
        }
        let needed_bytes = log.snapshot_bytes_max(&self.state.borrow());
        let fits = self
            .space()
            .is_none_or(|space| space.free_bytes >= needed_bytes);
        if fits != self.snapshot_fits.replace(fits) {
            if fits {
                eprintln!("azq: shard {}: room for the snapshot again", self.index);
            } else {
                let free_bytes = self.space().map_or(0, |space| space.free_bytes);
                eprintln!(
                    "azq: shard {}: a snapshot is due but the file system's {:.1} MiB free \
                     cannot hold what it writes ({:.1} MiB); waiting for deletes or free space",
                    self.index,
                    free_bytes as f64 / (1 << 20) as f64,
                    needed_bytes as f64 / (1 << 20) as f64
                );
            }
        }
        fits
    }

    /// What the shard's log has written, when it has one.
    pub fn log_stats(&self) -> Option<LogStats> {
        self.log.as_ref().map(Log::stats)
    }

    /// Applies `command` at `now_ms` (the caller's reading of `now_ms()`, taken just before: the
    /// connection loop reads the clock once per request and passes it to planning, here and to
    /// the answer), unless its queue is over `--queue-rate-limit`; a Get or Peek that needs
    /// texts on disk only is answered once they are read back (`serve_wait`).
    pub async fn apply_serving(&self, command: Command, now_ms: u64) -> Applied {
        let again = self.may_wait(&command).then(|| command.clone());
        let applied = self.apply(command, now_ms);
        match applied.outcome {
            Ok(Reply::Wait(wait)) => {
                let command = again.expect("only a command that may wait does");
                self.serve_wait(command, wait).await
            }
            _ => applied,
        }
    }

    /// Whether `command` may answer `Reply::Wait`: a Get or Peek while texts are on disk only.
    /// A caller keeps a copy of such a command, to apply it again once the texts are read.
    pub fn may_wait(&self, command: &Command) -> bool {
        command.reads_texts() && self.state.borrow().texts_evicted().0 > 0
    }

    /// Reads the texts `wait` names, gives them to their messages and applies `command` again
    /// (at the time then), until it no longer waits. One request at a time reads for a queue,
    /// and with its texts those `wait` names ahead (`ShardState::deliver_ahead`); others
    /// waiting for that queue apply again once its read ends, and most then find their texts
    /// in memory. Other Gets may take the messages meanwhile (their texts were in memory, or
    /// read for them): the command then waits for the texts of the messages it would return
    /// now, round after round, each round having served others. A read that fails is tried
    /// again (the text may be in memory by then: a snapshot reads back what it records before
    /// it gives up a segment); after `TEXT_READ_FAILURES_MAX` failures the answer is 500
    /// `InternalError`, and after `TEXT_WAIT_ROUNDS_MAX` rounds 503 `ServerBusy`, with nothing
    /// changed and one line on stderr. A read ahead that fails changes nothing but the
    /// metrics. Once it is answered, the texts read for it may leave memory again; not between
    /// its rounds: evicted while it waited for others, they were wanted again, round after
    /// round (the break-it review of 767dc0d: Gets of messages others Updated answered 503
    /// after 1024 rounds).
    pub async fn serve_wait(&self, command: Command, wait: TextWait) -> Applied {
        let mut delivered = Vec::new();
        let changes = wait.snapshot_changes;
        let mut read = self.texts_read.get();
        read.waits += 1;
        self.texts_read.set(read);
        let applied = self.serve_rounds(command, wait, &mut delivered).await;
        let mut state = self.state.borrow_mut();
        state.note_answered(&delivered, changes);
        if !delivered.is_empty() {
            // No flush may come to ask (Peeks alone).
            self.evict_wake.notify();
        }
        applied
    }

    /// The rounds of `serve_wait`; notes in `delivered` each text it put into its slot.
    async fn serve_rounds(
        &self,
        command: Command,
        mut wait: TextWait,
        delivered: &mut Vec<TextOnDisk>,
    ) -> Applied {
        let mut failures = 0;
        for _ in 0..TEXT_WAIT_ROUNDS_MAX {
            let applied = if self.reading.borrow().contains(&wait.queue) {
                self.read_ended(wait.queue).await;
                self.apply_admitted(command.clone(), self.now_ms())
            } else {
                self.reading.borrow_mut().push(wait.queue);
                let _reading = Reading {
                    engine: self,
                    queue: wait.queue,
                };
                if let Err(error) = self.read_own(&mut wait, delivered).await {
                    failures += 1;
                    // One line a request: its later failures count in the metrics only.
                    if failures == 1 {
                        eprintln!(
                            "azq: shard {}: reading texts back from the log failed ({error}); \
                             trying the request again",
                            self.index
                        );
                    }
                    if failures == TEXT_READ_FAILURES_MAX {
                        eprintln!(
                            "azq: shard {}: {TEXT_READ_FAILURES_MAX} reads of texts on disk \
                             failed for one request; answered 500 InternalError",
                            self.index
                        );
                        return Applied {
                            outcome: Err(StorageError::InternalError),
                            durable_at: None,
                        };
                    }
                    wait.ahead.clear();
                }
                // Nothing awaited since its texts were delivered: applied now, it finds them.
                let applied = self.apply_admitted(command.clone(), self.now_ms());
                // Then the texts after them, the queue still its to read: the requests waiting
                // for it find those in memory.
                self.read_ahead(&mut wait).await;
                applied
            };
            match applied.outcome {
                Ok(Reply::Wait(next)) => wait = next,
                _ => return applied,
            }
        }
        eprintln!(
            "azq: shard {}: a request still wanted texts on disk after {TEXT_WAIT_ROUNDS_MAX} \
             rounds of reads, each taken by other requests; answered 503 ServerBusy",
            self.index
        );
        Applied {
            outcome: Err(StorageError::ServerBusy),
            durable_at: None,
        }
    }

    /// Completes once no request reads texts for `queue`.
    fn read_ended(&self, queue: u32) -> impl Future<Output = ()> + '_ {
        poll_fn(move |context| {
            if self.reading.borrow().contains(&queue) {
                self.read_waiters.borrow_mut().push(context.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }

    /// Reads the texts `wait` names for its request and delivers them to their messages (each
    /// noted in `delivered`), or fails.
    async fn read_own(
        &self,
        wait: &mut TextWait,
        delivered: &mut Vec<TextOnDisk>,
    ) -> std::io::Result<()> {
        let log = self
            .log
            .as_ref()
            .expect("only a durable shard has texts on disk");
        let outcome = log.read_texts(std::mem::take(&mut wait.texts)).await;
        // Taken after the read: other requests count theirs while it is in flight.
        let mut read = self.texts_read.get();
        let outcome = outcome.map(|texts| {
            let mut state = self.state.borrow_mut();
            for (named, text) in texts {
                read.texts += 1;
                read.bytes += text.len() as u64;
                if state.deliver_for_request(named, text) {
                    delivered.push(named);
                }
            }
        });
        read.failures += u64::from(outcome.is_err());
        self.texts_read.set(read);
        outcome
    }

    /// Reads ahead of a Get, with no request waiting (`run_reads_ahead`): the texts `wait`
    /// names, its queue marked as being read for meanwhile, so that a Get of it that would wait
    /// waits for this read to end and then finds them in memory.
    async fn read_ahead_of_gets(&self, mut wait: TextWait) {
        let _reading = Reading {
            engine: self,
            queue: wait.queue,
        };
        let texts = self.read_ahead(&mut wait).await;
        let mut read = self.texts_read.get();
        read.early += texts;
        self.texts_read.set(read);
    }

    /// Reads the texts `wait` names ahead and delivers them (`ShardState::deliver_ahead`);
    /// answers how many it read. A failure changes nothing but the count of failed reads.
    async fn read_ahead(&self, wait: &mut TextWait) -> u64 {
        let Some(log) = self.log.as_ref().filter(|_| !wait.ahead.is_empty()) else {
            return 0;
        };
        let outcome = log.read_texts(std::mem::take(&mut wait.ahead)).await;
        let (mut read, now_ms) = (self.texts_read.get(), self.now_ms());
        let mut count = 0;
        match outcome {
            Ok(texts) => {
                let mut state = self.state.borrow_mut();
                count = texts.len() as u64;
                for (named, text) in texts {
                    read.bytes += text.len() as u64;
                    let held_until_ms = now_ms + wait.hold_ms;
                    state.deliver_ahead(named, text, wait.snapshot_changes, held_until_ms);
                }
            }
            Err(_) => read.failures += 1,
        }
        read.texts += count;
        read.ahead += count;
        self.texts_read.set(read);
        count
    }

    /// Reads the texts on disk only that a page of inspection shows (`wanted`), as a Peek reads
    /// them but put back nowhere: inspecting changes nothing, in memory or on disk. A batch
    /// fails whole when one read does or one record is not the one named (its file gone, or
    /// replaced by a snapshot of the same name), so then each is read alone, and what still
    /// fails is left out (the page shows it as on disk). Counted among the texts read and the
    /// failures.
    pub async fn read_texts_shown(&self, wanted: Vec<TextOnDisk>) -> Vec<(TextOnDisk, Bytes)> {
        let Some(log) = self.log.as_ref().filter(|_| !wanted.is_empty()) else {
            return Vec::new();
        };
        let mut failures = 0;
        let texts = match log.read_texts(wanted.clone()).await {
            Ok(texts) => texts,
            Err(_) => {
                failures += 1;
                let mut texts = Vec::with_capacity(wanted.len());
                for named in wanted {
                    match log.read_texts(vec![named]).await {
                        Ok(text) => texts.extend(text),
                        Err(_) => failures += 1,
                    }
                }
                texts
            }
        };
        let mut read = self.texts_read.get();
        read.texts += texts.len() as u64;
        read.bytes += texts.iter().map(|(_, text)| text.len() as u64).sum::<u64>();
        read.failures += failures;
        self.texts_read.set(read);
        texts
    }

    /// What the shard read back from its log for Gets and Peeks.
    pub fn texts_read(&self) -> TextsRead {
        self.texts_read.get()
    }

    /// Texts the log's read cache answered, and chunks read into it (`Log::read_cache_counts`;
    /// 0 in memory).
    pub fn read_cache_counts(&self) -> (u64, u64) {
        self.log.as_ref().map_or((0, 0), Log::read_cache_counts)
    }

    /// Applies `command` at `now_ms` (see `apply_serving`), unless its queue is over
    /// `--queue-rate-limit`. A Get or Peek may answer `Reply::Wait`, having changed nothing
    /// (`may_wait`): the caller then hands it to `serve_wait`.
    pub fn apply(&self, command: Command, now_ms: u64) -> Applied {
        if let Some(throttle) = &self.governor.queue_throttle {
            if let Some(queue) = command.queue().filter(|_| is_message_operation(&command)) {
                if !throttle.borrow_mut().take(queue, now_ms) {
                    self.governor.metrics.throttled(Scope::Queue);
                    return Applied {
                        outcome: Err(StorageError::QueueRateExceeded),
                        durable_at: None,
                    };
                }
            }
        }
        self.apply_admitted(command, now_ms)
    }

    /// `apply`, past the queue's rate limit.
    fn apply_admitted(&self, command: Command, now_ms: u64) -> Applied {
        let mut state = self.state.borrow_mut();
        let before = state.journal_next_sequence();
        let outcome = state.apply(command, now_ms);
        self.give_back_memory(&state);
        if state.read_ahead_is_due() {
            self.read_ahead_wake.notify();
        }
        if let Some(deadline_ms) = state.next_deadline_ms() {
            if deadline_ms < self.armed_deadline_ms.get() {
                self.wake.notify();
            }
        }
        let durable_at = match (&self.log, state.journal_next_sequence()) {
            (Some(log), Some(next)) if next > 0 => {
                if Some(next) > before {
                    if log.durability() == Durability::Fsync {
                        self.hold.borrow_mut().arrived(Instant::now());
                    }
                    self.log_wake.notify();
                }
                // Wait for the last record emitted so far, not only this command's: a read
                // must not show a change that a crash could still take back.
                let last = next - 1;
                (log.durable_sequence() < Some(last)).then_some(last)
            }
            _ => None,
        };
        Applied {
            outcome,
            durable_at,
        }
    }

    /// Gives the allocator's free memory back to the system once the shard has freed
    /// `MEMORY_GIVE_BACK_BYTES_MIN` of messages since the last time, so the process's resident
    /// memory follows a drained or cleared backlog down. Asked after every command and every
    /// timer step (each frees a bounded number of messages), so each call releases about that
    /// much and its time on the shard's thread stays bounded: once a second, one call released
    /// a whole cleared queue (720 MB, 56 ms; found by the break-it review). The chunks the log
    /// reads for texts count as freed too (the read cache lets each go): texts copied out of
    /// them land in the space earlier chunks freed, which then stayed resident (20,000 texts of
    /// 6 bytes, each read in a chunk of its own: 42 MiB against 20 MiB before the cache).
    fn give_back_memory(&self, state: &ShardState) {
        let chunk_bytes = self.log.as_ref().map_or(0, Log::read_chunk_bytes);
        let freed_bytes = state.freed_message_bytes() + chunk_bytes;
        if freed_bytes - self.given_back_at.get() >= MEMORY_GIVE_BACK_BYTES_MIN {
            os::give_back_free_memory();
            self.given_back_at.set(freed_bytes);
        }
    }

    /// With `--text-memory`, drops a step of the newest durable texts held in memory beyond it
    /// (`ShardState::evict`, to files the log keeps), and gives the memory back; asked after
    /// every flush and snapshot step. Answers whether more may be due (a whole step taken, and
    /// memory still beyond it): `run_evictions` goes on.
    fn evict_texts(&self) -> bool {
        let (Some(log), Some(text_bytes_max)) = (&self.log, self.text_bytes_max) else {
            return false;
        };
        let mut state = self.state.borrow_mut();
        let (_, whole_step) = state.evict_beyond(text_bytes_max, log.durable_sequence());
        self.give_back_memory(&state);
        whole_step && state.text_memory_bytes() > state.text_budget(text_bytes_max)
    }

    /// Records the state has emitted and the log has not taken yet, and their bytes.
    fn journal_pending(&self) -> (u64, usize) {
        self.state.borrow().journal_pending().unwrap_or_default()
    }

    /// Ends the process after a log error: what is on disk is no longer what the shard holds.
    fn storage_failed(&self, what: &str, error: std::io::Error) -> ! {
        eprintln!(
            "azq: shard {}: {what} failed ({error}); stopping, so that nothing unwritten is \
             acknowledged (the next start recovers what was written)",
            self.index
        );
        std::process::exit(2);
    }
}

/// Group commit: writes (and syncs) whatever the state has emitted, batch after batch, while the
/// shard keeps applying commands; with `--durability fsync` each flush may first be held for
/// the clients the last one acknowledged (`storage::hold`). Not with `write`: a flush there is
/// a write without a sync, too short for a hold to pay (measured: 10% fewer Puts with one).
async fn run_log<B: Backend>(engine: Rc<Engine<B>>) {
    let log = engine.log.as_ref().expect("a durable shard has a log");
    let holds = log.durability() == Durability::Fsync;
    loop {
        engine.log_wake.woken().await;
        loop {
            if holds {
                hold_flush::<B>(&engine).await;
            }
            let written_before = log.stats().records;
            match log.flush(&engine.state).await {
                Ok(true) => {
                    if holds {
                        let acknowledged = log.stats().records - written_before;
                        let (pending, _) = engine.journal_pending();
                        let now = Instant::now();
                        engine.hold.borrow_mut().flushed(acknowledged, pending, now);
                    }
                    if engine.evict_texts() {
                        engine.evict_wake.notify();
                    }
                    engine.watch_disk();
                    if engine.snapshot_wanted(false) {
                        engine.snapshot_wake.notify();
                    }
                }
                Ok(false) => break,
                Err(error) => engine.storage_failed("writing the log", error),
            }
        }
    }
}

/// Waits while the hold policy holds the next flush: until a new record arrives (`log_wake`) or
/// the hold's deadline passes, then asks again. A timer is kept while records arrive, re-armed
/// only when the deadline moves earlier (the first record back shortens it; later ones extend
/// it, and the timer's firing early then just asks again); a precise one, since holds are
/// shorter than tokio's tick.
async fn hold_flush<B: Backend>(engine: &Engine<B>) {
    let mut timer: Option<(Instant, Pin<Box<_>>)> = None;
    loop {
        let (pending, pending_bytes) = engine.journal_pending();
        let now = Instant::now();
        let urgent = engine.draining.get();
        let decision = engine
            .hold
            .borrow_mut()
            .decide(pending, pending_bytes, now, urgent);
        let Decision::Hold(deadline) = decision else {
            return;
        };
        if timer.as_ref().is_none_or(|(armed, _)| deadline < *armed) {
            timer = Some((deadline, Box::pin(B::sleep_precise(deadline - now))));
        }
        let (_, sleep) = timer.as_mut().expect("armed above");
        let fired = futures_lite::future::or(
            async {
                sleep.as_mut().await;
                true
            },
            async {
                engine.log_wake.woken().await;
                false
            },
        )
        .await;
        if fired {
            timer = None;
        }
    }
}

/// Writes a snapshot when the log asks for one, a step at a time with a pause between steps so
/// requests are served in between.
async fn run_snapshots<B: Backend>(engine: Rc<Engine<B>>) {
    let log = engine.log.as_ref().expect("a durable shard has a log");
    loop {
        engine.snapshot_wake.woken().await;
        let mut job = match log.start_snapshot(&engine.state).await {
            Ok(job) => job,
            Err(error) => engine.storage_failed("starting a snapshot", error),
        };
        loop {
            let stepped = job.step(log, &engine.state).await;
            // A snapshot's clean-up makes the texts it recorded evictable.
            engine.evict_wake.notify();
            match stepped {
                Ok(true) => {
                    // Segments went: refusals for the share stop at once if they can, and
                    // the file system is measured again for the free-space rule.
                    engine.watch_disk();
                    if let Some(gauge) = &engine.gauge {
                        gauge.refresh();
                    }
                    break;
                }
                Ok(false) => B::sleep(Duration::from_micros(TIMER_STEP_PAUSE_US)).await,
                Err(error) => engine.storage_failed("writing a snapshot", error),
            }
        }
    }
}

/// With `--text-memory`: drops texts beyond it a step at a time (`Engine::evict_texts`), with a
/// pause between steps so requests are served, while steps leave more (a snapshot in place
/// makes every text it recorded evictable at once).
async fn run_evictions<B: Backend>(engine: Rc<Engine<B>>) {
    loop {
        engine.evict_wake.woken().await;
        loop {
            B::sleep(Duration::from_micros(TIMER_STEP_PAUSE_US)).await;
            if !engine.evict_texts() {
                break;
            }
        }
    }
}

/// With `--text-memory`: reads texts ahead of Gets, so that a queue drained at a steady pace
/// finds its next texts in memory instead of waiting for them. Takes the queues due
/// (`ShardState::next_read_ahead`, passing over those a request reads for) and reads for each
/// in a task of its own, at most `TEXT_READS_AHEAD_MAX` at a time.
async fn run_reads_ahead<B: Backend>(engine: Rc<Engine<B>>) {
    loop {
        engine.read_ahead_wake.woken().await;
        while engine.reads_ahead.get() < TEXT_READS_AHEAD_MAX {
            let wait = {
                let reading = engine.reading.borrow();
                engine
                    .state
                    .borrow_mut()
                    .next_read_ahead(engine.now_ms(), |queue| reading.contains(&queue))
            };
            let Some(wait) = wait else {
                break;
            };
            // Marked before the task runs, so that the next one taken passes it over.
            engine.reading.borrow_mut().push(wait.queue);
            engine.reads_ahead.set(engine.reads_ahead.get() + 1);
            let engine = engine.clone();
            B::spawn(async move {
                engine.read_ahead_of_gets(wait).await;
                // One more may start (the end of its read woke the task).
                engine.reads_ahead.set(engine.reads_ahead.get() - 1);
            });
        }
    }
}

/// Reads the file system's free space every `DISK_SAMPLE_INTERVAL_MS` as the gauge's thread
/// measures it (space others free, or take, changes nothing the log sees) and tells the state;
/// and asks whether a snapshot is due. The log's flushes ask too, but only a write flushes and
/// none asks while a snapshot runs: a drain by expiry (which writes nothing), or one that ended
/// while a snapshot was written, would keep the dead snapshot on an idle shard for good.
async fn run_disk_watch<B: Backend>(engine: Rc<Engine<B>>) {
    loop {
        B::sleep(Duration::from_millis(DISK_SAMPLE_INTERVAL_MS)).await;
        engine.watch_disk();
        if engine.snapshot_wanted(true) {
            engine.snapshot_wake.notify();
        }
    }
}

/// `--durability write`: syncs what was written, every `WRITE_MODE_SYNC_INTERVAL_MS`.
async fn run_background_sync<B: Backend>(engine: Rc<Engine<B>>) {
    let log = engine.log.as_ref().expect("a durable shard has a log");
    loop {
        B::sleep(Duration::from_millis(WRITE_MODE_SYNC_INTERVAL_MS)).await;
        if let Err(error) = log.sync_in_background().await {
            engine.storage_failed("syncing the log", error);
        }
    }
}

async fn run_timer<B: Backend>(engine: Rc<Engine<B>>) {
    loop {
        let now_ms = engine.clock.now_ms();
        let deadline_ms = engine.state.borrow().next_deadline_ms().unwrap_or(u64::MAX);
        if deadline_ms <= now_ms {
            engine.armed_deadline_ms.set(now_ms);
            {
                let mut state = engine.state.borrow_mut();
                let held_ahead = state.texts_held_ahead();
                state.advance(now_ms, TIMER_ENTRIES_PER_STEP_MAX);
                engine.give_back_memory(&state);
                if state.texts_held_ahead() < held_ahead {
                    // Texts read ahead and let go may leave memory; no flush may come to ask.
                    engine.evict_wake.notify();
                }
            }
            // Let requests run between bounded steps. Not `yield_now`: a task that is ready
            // again at once keeps glommio in its run queue, which polls its rings for I/O only
            // when the queue is empty or its 100 ms preempt timer fires, so a long backlog (a
            // cleared queue's graveyard: measured, docs/BENCHMARKS.md; expiries due at once)
            // held every request for up to 100 ms. A short sleep empties the run queue, so
            // connections are served in between (on either backend).
            B::sleep(Duration::from_micros(TIMER_STEP_PAUSE_US)).await;
            continue;
        }
        engine.armed_deadline_ms.set(deadline_ms);
        let sleep_ms = (deadline_ms - now_ms).min(TIMER_IDLE_MS);
        futures_lite::future::or(
            B::sleep(Duration::from_millis(sleep_ms)),
            engine.wake.woken(),
        )
        .await;
    }
}

//! A worker's side of the accounting (`--scenario workers`): the messages of a Get to work on,
//! or an empty queue to back off from; the work on each message, then its Delete, or a crash
//! that abandons it. Pure, as the rest of the accounting: times are passed in.

use crate::connection::Response;
use crate::engine::lane::Step;
use crate::engine::lane_run::{InFlight, LaneRun};
use crate::engine::plan::RunPlan;
use crate::metrics::Measurements;
use crate::schedule::NANOSECONDS_PER_SECOND;
use crate::wire::listing::listed_messages;
use crate::workers::{crashes, WorkerPlan};

/// A worker's Get answer: messages to work on, or an empty queue (or an error) to back off from.
/// `take_answer` has counted the answer's messages, as it does a plain Get's; `wall_clock_us`
/// reads the wall clock for the messages' waits.
#[allow(clippy::too_many_arguments)]
pub(super) fn take_worker_get(
    plan: &RunPlan,
    worker: &WorkerPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: &InFlight,
    response: &Response<'_>,
    measured: bool,
    wall_clock_us: &dyn Fn() -> u64,
) {
    // `take_answer` has just set the lane free at the answer's arrival.
    let received_ns = lane.ready_ns;
    if response.is_success() {
        if lane.lane.on_get(listed_messages(response.body)).is_err() {
            measurements.protocol_errors += 1;
        }
    } else {
        lane.lane.on_chain_end();
    }
    if let (true, Some(empty_sent_ns)) = (measured, lane.empty_get_sent_ns) {
        let gap_ns = flight.sent_ns.saturating_sub(empty_sent_ns);
        measurements.fleet.poll_gap_ns.add(signed(gap_ns));
    }
    let empty = lane.lane.held_messages().is_empty();
    lane.empty_get_sent_ns = empty.then_some(flight.sent_ns);
    if empty {
        lane.backoff_ns = worker.next_backoff_ns(lane.backoff_ns);
        lane.ready_ns = received_ns + lane.backoff_ns;
        return;
    }
    lane.backoff_ns = 0;
    // The lease started when the server answered, after the Get was sent.
    lane.lease_end_ns =
        flight.sent_ns + plan.settings.visibility_timeout_s * NANOSECONDS_PER_SECOND;
    // Every delivery of this run's puts, measured or not (the tally counts each copy once):
    // duplicates by retried puts are counted over the whole run, warm-up included.
    for held in lane.lane.held_messages() {
        if let Some(mark) = held
            .put_mark
            .filter(|mark| mark.nonce == plan.settings.put_mark_nonce)
        {
            measurements.deliveries.push(mark);
        }
    }
    // The service of the first message begins when the worker meant to send this Get.
    lane.service_from_ns = flight.operation_intended_ns;
    if measured {
        // The Get's intended send by the wall clock: now, less the time since then.
        let since_intended_ns = received_ns.saturating_sub(flight.operation_intended_ns);
        let intended_unix_ns = i128::from(wall_clock_us()) * 1000 - i128::from(since_intended_ns);
        for sent_us in lane
            .lane
            .held_messages()
            .iter()
            .filter_map(|held| held.sent_unix_us)
        {
            let wait_ns = intended_unix_ns - i128::from(sent_us) * 1000;
            measurements
                .fleet
                .wait_ns
                .add(i64::try_from(wait_ns).unwrap_or(i64::MAX));
        }
        let stats = &mut measurements.workers;
        for held in lane.lane.held_messages() {
            stats.received += 1;
            if held.dequeue_count > 1 {
                // Delivered before; the delivery before this one was abandoned by a crash, or
                // its lease ran out before its worker deleted the message.
                let previous = held.dequeue_count - 1;
                if crashes(held.message_id(), previous, plan.seed, worker.crash_ratio) {
                    stats.redelivered_after_crash += 1;
                } else {
                    stats.redelivered_after_lease_expiry += 1;
                }
            }
        }
    }
    start_work(plan, worker, measurements, lane, received_ns, measured);
}

/// Works on the worker's next held message from `from_ns`: the lane's next request (its
/// Delete) is due when the work is done. A message the worker crashes on is worked on, then
/// abandoned, and the work moves on to the next; after the last message the next Get is due.
pub(super) fn start_work(
    plan: &RunPlan,
    worker: &WorkerPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    mut from_ns: u64,
    measured: bool,
) {
    while let Step::Delete(index) = lane.lane.next_step() {
        let work_ns = worker.work_time.sample_ns(&mut lane.random);
        from_ns += work_ns;
        lane.work_drawn_ns = work_ns;
        let held = lane.lane.held(index);
        let crashed = crashes(
            held.message_id(),
            held.dequeue_count,
            plan.seed,
            worker.crash_ratio,
        );
        if measured {
            let stats = &mut measurements.workers;
            stats.processed += 1;
            stats.busy_ns += work_ns;
            stats.crashed += u64::from(crashed);
            measurements.fleet.work_drawn_ns.add(signed(work_ns));
        }
        if !crashed {
            break;
        }
        lane.lane.abandon();
    }
    lane.ready_ns = from_ns;
}

/// A duration in nanoseconds as a `Moments` sample (at most 292 years).
pub(super) fn signed(nanoseconds: u64) -> i64 {
    i64::try_from(nanoseconds).unwrap_or(i64::MAX)
}

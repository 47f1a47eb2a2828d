//! Answer accounting, without I/O or clocks: what an answer, a lost connection or an
//! unreachable server counts as, and how each moves its lane on (including retries and, in a
//! `workers` run, the work between a Get and each Delete, in `work.rs`). The connection driver
//! (`driver.rs`) calls these with the times it read; the tests (`accounting/tests.rs`) call them
//! with times chosen by hand.

use std::collections::VecDeque;

use crate::connection::Response;
use crate::engine::lane::Step;
use crate::engine::lane_run::{InFlight, LaneRun};
use crate::engine::plan::RunPlan;
use crate::engine::work::{signed, start_work, take_worker_get};
use crate::metrics::Measurements;
use crate::retry::is_retriable;
use crate::scenario::{Operation, Role};
use crate::schedule::Timing;
use crate::wire::listing::listed_messages;
use crate::wire::mark::parse_timestamp;

/// Counts every request due by `now_ns` as lost, as if sent on a broken connection, when no
/// connection can be made: this keeps the error ratio honest and a run against a dead server
/// finite. With `--retry`, each is retried like a request lost with its connection.
pub fn lose_due_requests(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lanes: &mut [LaneRun],
    now_ns: u64,
) {
    for (index, lane) in lanes.iter_mut().enumerate() {
        match lane.next_send_ns(plan) {
            Some(due_ns) if due_ns <= now_ns => {
                // A put lost before it was sent still uses up its token, as one sent would: its
                // retry is the same put, the lane's next put another.
                if matches!(lane.lane.next_step(), Step::Put | Step::Refill) {
                    lane.next_put_mark(plan);
                }
                let flight = lane.take_request(plan, index, due_ns, now_ns);
                fail_with_connection(plan, measurements, lane, &flight, now_ns);
            }
            _ => {}
        }
    }
}

/// Counts every request in flight as lost and frees its lane at `now_ns`: to try it again with
/// `--retry`, else to start a new chain.
pub fn lose_connection(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lanes: &mut [LaneRun],
    in_flight: &mut VecDeque<InFlight>,
    now_ns: u64,
) {
    for flight in in_flight.drain(..) {
        fail_with_connection(plan, measurements, &mut lanes[flight.lane], &flight, now_ns);
    }
}

/// `flight` was lost with its connection (or never had one).
fn fail_with_connection(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: &InFlight,
    now_ns: u64,
) {
    // Lost requests of the warm-up are not counted; those after the window are (the chain
    // started inside it).
    let measured = flight.chain_intended_ns >= plan.measure_start_ns();
    if let Some(policy) = plan
        .retry
        .filter(|policy| flight.attempt < policy.retries_max)
    {
        if measured {
            measurements
                .operation_mut(flight.step.operation())
                .record_retry(None);
        }
        lane.schedule_retry(&policy, flight, now_ns);
        return;
    }
    if measured {
        measurements.connection_errors += 1;
    }
    lane.busy = false;
    lane.ready_ns = now_ns;
    lane.lane.on_chain_end();
}

/// Records the answer to `flight`, received at run time `received_ns`, and moves its lane on.
/// `wall_clock_us` reads the wall clock (microseconds since the Unix epoch) for end-to-end
/// latency; it is called only when a measured answer carries a producer's timestamp.
pub fn take_answer(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: InFlight,
    received_ns: u64,
    response: &Response<'_>,
    wall_clock_us: &dyn Fn() -> u64,
) {
    let measured = flight.is_measured(plan);
    let operation = flight.step.operation();
    if let Some(policy) = plan
        .retry
        .filter(|policy| flight.attempt < policy.retries_max && is_retriable(response.status))
    {
        if measured {
            measurements
                .operation_mut(operation)
                .record_retry(Some(response.status));
        } else {
            measurements.warmup_requests += 1;
        }
        lane.schedule_retry(&policy, &flight, received_ns);
        return;
    }
    if measured && flight.step == Step::Refill {
        measurements.refills += 1;
    }
    if !measured {
        measurements.warmup_requests += 1;
    } else if response.is_success() {
        // The operation's latency runs from its first try, retries and their pauses included.
        let operation_timing = Timing {
            intended_ns: flight.operation_intended_ns,
            ready_ns: flight.ready_ns,
            sent_ns: flight.operation_sent_ns,
            received_ns,
        };
        // A closed loop has no schedule: its latency is the service time, from the actual send.
        let corrected_us = match lane.pacer {
            Some(_) => operation_timing.corrected_latency_us(),
            None => operation_timing.uncorrected_latency_us(),
        };
        measurements
            .operation_mut(operation)
            .record_success(corrected_us, operation_timing.uncorrected_latency_us());
        let try_timing = Timing {
            intended_ns: flight.intended_ns,
            ready_ns: flight.ready_ns,
            sent_ns: flight.sent_ns,
            received_ns,
        };
        measurements.record_send_lag(try_timing.send_lag_us());
    } else {
        measurements
            .operation_mut(operation)
            .record_error(response.status, response.error_code);
    }
    lane.busy = false;
    lane.ready_ns = received_ns;
    let worker = plan.workers.filter(|_| lane.lane.role == Role::Worker);
    match (flight.step, worker) {
        (Step::Get, Some(worker)) => {
            if measured && response.is_success() {
                count_received(measurements, response, None);
            }
            take_worker_get(
                plan,
                &worker,
                measurements,
                lane,
                &flight,
                response,
                measured,
                wall_clock_us,
            );
        }
        (Step::Delete(index), Some(worker)) => {
            if measured {
                let stats = &mut measurements.workers;
                if flight.sent_ns > lane.lease_end_ns {
                    stats.lease_expired_before_delete += 1;
                }
                if response.is_success() {
                    stats.deleted += 1;
                    if let Some(sent_us) = lane.lane.held(index).sent_unix_us {
                        measurements.record_end_to_end(wall_clock_us().saturating_sub(sent_us));
                    }
                    // Done: the work drawn and the Delete's lateness in going out.
                    let late_ns = flight.sent_ns.saturating_sub(flight.intended_ns);
                    let fleet = &mut measurements.fleet;
                    fleet.work_done_ns.add(signed(lane.work_drawn_ns + late_ns));
                    let service_ns = received_ns.saturating_sub(lane.service_from_ns);
                    fleet.service_ns.add(signed(service_ns));
                }
            }
            lane.service_from_ns = received_ns;
            lane.lane.on_delete(response.is_success());
            start_work(plan, &worker, measurements, lane, received_ns, measured);
        }
        (Step::Put, _) => {
            if plan.workers.is_some() {
                record_arrival(measurements, lane, &flight, measured);
            }
            lane.lane.on_chain_end();
        }
        (Step::Peek, _) => {
            if measured && response.is_success() {
                let messages = listed_messages(response.body).count() as u64;
                measurements.operation_mut(operation).messages += messages;
            }
            lane.lane.on_chain_end();
        }
        (Step::Get, None) if response.is_success() => {
            if measured {
                count_received(measurements, response, Some(wall_clock_us));
            }
            if lane.lane.on_get(listed_messages(response.body)).is_err() {
                measurements.protocol_errors += 1;
            }
        }
        (Step::Get, None) => lane.lane.on_chain_end(),
        (Step::Update(_), _) => {
            let receipt = if response.is_success() {
                if response.pop_receipt.is_none() {
                    measurements.protocol_errors += 1;
                }
                response.pop_receipt
            } else {
                None
            };
            if lane.lane.on_update(receipt).is_err() {
                measurements.protocol_errors += 1;
            }
        }
        (Step::Delete(_), None) => lane.lane.on_delete(response.is_success()),
        (Step::Refill, _) => lane.lane.on_refill(),
    }
}

/// Records a producer's put for the arrivals' gaps (as drawn: intended starts; as sent).
fn record_arrival(
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: &InFlight,
    measured: bool,
) {
    let put_ns = (flight.operation_intended_ns, flight.operation_sent_ns);
    if let (true, Some((intended_ns, sent_ns))) = (measured, lane.last_put_ns) {
        let fleet = &mut measurements.fleet;
        let drawn_ns = put_ns.0.saturating_sub(intended_ns);
        fleet.arrival_gap_drawn_ns.add(signed(drawn_ns));
        fleet
            .arrival_gap_sent_ns
            .add(signed(put_ns.1.saturating_sub(sent_ns)));
    }
    lane.last_put_ns = Some(put_ns);
}

/// Counts the messages of a successful, measured Get, and with `wall_clock_us` the end-to-end
/// latency of those a producer stamped.
fn count_received(
    measurements: &mut Measurements,
    response: &Response<'_>,
    wall_clock_us: Option<&dyn Fn() -> u64>,
) {
    let mut now_us = None;
    let mut messages = 0;
    for message in listed_messages(response.body) {
        messages += 1;
        let (Some(clock), Some(sent_us)) = (wall_clock_us, parse_timestamp(message.message_text))
        else {
            continue;
        };
        let now_us = *now_us.get_or_insert_with(clock);
        measurements.record_end_to_end(now_us.saturating_sub(sent_us));
    }
    let stats = measurements.operation_mut(Operation::Get);
    stats.messages += messages;
    if messages == 0 {
        stats.empty_gets += 1;
    }
}

#[cfg(test)]
mod tests;

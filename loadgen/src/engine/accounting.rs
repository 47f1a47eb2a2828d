//! Answer accounting, without I/O or clocks: which lane may send when, what an answer, a lost
//! connection or an unreachable server counts as, and how each moves its lane on. The connection
//! driver (`driver.rs`) calls these with the times it read; the tests below call them with
//! times chosen by hand.

use std::collections::VecDeque;

use crate::connection::Response;
use crate::metrics::Measurements;
use crate::scenario::{Lane, Role, Scenario, Step};
use crate::schedule::{LoadModel, Pacer, Timing};
use crate::wire::{listed_messages, parse_timestamp};

use super::RunPlan;

/// One lane and its pacing.
#[derive(Clone, Debug)]
pub struct LaneRun {
    pub lane: Lane,
    /// The open-loop schedule; `None` in a closed loop.
    pub pacer: Option<Pacer>,
    /// When the lane last became free.
    pub ready_ns: u64,
    /// Intended start of the lane's current chain (Get → Delete, Get → Update → Delete): every
    /// step of a chain is measured, or not, with the chain, so a run that ends between a Get and
    /// its Delete never counts the message received but not its deletion.
    pub chain_intended_ns: u64,
    pub busy: bool,
    /// Chains the lane may still start in the measured window (`--requests`).
    pub budget: Option<u64>,
    pub done: bool,
}

impl LaneRun {
    /// Lane `lane_index` of the run, with `role`.
    pub fn new(plan: &RunPlan, lane_index: usize, role: Role) -> LaneRun {
        let lanes = plan.lanes();
        // Queues are spread separately over producers and over the other lanes.
        let producers = plan.producers * plan.pipeline;
        let position = match (plan.scenario, role) {
            (Scenario::Mixed, Role::Producer) => lane_index,
            (Scenario::Mixed, _) => lane_index - producers,
            _ => lane_index,
        };
        let queue = position % plan.settings.queue_names.len();
        let pacer = match plan.load {
            LoadModel::Closed => None,
            LoadModel::Open {
                rate_per_s,
                arrival,
            } => Some(Pacer::new(
                rate_per_s, arrival, lanes, lane_index, 0, plan.seed,
            )),
        };
        let budget = plan.requests.map(|requests| {
            let lanes = lanes as u64;
            requests / lanes + u64::from((lane_index as u64) < requests % lanes)
        });
        LaneRun {
            lane: Lane::new(role, queue, plan.settings.batch as usize, plan.refill),
            pacer,
            ready_ns: 0,
            chain_intended_ns: 0,
            busy: false,
            budget,
            done: false,
        }
    }

    /// When this lane's next request may go out, or `None` when it has finished. Marks the
    /// lane done when its next chain would start after the end or beyond its budget.
    pub fn next_send_ns(&mut self, plan: &RunPlan) -> Option<u64> {
        if self.done || self.busy {
            return None;
        }
        if !self.lane.is_between_chains() {
            return Some(self.ready_ns);
        }
        let intended = match &self.pacer {
            Some(pacer) => pacer.intended_ns(),
            None => self.ready_ns,
        };
        let out_of_budget = self.budget == Some(0) && intended >= plan.measure_start_ns();
        if intended >= plan.measure_end_ns() || out_of_budget {
            self.done = true;
            return None;
        }
        Some(intended)
    }

    /// Uses up the chain start intended at `intended_ns`: the schedule moves on, and a start in
    /// the measured window counts against the budget.
    pub fn start_chain(&mut self, intended_ns: u64, plan: &RunPlan) {
        self.chain_intended_ns = intended_ns;
        if let Some(pacer) = self.pacer.as_mut() {
            pacer.advance();
        }
        if intended_ns >= plan.measure_start_ns() {
            if let Some(budget) = self.budget.as_mut() {
                *budget = budget.saturating_sub(1);
            }
        }
    }
}

/// A request on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Index of the lane on its connection.
    pub lane: usize,
    pub step: Step,
    pub intended_ns: u64,
    /// Intended start of the chain this step belongs to; decides whether it is measured.
    pub chain_intended_ns: u64,
    pub ready_ns: u64,
    pub sent_ns: u64,
}

/// Counts every request due by `now_ns` as lost, as if sent on a broken connection, when no
/// connection can be made: this keeps the error ratio honest and a run against a dead server
/// finite.
pub fn lose_due_requests(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lanes: &mut [LaneRun],
    now_ns: u64,
) {
    for lane in lanes.iter_mut() {
        match lane.next_send_ns(plan) {
            Some(due_ns) if due_ns <= now_ns => {
                if due_ns >= plan.measure_start_ns() {
                    measurements.connection_errors += 1;
                }
                lane.start_chain(due_ns, plan);
                lane.ready_ns = now_ns;
            }
            _ => {}
        }
    }
}

/// Counts every request in flight as lost and frees its lane to start a new chain at `now_ns`.
pub fn lose_connection(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lanes: &mut [LaneRun],
    in_flight: &mut VecDeque<InFlight>,
    now_ns: u64,
) {
    for flight in in_flight.drain(..) {
        if flight.chain_intended_ns >= plan.measure_start_ns() {
            measurements.connection_errors += 1;
        }
        let lane = &mut lanes[flight.lane];
        lane.busy = false;
        lane.ready_ns = now_ns;
        lane.lane.on_chain_end();
    }
}

/// Records the answer to `flight`, received at run time `received_ns`, and moves its lane on.
/// `wall_clock_us` reads the wall clock (microseconds since the Unix epoch) for end-to-end
/// latency; it is called only for a measured Get that returned messages.
pub fn take_answer(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: InFlight,
    received_ns: u64,
    response: &Response<'_>,
    wall_clock_us: fn() -> u64,
) {
    let timing = Timing {
        intended_ns: flight.intended_ns,
        ready_ns: flight.ready_ns,
        sent_ns: flight.sent_ns,
        received_ns,
    };
    let measured = flight.chain_intended_ns >= plan.measure_start_ns()
        && flight.chain_intended_ns < plan.measure_end_ns();
    let operation = flight.step.operation();
    if !measured {
        measurements.warmup_requests += 1;
    } else if response.is_success() {
        // A closed loop has no schedule: its latency is the service time, from the actual send.
        let corrected_us = match lane.pacer {
            Some(_) => timing.corrected_latency_us(),
            None => timing.uncorrected_latency_us(),
        };
        measurements
            .operation_mut(operation)
            .record_success(corrected_us, timing.uncorrected_latency_us());
        measurements.record_send_lag(timing.send_lag_us());
    } else {
        measurements
            .operation_mut(operation)
            .record_error(response.status, response.error_code);
    }
    lane.busy = false;
    lane.ready_ns = received_ns;
    match flight.step {
        Step::Put => lane.lane.on_chain_end(),
        Step::Peek => {
            if measured && response.is_success() {
                let messages = listed_messages(response.body).count() as u64;
                measurements.operation_mut(operation).messages += messages;
            }
            lane.lane.on_chain_end();
        }
        Step::Get if response.is_success() => {
            if measured {
                let mut now_us = None;
                let mut messages = 0;
                for message in listed_messages(response.body) {
                    messages += 1;
                    if let Some(sent_us) = parse_timestamp(message.message_text) {
                        let now_us = *now_us.get_or_insert_with(wall_clock_us);
                        measurements.record_end_to_end(now_us.saturating_sub(sent_us));
                    }
                }
                let stats = measurements.operation_mut(operation);
                stats.messages += messages;
                if messages == 0 {
                    stats.empty_gets += 1;
                }
            }
            if lane.lane.on_get(listed_messages(response.body)).is_err() {
                measurements.protocol_errors += 1;
            }
        }
        Step::Get => lane.lane.on_chain_end(),
        Step::Update(_) => {
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
        Step::Delete(_) => lane.lane.on_delete(response.is_success()),
        Step::Refill => lane.lane.on_refill(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Operation;
    use crate::schedule::{Arrival, NANOSECONDS_PER_SECOND};

    const SECOND: u64 = NANOSECONDS_PER_SECOND;
    const MS: u64 = 1_000_000;
    /// The wall clock the tests read: 2026-11-22T00:00:00Z.
    const WALL_CLOCK_US: u64 = 1_795_305_600_000_000;

    fn wall_clock_us() -> u64 {
        WALL_CLOCK_US
    }

    fn plan(scenario: Scenario, load: LoadModel) -> RunPlan {
        crate::engine::tests::plan(scenario, load)
    }

    fn open_loop() -> LoadModel {
        LoadModel::Open {
            rate_per_s: 1000.0,
            arrival: Arrival::Constant,
        }
    }

    fn answer(status: u16, body: &[u8]) -> Response<'_> {
        Response {
            status,
            error_code: None,
            pop_receipt: None,
            approximate_messages_count: None,
            body,
            close: false,
        }
    }

    /// A request of `lane` sent as the lane's schedule says: intended at `intended_ns`, the lane
    /// free since `ready_ns`, handed to the socket at `sent_ns`.
    fn flight(step: Step, intended_ns: u64, ready_ns: u64, sent_ns: u64) -> InFlight {
        InFlight {
            lane: 0,
            step,
            intended_ns,
            chain_intended_ns: intended_ns,
            ready_ns,
            sent_ns,
        }
    }

    /// Sends the lane's next step the way the driver does, returning the flight.
    fn send(plan: &RunPlan, lane: &mut LaneRun, now_ns: u64) -> InFlight {
        let due_ns = lane.next_send_ns(plan).expect("the lane has a request");
        assert!(due_ns <= now_ns, "not due yet");
        let step = lane.lane.next_step();
        if step.starts_chain() {
            lane.start_chain(due_ns, plan);
        }
        lane.busy = true;
        InFlight {
            lane: 0,
            step,
            intended_ns: due_ns,
            chain_intended_ns: lane.chain_intended_ns,
            ready_ns: lane.ready_ns,
            sent_ns: now_ns,
        }
    }

    #[test]
    fn an_open_loop_records_latency_from_the_intended_time_beside_the_actual_one() {
        let plan = plan(Scenario::Put, open_loop());
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Producer);
        // Intended at 1.5 s, the lane free 0.2 ms later, sent 0.5 ms after the intended time and
        // answered 1.5 ms after it (latencies below 2,048 us are exact in the histograms).
        let intended = SECOND + 500 * MS;
        let flight = flight(Step::Put, intended, intended + 200_000, intended + 500_000);
        let received = intended + 1_500_000;
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            flight,
            received,
            &answer(201, b""),
            wall_clock_us,
        );
        let put = measurements.operation(Operation::Put);
        assert_eq!((put.count, put.errors), (1, 0));
        assert_eq!(put.latency_us.max(), 1_500);
        assert_eq!(put.latency_uncorrected_us.max(), 1_000);
        assert_eq!(measurements.send_lag_us.max(), 300);
        assert!(!lane.busy);
        assert_eq!(lane.ready_ns, received);
    }

    #[test]
    fn a_closed_loop_records_the_service_time_as_both_latencies() {
        let plan = plan(Scenario::Put, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Producer);
        let flight = flight(Step::Put, SECOND, SECOND, SECOND + MS / 2);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            flight,
            SECOND + 2 * MS,
            &answer(201, b""),
            wall_clock_us,
        );
        let put = measurements.operation(Operation::Put);
        assert_eq!(put.latency_us.max(), 1_500);
        assert_eq!(put.latency_uncorrected_us.max(), 1_500);
    }

    #[test]
    fn warm_up_answers_count_for_the_progress_line_only() {
        let plan = plan(Scenario::Put, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Producer);
        let flight = flight(Step::Put, 10 * MS, 10 * MS, 10 * MS);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            flight,
            SECOND + 20 * MS,
            &answer(503, b""),
            wall_clock_us,
        );
        assert_eq!(measurements.warmup_requests, 1);
        assert_eq!(measurements.requests(), 0);
        assert_eq!(measurements.errors(), 0);
    }

    #[test]
    fn errors_are_counted_by_status_and_code_and_end_the_chain() {
        let plan = plan(Scenario::GetDelete, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Consumer);
        let mut busy = answer(503, b"");
        busy.error_code = Some(b"ServerBusy");
        let flight = flight(Step::Get, SECOND, SECOND, SECOND);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            flight,
            SECOND + MS,
            &busy,
            wall_clock_us,
        );
        let get = measurements.operation(Operation::Get);
        assert_eq!((get.count, get.errors), (1, 1));
        assert_eq!(get.errors_by_status, vec![(503, 1)]);
        assert_eq!(get.errors_by_code, vec![("ServerBusy".to_string(), 1)]);
        assert!(get.latency_us.is_empty());
        assert_eq!(lane.lane.next_step(), Step::Get);
    }

    /// A Get answered with two messages: both counted, the end-to-end latency of the one a
    /// producer stamped recorded from the wall clock, and the Deletes that follow are measured
    /// with the chain even after the measured window has closed.
    #[test]
    fn a_get_feeds_messages_end_to_end_latency_and_its_deletes() {
        let plan = plan(Scenario::GetDelete, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Consumer);
        lane.ready_ns = 3 * SECOND - MS;
        let get = send(&plan, &mut lane, 3 * SECOND - MS);
        let body = b"<QueueMessagesList>\
            <QueueMessage><MessageId>a</MessageId><PopReceipt>ra</PopReceipt>\
            <MessageText>1795305599999000</MessageText></QueueMessage>\
            <QueueMessage><MessageId>b</MessageId><PopReceipt>rb</PopReceipt>\
            <MessageText>written by someone else</MessageText></QueueMessage>\
            </QueueMessagesList>";
        // The plan's batch is 1; ask for two.
        lane.lane = Lane::new(Role::Consumer, 0, 2, false);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            get,
            3 * SECOND + MS,
            &answer(200, body),
            wall_clock_us,
        );
        let gets = measurements.operation(Operation::Get);
        assert_eq!((gets.count, gets.messages, gets.empty_gets), (1, 2, 0));
        assert_eq!(measurements.end_to_end_us.len(), 1);
        assert_eq!(measurements.end_to_end_us.max(), 1_000);

        // The window closed at 3 s; the Deletes of a chain started before it still count.
        for id in [b"a", b"b"] {
            let now = lane.ready_ns;
            let delete = send(&plan, &mut lane, now);
            assert_eq!(delete.chain_intended_ns, 3 * SECOND - MS);
            let Step::Delete(index) = delete.step else {
                panic!("{:?}", delete.step);
            };
            assert_eq!(lane.lane.held(index).message_id(), id);
            take_answer(
                &plan,
                &mut measurements,
                &mut lane,
                delete,
                delete.sent_ns + MS,
                &answer(204, b""),
                wall_clock_us,
            );
        }
        assert_eq!(measurements.operation(Operation::Delete).count, 2);
        // The next Get would start after the end: the lane is done.
        assert_eq!(lane.next_send_ns(&plan), None);
        assert!(lane.done);
    }

    #[test]
    fn empty_gets_and_peeks_are_counted() {
        let plan = plan(Scenario::GetDelete, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Consumer);
        let empty = answer(200, b"<QueueMessagesList />");
        let get = flight(Step::Get, SECOND, SECOND, SECOND);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            get,
            SECOND + MS,
            &empty,
            wall_clock_us,
        );
        assert_eq!(measurements.operation(Operation::Get).empty_gets, 1);
        assert!(measurements.end_to_end_us.is_empty());

        let mut peeker = LaneRun::new(&plan, 0, Role::Peeker);
        let body = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId>\
            <MessageText>x</MessageText></QueueMessage></QueueMessagesList>";
        let peek = flight(Step::Peek, SECOND, SECOND, SECOND);
        take_answer(
            &plan,
            &mut measurements,
            &mut peeker,
            peek,
            SECOND + MS,
            &answer(200, body),
            wall_clock_us,
        );
        assert_eq!(measurements.operation(Operation::Peek).messages, 1);
        assert_eq!(peeker.lane.next_step(), Step::Peek);
    }

    #[test]
    fn an_update_without_a_new_receipt_is_a_protocol_error() {
        let plan = plan(Scenario::Update, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 0, Role::Updater);
        let body = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId>\
            <PopReceipt>r</PopReceipt><MessageText>x</MessageText></QueueMessage>\
            </QueueMessagesList>";
        let get = send(&plan, &mut lane, SECOND);
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            get,
            SECOND + MS,
            &answer(200, body),
            wall_clock_us,
        );
        let update = send(&plan, &mut lane, SECOND + MS);
        assert_eq!(update.step, Step::Update(0));
        take_answer(
            &plan,
            &mut measurements,
            &mut lane,
            update,
            SECOND + 2 * MS,
            &answer(204, b""),
            wall_clock_us,
        );
        assert_eq!(measurements.protocol_errors, 1);
        // Without a receipt the Delete is skipped.
        assert_eq!(lane.lane.next_step(), Step::Get);
    }

    #[test]
    fn a_lost_connection_counts_its_measured_requests_and_frees_their_lanes() {
        let plan = plan(Scenario::Put, LoadModel::Closed);
        let mut measurements = Measurements::default();
        let mut lanes = vec![
            LaneRun::new(&plan, 0, Role::Producer),
            LaneRun::new(&plan, 1, Role::Producer),
        ];
        let mut in_flight: VecDeque<InFlight> = [
            // One request of the warm-up and one of the measured window.
            flight(Step::Put, MS, MS, MS),
            InFlight {
                lane: 1,
                ..flight(Step::Put, SECOND, SECOND, SECOND)
            },
        ]
        .into();
        lanes[0].busy = true;
        lanes[1].busy = true;
        lose_connection(
            &plan,
            &mut measurements,
            &mut lanes,
            &mut in_flight,
            SECOND + MS,
        );
        assert_eq!(measurements.connection_errors, 1);
        assert!(in_flight.is_empty());
        for lane in &lanes {
            assert!(!lane.busy);
            assert_eq!(lane.ready_ns, SECOND + MS);
            assert!(lane.lane.is_between_chains());
        }
    }

    /// Against a server that cannot be reached, every request the schedule wanted sent counts
    /// as lost, so the run still ends on time with an honest error ratio.
    #[test]
    fn requests_due_without_a_connection_are_lost_and_the_schedule_moves_on() {
        let plan = plan(Scenario::Put, open_loop());
        let mut measurements = Measurements::default();
        let lanes_total = plan.lanes();
        let mut lanes: Vec<LaneRun> = (0..lanes_total)
            .map(|index| LaneRun::new(&plan, index, Role::Producer))
            .collect();
        // 1,000/s over two lanes: each lane's start is due every 2 ms, lane 1 1 ms after lane 0.
        let mut now = 0;
        while now <= 3 * SECOND + 10 * MS {
            lose_due_requests(&plan, &mut measurements, &mut lanes, now);
            now += MS / 2;
        }
        // The measured window [1 s, 3 s) holds 2,000 intended starts.
        assert_eq!(measurements.connection_errors, 2_000);
        assert!(lanes
            .iter_mut()
            .all(|lane| lane.next_send_ns(&plan).is_none()));
    }

    #[test]
    fn a_request_budget_is_split_over_the_lanes_and_ends_them() {
        let mut plan = plan(Scenario::Put, LoadModel::Closed);
        plan.connections = 4;
        plan.duration_ns = None;
        plan.requests = Some(10);
        plan.warmup_ns = 0;
        let budgets: Vec<Option<u64>> = (0..4)
            .map(|index| LaneRun::new(&plan, index, Role::Producer).budget)
            .collect();
        assert_eq!(budgets, vec![Some(3), Some(3), Some(2), Some(2)]);

        let mut measurements = Measurements::default();
        let mut lane = LaneRun::new(&plan, 3, Role::Producer);
        let mut now = 0;
        while lane.next_send_ns(&plan).is_some() {
            let put = send(&plan, &mut lane, now);
            now += MS;
            take_answer(
                &plan,
                &mut measurements,
                &mut lane,
                put,
                now,
                &answer(201, b""),
                wall_clock_us,
            );
        }
        assert_eq!(measurements.operation(Operation::Put).count, 2);
        assert!(lane.done);
    }
}

//! The accounting's tests: answers, lost requests, retries and workers' deliveries fed in with
//! times chosen by hand, against a plan with known lanes.

use super::*;
use crate::engine::lane::Lane;
use crate::retry::RetryPolicy;
use crate::scenario::Scenario;
use crate::schedule::{Arrival, LoadModel, Pacer, NANOSECONDS_PER_SECOND};
use crate::workers::WorkerPlan;

const SECOND: u64 = NANOSECONDS_PER_SECOND;
const MS: u64 = 1_000_000;
/// The wall clock the tests read: 2026-11-22T00:00:00Z.
const WALL_CLOCK_US: u64 = 1_795_305_600_000_000;

fn wall_clock_us() -> u64 {
    WALL_CLOCK_US
}

/// `take_answer` with the tests' wall clock.
fn answer_with(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    flight: InFlight,
    received_ns: u64,
    response: &Response<'_>,
) {
    take_answer(
        plan,
        measurements,
        lane,
        flight,
        received_ns,
        response,
        &wall_clock_us,
    );
}

fn plan(scenario: Scenario, load: LoadModel) -> RunPlan {
    crate::engine::plan::tests::plan(scenario, load)
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
        attempt: 0,
        operation_intended_ns: intended_ns,
        operation_sent_ns: sent_ns,
    }
}

/// Sends the lane's next step the way the driver does, returning the flight.
fn send(plan: &RunPlan, lane: &mut LaneRun, now_ns: u64) -> InFlight {
    let due_ns = lane.next_send_ns(plan).expect("the lane has a request");
    assert!(due_ns <= now_ns, "not due yet");
    lane.take_request(plan, 0, due_ns, now_ns)
}

/// Sends the lane's next put at `now_ns` and answers it 201 `delay_ns` later; returns then.
fn put_answered_after(
    plan: &RunPlan,
    measurements: &mut Measurements,
    lane: &mut LaneRun,
    now_ns: u64,
    delay_ns: u64,
) -> u64 {
    let put = send(plan, lane, now_ns);
    let received_ns = now_ns + delay_ns;
    answer_with(
        plan,
        measurements,
        lane,
        put,
        received_ns,
        &answer(201, b""),
    );
    received_ns
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        flight,
        received,
        &answer(201, b""),
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        flight,
        SECOND + 2 * MS,
        &answer(201, b""),
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        flight,
        SECOND + 20 * MS,
        &answer(503, b""),
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        flight,
        SECOND + MS,
        &busy,
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        3 * SECOND + MS,
        &answer(200, body),
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
        answer_with(
            &plan,
            &mut measurements,
            &mut lane,
            delete,
            delete.sent_ns + MS,
            &answer(204, b""),
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        SECOND + MS,
        &empty,
    );
    assert_eq!(measurements.operation(Operation::Get).empty_gets, 1);
    assert!(measurements.end_to_end_us.is_empty());

    let mut peeker = LaneRun::new(&plan, 0, Role::Peeker);
    let body = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId>\
        <MessageText>x</MessageText></QueueMessage></QueueMessagesList>";
    let peek = flight(Step::Peek, SECOND, SECOND, SECOND);
    answer_with(
        &plan,
        &mut measurements,
        &mut peeker,
        peek,
        SECOND + MS,
        &answer(200, body),
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
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        SECOND + MS,
        &answer(200, body),
    );
    let update = send(&plan, &mut lane, SECOND + MS);
    assert_eq!(update.step, Step::Update(0));
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        update,
        SECOND + 2 * MS,
        &answer(204, b""),
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

/// A lane slower than its schedule sends late, as long as `--grace` lasts past the window; then
/// it ends, and what it scheduled in the window and never sent is counted: every slot of the
/// window is either answered or unsent.
#[test]
fn a_lane_behind_its_schedule_stops_when_the_grace_runs_out_and_counts_what_it_never_sent() {
    // 1,000/s over two lanes: lane 0's starts are due every 2 ms from 0; the window is
    // [1 s, 3 s), the grace 1 s, so the lane may send until 4 s.
    let plan = plan(Scenario::Put, open_loop());
    assert_eq!(plan.send_end_ns(), 4 * SECOND);
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Producer);
    // Each put is answered 3 ms after it is sent: the lane falls behind by 1 ms a put.
    let mut now = 0;
    let mut last_sent = 0;
    loop {
        lane.drop_unsent(&plan, now, &mut measurements);
        let Some(due) = lane.next_send_ns(&plan) else {
            break;
        };
        now = now.max(due);
        last_sent = now;
        now = put_answered_after(&plan, &mut measurements, &mut lane, now, 3 * MS);
    }
    // It sent until the grace ran out, and not after.
    assert!((4 * SECOND - 3 * MS..4 * SECOND).contains(&last_sent));
    let puts = measurements.operation(Operation::Put);
    // By 4 s it had sent 1,334 starts, intended up to 2.666 s: 834 of them in the window.
    assert_eq!((puts.count, puts.unsent), (834, 166));
    assert_eq!(puts.count + puts.unsent, 1_000);
    // Once only.
    lane.drop_unsent(&plan, now, &mut measurements);
    assert_eq!(measurements.operation(Operation::Put).unsent, 166);
}

/// A refill is counted as a put and, apart, as a refill, so that the achieved rate can leave
/// it out; those of a chain started in the warm-up are neither.
#[test]
fn a_measured_refill_counts_as_a_put_and_a_refill() {
    let mut plan = plan(Scenario::GetDelete, open_loop());
    plan.refill = true;
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Consumer);
    // A chain in the warm-up, then one in the window: Get, Delete, Refill each.
    for intended in [SECOND / 2, SECOND + SECOND / 2] {
        let mut chain = flight(Step::Get, intended, intended, intended);
        for (step, status, body) in [
            (Step::Get, 200, TWO_MESSAGES),
            (Step::Delete(0), 204, &b""[..]),
            (Step::Refill, 201, &b""[..]),
        ] {
            chain.step = step;
            answer_with(
                &plan,
                &mut measurements,
                &mut lane,
                chain,
                intended + MS,
                &answer(status, body),
            );
        }
        assert_eq!(lane.lane.next_step(), Step::Get);
    }
    assert_eq!(measurements.refills, 1);
    assert_eq!(measurements.operation(Operation::Put).count, 1);
    assert_eq!(measurements.warmup_requests, 3);
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
        now = put_answered_after(&plan, &mut measurements, &mut lane, now, MS);
    }
    assert_eq!(measurements.operation(Operation::Put).count, 2);
    assert!(lane.done);
}

fn with_retries(mut plan: RunPlan) -> RunPlan {
    plan.retry = Some(RetryPolicy {
        retries_max: 2,
        base_delay_ns: 10 * MS,
    });
    plan
}

fn answer_with_code<'a>(status: u16, code: &'a [u8]) -> Response<'a> {
    Response {
        error_code: Some(code),
        ..answer(status, b"")
    }
}

/// Put marks: a new token per put, the same token with the retry's number for its retry,
/// and a put lost before it could be sent (no connection) still uses up its token.
#[test]
fn each_put_has_its_own_token_and_retries_keep_it() {
    let plan = with_retries(plan(Scenario::Put, open_loop()));
    let mut measurements = Measurements::default();
    let mut lanes = vec![LaneRun::new(&plan, 0, Role::Producer)];
    lanes[0].pacer = Some(Pacer::new(1000.0, Arrival::Constant, 1, 0, SECOND, 1));
    // Lane 0: a token is the lane's put count. The first put, lost with no connection.
    lose_due_requests(&plan, &mut measurements, &mut lanes, SECOND);
    let lane = &mut lanes[0];
    assert!(lane.retry.is_some());
    // Its retry: the same put, attempt 1.
    assert!(lane
        .next_send_ns(&plan)
        .is_some_and(|due| due <= 2 * SECOND));
    let retry = lane.next_put_mark(&plan);
    assert_eq!((retry.token, retry.attempt), (1, 1));
    assert_eq!(retry.nonce, plan.settings.put_mark_nonce);
    let flight = send(&plan, lane, 2 * SECOND);
    answer_with(
        &plan,
        &mut measurements,
        lane,
        flight,
        2 * SECOND,
        &answer(201, b""),
    );
    // The next put is another one.
    let next = lane.next_put_mark(&plan);
    assert_eq!((next.token, next.attempt), (2, 0));
}

/// A Put answered 503 goes out again after the policy's delay; the operation is counted
/// once, with its latency from the first try, and the retry apart.
#[test]
fn a_retried_operation_counts_once_with_the_retry_apart() {
    let plan = with_retries(plan(Scenario::Put, open_loop()));
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Producer);
    lane.pacer = Some(Pacer::new(1000.0, Arrival::Constant, 1, 0, SECOND, 1));
    let first = send(&plan, &mut lane, SECOND);
    let busy = answer_with_code(503, b"ServerBusy");
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        first,
        SECOND + MS,
        &busy,
    );
    let put = measurements.operation(Operation::Put);
    assert_eq!((put.count, put.errors, put.retries), (0, 0, 1));
    assert_eq!(put.retries_by_status, vec![(503, 1)]);
    // The first retry waits between half and all of the 10 ms base.
    let due = lane.next_send_ns(&plan).unwrap();
    assert!((SECOND + 6 * MS..=SECOND + 11 * MS).contains(&due), "{due}");
    let retry = send(&plan, &mut lane, due);
    assert_eq!(retry.attempt, 1);
    assert_eq!(retry.step, Step::Put);
    assert_eq!(retry.operation_intended_ns, SECOND);
    assert_eq!(retry.operation_sent_ns, SECOND);
    // The retry did not use up a scheduled start.
    assert_eq!(lane.pacer.as_ref().unwrap().intended_ns(), SECOND + MS);
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        retry,
        due + 500_000,
        &answer(201, b""),
    );
    let put = measurements.operation(Operation::Put);
    assert_eq!((put.count, put.errors, put.retries), (1, 0, 1));
    let expected_us = (due + 500_000 - SECOND).div_ceil(1000);
    assert!(put.latency_us.equivalent(put.latency_us.max(), expected_us));
    assert_eq!(measurements.requests(), 1);
}

#[test]
fn retries_run_out_into_an_error_and_other_errors_are_not_retried() {
    let plan = with_retries(plan(Scenario::Put, LoadModel::Closed));
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Producer);
    lane.ready_ns = SECOND;
    let mut now = SECOND;
    for _ in 0..3 {
        let due = lane.next_send_ns(&plan).unwrap();
        now = now.max(due);
        let flight = send(&plan, &mut lane, now);
        now += MS;
        answer_with(
            &plan,
            &mut measurements,
            &mut lane,
            flight,
            now,
            &answer(500, b""),
        );
    }
    let put = measurements.operation(Operation::Put);
    assert_eq!((put.count, put.errors, put.retries), (1, 1, 2));
    assert!(lane.retry.is_none());

    let flight = send(&plan, &mut lane, now);
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        flight,
        now + MS,
        &answer_with_code(404, b"QueueNotFound"),
    );
    let put = measurements.operation(Operation::Put);
    assert_eq!((put.count, put.errors, put.retries), (2, 2, 2));
}

#[test]
fn lost_requests_are_retried_and_then_counted_as_lost() {
    let plan = with_retries(plan(Scenario::Put, LoadModel::Closed));
    let mut measurements = Measurements::default();
    let mut lanes = vec![LaneRun::new(&plan, 0, Role::Producer)];
    lanes[0].ready_ns = SECOND;
    let mut now = SECOND;
    for _ in 0..3 {
        let due = lanes[0].next_send_ns(&plan).unwrap();
        now = now.max(due);
        lose_due_requests(&plan, &mut measurements, &mut lanes, now);
        now += MS;
    }
    let put = measurements.operation(Operation::Put);
    assert_eq!((put.retries, put.retries_after_connection_errors), (2, 2));
    assert_eq!(measurements.connection_errors, 1);
    assert!(lanes[0].retry.is_none());
    assert!(lanes[0].lane.is_between_chains());
}

/// A Delete whose connection cannot be made ends its chain; it used to stay due and count
/// a connection error at every reconnect attempt.
#[test]
fn a_lost_follow_up_ends_its_chain() {
    let plan = plan(Scenario::GetDelete, LoadModel::Closed);
    let mut measurements = Measurements::default();
    let mut lanes = vec![LaneRun::new(&plan, 0, Role::Consumer)];
    lanes[0].ready_ns = SECOND;
    let body = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId>\
        <PopReceipt>r</PopReceipt><MessageText>x</MessageText></QueueMessage>\
        </QueueMessagesList>";
    let get = send(&plan, &mut lanes[0], SECOND);
    answer_with(
        &plan,
        &mut measurements,
        &mut lanes[0],
        get,
        SECOND + MS,
        &answer(200, body),
    );
    assert_eq!(lanes[0].lane.next_step(), Step::Delete(0));
    lose_due_requests(&plan, &mut measurements, &mut lanes, SECOND + 2 * MS);
    assert_eq!(measurements.connection_errors, 1);
    assert_eq!(lanes[0].lane.next_step(), Step::Get);
}

/// A workers plan; its lanes are made free at 1 s, the start of the measured window.
fn workers_plan(work_ms: u64, crash_ratio: f64) -> RunPlan {
    let mut plan = plan(Scenario::Workers, LoadModel::Closed);
    plan.producers = 0;
    plan.settings.batch = 2;
    plan.settings.visibility_timeout_s = 1;
    plan.workers = Some(WorkerPlan {
        work_time: crate::workers::WorkTime::Fixed { ns: work_ms * MS },
        crash_ratio,
        poll_backoff_min_ns: 10 * MS,
        poll_backoff_max_ns: 40 * MS,
    });
    plan
}

const TWO_MESSAGES: &[u8] = b"<QueueMessagesList>\
    <QueueMessage><MessageId>a</MessageId><PopReceipt>ra</PopReceipt>\
    <DequeueCount>1</DequeueCount><MessageText>1795305599000000</MessageText></QueueMessage>\
    <QueueMessage><MessageId>b</MessageId><PopReceipt>rb</PopReceipt>\
    <DequeueCount>3</DequeueCount><MessageText>1795305599500000</MessageText></QueueMessage>\
    </QueueMessagesList>";

/// A worker works on each message before deleting it; the second message's Delete goes out
/// after its lease (1 s) ran out, and it had been delivered twice before.
#[test]
fn a_worker_works_then_deletes_each_message() {
    let plan = workers_plan(600, 0.0);
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Worker);
    lane.ready_ns = SECOND;
    assert!(lane.pacer.is_none(), "workers pace themselves");
    let get = send(&plan, &mut lane, SECOND);
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        SECOND + MS,
        &answer(200, TWO_MESSAGES),
    );
    let workers = measurements.workers;
    assert_eq!((workers.received, workers.processed), (2, 1));
    assert_eq!(workers.redelivered_after_lease_expiry, 1);
    assert_eq!(workers.redelivered_after_crash, 0);
    // The first Delete is due when the first work is done.
    assert_eq!(lane.next_send_ns(&plan), Some(SECOND + 601 * MS));
    let delete = send(&plan, &mut lane, SECOND + 601 * MS);
    assert_eq!(delete.step, Step::Delete(0));
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        delete,
        SECOND + 602 * MS,
        &answer(204, b""),
    );
    assert_eq!(measurements.workers.deleted, 1);
    // Put at 1795305599.0 s, deleted at 1795305600.0 s by the test's wall clock.
    let end_to_end = &measurements.end_to_end_us;
    assert!(end_to_end.equivalent(end_to_end.max(), 1_000_000));
    assert_eq!(measurements.workers.lease_expired_before_delete, 0);
    let delete = send(&plan, &mut lane, SECOND + 1202 * MS);
    assert_eq!(delete.step, Step::Delete(1));
    let mut mismatch = answer_with_code(400, b"PopReceiptMismatch");
    mismatch.body = b"";
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        delete,
        SECOND + 1203 * MS,
        &mismatch,
    );
    let workers = measurements.workers;
    assert_eq!((workers.processed, workers.deleted), (2, 1));
    assert_eq!(workers.lease_expired_before_delete, 1);
    assert_eq!(workers.busy_ns, 1200 * MS);
    // Both messages done: the next Get is due at once.
    assert_eq!(lane.lane.next_step(), Step::Get);
    assert_eq!(lane.next_send_ns(&plan), Some(SECOND + 1203 * MS));
}

#[test]
fn a_crashing_worker_abandons_its_messages_after_the_work() {
    let plan = workers_plan(100, 1.0);
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Worker);
    lane.ready_ns = SECOND;
    let get = send(&plan, &mut lane, SECOND);
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        SECOND + MS,
        &answer(200, TWO_MESSAGES),
    );
    let workers = measurements.workers;
    assert_eq!(
        (workers.received, workers.processed, workers.crashed),
        (2, 2, 2)
    );
    // Every delivery crashes, so the one before the third delivery of `b` did too.
    assert_eq!(workers.redelivered_after_crash, 1);
    assert_eq!(workers.deleted, 0);
    // No Delete: the next Get is due after both works.
    assert_eq!(lane.lane.next_step(), Step::Get);
    assert_eq!(lane.next_send_ns(&plan), Some(SECOND + 201 * MS));
}

#[test]
fn an_idle_worker_backs_off_exponentially_and_resets_on_messages() {
    let plan = workers_plan(0, 0.0);
    let mut measurements = Measurements::default();
    let mut lane = LaneRun::new(&plan, 0, Role::Worker);
    lane.ready_ns = SECOND;
    let mut now = SECOND;
    let mut pauses = Vec::new();
    for _ in 0..4 {
        let get = send(&plan, &mut lane, now);
        answer_with(
            &plan,
            &mut measurements,
            &mut lane,
            get,
            now,
            &answer(200, b"<QueueMessagesList />"),
        );
        let due = lane.next_send_ns(&plan).unwrap();
        pauses.push((due - now) / MS);
        now = due;
    }
    assert_eq!(pauses, vec![10, 20, 40, 40]);
    assert_eq!(measurements.operation(Operation::Get).empty_gets, 4);
    let get = send(&plan, &mut lane, now);
    answer_with(
        &plan,
        &mut measurements,
        &mut lane,
        get,
        now,
        &answer(200, TWO_MESSAGES),
    );
    assert_eq!(lane.backoff_ns, 0);
}

/// An autoscaled fleet with one replica ready: the first worker gets messages, the second holds
/// off and looks again after `REPLICA_CHECK_NS`; a worker scaled away in the middle of a chain
/// finishes it (its Delete goes out) before it holds off.
#[test]
fn workers_beyond_the_ready_replicas_hold_off() {
    use std::sync::atomic::Ordering;

    use crate::engine::lane_run::REPLICA_CHECK_NS;

    let mut plan = workers_plan(0, 0.0);
    plan.autoscale = Some(crate::autoscale::AutoscalePolicy::defaults(2));
    plan.replicas_ready.store(1, Ordering::Release);
    let mut first = LaneRun::new(&plan, 0, Role::Worker);
    let mut second = LaneRun::new(&plan, 1, Role::Worker);
    assert!(!first.holds_off(&plan, SECOND));
    assert!(second.holds_off(&plan, SECOND));
    assert_eq!(second.ready_ns, SECOND + REPLICA_CHECK_NS);
    // The first worker gets two messages, then is scaled away: it still deletes them.
    let mut measurements = Measurements::default();
    let get = send(&plan, &mut first, SECOND);
    answer_with(
        &plan,
        &mut measurements,
        &mut first,
        get,
        SECOND + MS,
        &answer(200, TWO_MESSAGES),
    );
    plan.replicas_ready.store(0, Ordering::Release);
    assert_eq!(first.lane.next_step(), Step::Delete(0));
    assert!(!first.holds_off(&plan, SECOND + 2 * MS));
    // Once both replicas are ready, the second worker takes messages too.
    plan.replicas_ready.store(2, Ordering::Release);
    assert!(!second.holds_off(&plan, SECOND + REPLICA_CHECK_NS));
    // Without autoscaling every worker is ready, whatever the count says.
    plan.autoscale = None;
    plan.replicas_ready.store(0, Ordering::Release);
    assert!(!second.holds_off(&plan, 2 * SECOND));
}

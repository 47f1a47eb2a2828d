//! The connection driver: one task per connection that sends each lane's due requests, reads
//! the answers in order, and hands every answer, lost connection or failed connect to the
//! accounting (`accounting.rs`). It owns the connection and the timing reads; what they count as
//! is decided elsewhere.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use azq::runtime::backend::Backend;
use azq::time::unix_us;
use futures_lite::future;

use crate::connection::Connection;
use crate::wire::mark::PutMark;
use crate::wire::request::{EncodeError, RequestEncoder, RequestKind};

use crate::engine::accounting::{lose_connection, lose_due_requests, take_answer};
use crate::engine::core::Core;
use crate::engine::lane::{Lane, Step};
use crate::engine::lane_run::{InFlight, LaneRun};

/// Pause before reconnecting after a connection fails, so a dead server is not hammered.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// Drives one connection and its lanes until every lane is done and every answer is in.
/// Returns the run time of its last answer.
pub(super) async fn drive_connection<B: Backend>(core: Rc<Core>, mut lanes: Vec<LaneRun>) -> u64 {
    let plan = core.plan.clone();
    let clock = core.clock;
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(lanes.len());
    let mut output: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Connect before run time zero, so that the first requests are not late by a handshake.
    let mut connection = Connection::<B>::connect(&plan.endpoint).await.ok();
    clock.wait_for_start::<B>().await;
    let mut last_answer_ns = 0;
    loop {
        if lanes.iter().all(|lane| lane.done) && in_flight.is_empty() {
            return last_answer_ns;
        }
        let Some(open) = connection.as_mut() else {
            match Connection::connect(&plan.endpoint).await {
                Ok(new) => connection = Some(new),
                Err(_) => {
                    // Behind its schedule with no server, a lane still stops at the grace's end
                    // instead of losing its window a request per reconnect.
                    let now_ns = clock.now_ns();
                    for lane in &mut lanes {
                        lane.drop_unsent(&plan, now_ns, &mut core.measurements.borrow_mut());
                    }
                    lose_due_requests(
                        &plan,
                        &mut core.measurements.borrow_mut(),
                        &mut lanes,
                        clock.now_ns(),
                    );
                    B::sleep(RECONNECT_DELAY).await;
                }
            }
            continue;
        };

        // Send every request that is due on a free lane.
        let now = clock.now_ns();
        let mut wake_ns = u64::MAX;
        let already_in_flight = in_flight.len();
        for (index, lane) in lanes.iter_mut().enumerate() {
            lane.drop_unsent(&plan, now, &mut core.measurements.borrow_mut());
            let Some(due_ns) = lane.next_send_ns(&plan) else {
                continue;
            };
            if due_ns > now {
                wake_ns = wake_ns.min(due_ns);
                continue;
            }
            if lane.holds_off(&plan, now) {
                wake_ns = wake_ns.min(lane.ready_ns);
                continue;
            }
            let step = lane.lane.next_step();
            let mark = matches!(step, Step::Put | Step::Refill).then(|| lane.next_put_mark(&plan));
            let encoded = encode_step(
                &mut core.encoder.borrow_mut(),
                &lane.lane,
                step,
                mark,
                unix_us(),
                &mut output,
            );
            if encoded.is_err() {
                // A request azq-loadgen cannot sign is a bug or a bad key: stop this lane.
                core.measurements.borrow_mut().protocol_errors += 1;
                lane.done = true;
                continue;
            }
            in_flight.push_back(lane.take_request(&plan, index, due_ns, now));
        }
        if !output.is_empty() {
            // Sent when handed to the socket, after encoding.
            let sent_ns = clock.now_ns();
            for flight in in_flight.iter_mut().skip(already_in_flight) {
                flight.sent_ns = sent_ns;
                if flight.attempt == 0 {
                    flight.operation_sent_ns = sent_ns;
                }
            }
            let sent = open.send(&output).await;
            output.clear();
            if sent.is_err() {
                let mut measurements = core.measurements.borrow_mut();
                let now_ns = clock.now_ns();
                lose_connection(&plan, &mut measurements, &mut lanes, &mut in_flight, now_ns);
                connection = None;
                continue;
            }
        }

        if in_flight.is_empty() {
            if wake_ns != u64::MAX {
                clock.sleep_until::<B>(wake_ns).await;
            }
            continue;
        }
        // Wait for the next answer, or for the next scheduled send if that comes first; a
        // parked core polls for the answer for a while before it sleeps (see `RunClock`).
        let answer = future::or(async { Some(open.read_response().await) }, async {
            clock.spin(wake_ns).await;
            if wake_ns == u64::MAX {
                future::pending::<()>().await;
            }
            clock.sleep_until::<B>(wake_ns).await;
            None
        })
        .await;
        let keep_open = match answer {
            None => true,
            Some(Ok(response)) => {
                let received_ns = clock.now_ns();
                last_answer_ns = received_ns;
                let Some(flight) = in_flight.pop_front() else {
                    unreachable!("an answer is read only while a request is in flight");
                };
                let close = response.close;
                take_answer(
                    &plan,
                    &mut core.measurements.borrow_mut(),
                    &mut lanes[flight.lane],
                    flight,
                    received_ns,
                    &response,
                    &unix_us,
                );
                !close
            }
            Some(Err(_)) => false,
        };
        if !keep_open {
            let mut measurements = core.measurements.borrow_mut();
            let now_ns = clock.now_ns();
            lose_connection(&plan, &mut measurements, &mut lanes, &mut in_flight, now_ns);
            connection = None;
        }
    }
}

/// Encodes `step` of `lane` into `output` with `encoder` at `now_us` (µs since the Unix epoch:
/// a Put's timestamp and the request's date); a Put carries `mark`.
pub(super) fn encode_step(
    encoder: &mut RequestEncoder,
    lane: &Lane,
    step: Step,
    mark: Option<PutMark>,
    now_us: u64,
    output: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let kind = match step {
        Step::Put | Step::Refill => RequestKind::Put {
            sent_unix_us: now_us,
            mark,
        },
        Step::Get => RequestKind::Get,
        Step::Peek => RequestKind::Peek,
        Step::Update(index) => RequestKind::Update {
            message_id: lane.held(index).message_id(),
            pop_receipt: lane.held(index).pop_receipt(),
        },
        Step::Delete(index) => RequestKind::Delete {
            message_id: lane.held(index).message_id(),
            pop_receipt: lane.held(index).pop_receipt(),
        },
    };
    encoder.encode(lane.queue, kind, now_us / 1000, output)
}

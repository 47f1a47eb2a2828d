//! `--simulate`: the run in virtual time. One thread plays every lane of the plan (producers'
//! schedules, workers' work and back-off, retries), the depth sampler and the autoscaler's
//! controller against `service_model`'s in-process azq, as a discrete-event simulation: each
//! event happens at its virtual instant, in order, and the clock jumps from one to the next.
//! The lanes are the real engine's (`LaneRun`, `take_answer`, `start_work`), so a simulated run
//! decides what a real one would; the main thread receives the same `CoreReport`s, one virtual
//! second at a time, and reports the run as any other. Deterministic: the same plan and seed
//! give the same events.
//!
//! A request's round trip at no load is drawn from the plan's latency model for its operation:
//! it reaches the service halfway through, waits there while the one shard is busy with the
//! requests before it (each takes the shard `1 / --sim-server-rate`), is applied, and its
//! answer takes the other half back. So a closed loop runs at the shard's rate at most, with
//! the latency of a saturated server, rather than as fast as the latency model allows. Every
//! lane is its own connection: with `--pipeline`, lanes of a connection do not wait for each
//! other's answers as they do on a real one. A run bounded by `--requests` rather than a
//! duration stops at `REQUESTS_RUN_NS_MAX` of virtual time, with a line on stderr, if its
//! lanes have not finished by then (workers an autoscaler never starts, for one).

use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use azq::random::{mix64, SplitMix64};

use crate::autoscale::QueueCount;
use crate::connection::Response;
use crate::engine::accounting::take_answer;
use crate::engine::controller::{Controller, ScaleReport, VISIBLE_PEEK_MESSAGES};
use crate::engine::cores::{lane_roles, CoreReport, Started, REPORTS_QUEUED_MAX};
use crate::engine::driver::encode_step;
use crate::engine::lane::Step;
use crate::engine::lane_run::{InFlight, LaneRun};
use crate::engine::plan::{RunPlan, Simulated, INTERVAL_NS};
use crate::engine::service_model::ServiceModel;
use crate::engine::setup::SetUp;
use crate::metrics::Measurements;
use crate::runtime::CoreHandle;
use crate::wire::listing::listed_messages;
use crate::wire::request::{RequestEncoder, RequestKind};

/// Virtual time between the end of one step and the start of the next (a real run's setup).
const STEP_GAP_NS: u64 = INTERVAL_NS;
/// The most virtual time a run bounded by `--requests` may take: a day.
const REQUESTS_RUN_NS_MAX: u64 = 86_400 * INTERVAL_NS;

/// Creates the run's queues in the simulated service and preloads them, as `setup` does on a
/// real one (in no time: virtual time starts with the run).
pub fn set_up(plan: &RunPlan, simulated: &Simulated) -> Result<SetUp, String> {
    let mut encoder = encoder(plan)?;
    let mut service = simulated.lock();
    let now_ms = simulated.epoch_us() / 1000;
    let mut request = Vec::with_capacity(4096);
    let mut answer = Vec::with_capacity(4096);
    let mut found = Vec::new();
    let mut depths = Vec::new();
    for queue in 0..plan.settings.queue_names.len() {
        request.clear();
        encoder
            .encode(queue, RequestKind::CreateQueue, now_ms, &mut request)
            .map_err(|error| error.0)?;
        service.serve(&request, now_ms, &mut answer);
        let status = Response::parse_whole(&answer).map_or(0, |response| response.status);
        if !(200..300).contains(&status) && status != 409 {
            return Err(format!(
                "simulated service: cannot create a queue ({status})"
            ));
        }
        let depth = read_depth(&mut encoder, &mut service, queue, now_ms)?;
        found.push(depth);
        for _ in depth..plan.preload {
            request.clear();
            let put = RequestKind::Put {
                sent_unix_us: now_ms * 1000,
                mark: None,
            };
            encoder
                .encode(queue, put, now_ms, &mut request)
                .map_err(|error| error.0)?;
            service.serve(&request, now_ms, &mut answer);
            // As a real preload: a refused put (Azure's targets, with `--sim-profile azure`)
            // stops the run rather than leaving the queue short.
            let status = Response::parse_whole(&answer).map_or(0, |response| response.status);
            if !(200..300).contains(&status) {
                return Err(format!("simulated service: preload failed ({status})"));
            }
        }
        depths.push(read_depth(&mut encoder, &mut service, queue, now_ms)?);
    }
    Ok(SetUp {
        found,
        depths,
        preload_elapsed: std::time::Duration::ZERO,
    })
}

/// Starts the simulation of `plan` on a thread of its own; its reports arrive as a real run's.
pub fn start(plan: Arc<RunPlan>) -> Result<Started, String> {
    let Some(simulated) = plan.simulation.clone() else {
        return Err("not a simulated run".to_string());
    };
    let (reports, receiver) = std::sync::mpsc::sync_channel(REPORTS_QUEUED_MAX);
    let epoch_us = simulated.epoch_us();
    let start_wall_clock = simulated.wall_clock(epoch_us);
    let executor = CoreHandle::spawn("azq-loadgen-simulation", move || {
        let mut service = simulated.lock();
        let last_answer_ns = Simulation::new(&plan, &mut service, epoch_us, reports)?.run();
        // The next step starts after this one, as a real one would.
        simulated.set_epoch_us(epoch_us + (last_answer_ns + STEP_GAP_NS) / 1000);
        Ok(())
    })?;
    Ok(Started {
        reports: receiver,
        executors: vec![executor],
        start_wall_clock,
    })
}

/// The encoder of the run's requests.
fn encoder(plan: &RunPlan) -> Result<RequestEncoder, String> {
    RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    )
    .map_err(|error| error.0)
}

/// Queue `queue`'s approximate message count, read at `now_ms` (no round trip).
fn read_depth(
    encoder: &mut RequestEncoder,
    service: &mut ServiceModel,
    queue: usize,
    now_ms: u64,
) -> Result<u64, String> {
    let mut request = Vec::with_capacity(1024);
    let mut answer = Vec::with_capacity(1024);
    encoder
        .encode(queue, RequestKind::GetMetadata, now_ms, &mut request)
        .map_err(|error| error.0)?;
    service.serve(&request, now_ms, &mut answer);
    Response::parse_whole(&answer)
        .ok()
        .and_then(|response| response.approximate_messages_count)
        .ok_or_else(|| "simulated service: no message count".to_string())
}

/// What happens at an instant.
#[derive(Debug)]
enum Event {
    /// Lane `lane` may send its next request.
    Wake { lane: usize },
    /// A request reaches the service; its answer takes `return_ns` back.
    Arrive {
        flight: InFlight,
        request: Vec<u8>,
        return_ns: u64,
    },
    /// An answer reaches its lane.
    Answer { flight: InFlight, answer: Vec<u8> },
    /// A virtual second ends: the interval's measurements go to the main thread.
    Interval,
    /// The depth sampler reads the queues.
    Depth,
    /// The autoscaler's controller acts.
    Control,
}

/// An event at its instant; events of one instant happen in the order they were scheduled, so
/// a run is repeatable. Ordered for `BinaryHeap`, a max-heap, soonest first.
#[derive(Debug)]
struct Scheduled {
    at_ns: u64,
    order: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.order) == (other.at_ns, other.order)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at_ns, other.order).cmp(&(self.at_ns, self.order))
    }
}

/// One simulated run.
struct Simulation<'a> {
    plan: &'a RunPlan,
    service: &'a mut ServiceModel,
    simulated: &'a Simulated,
    encoder: RequestEncoder,
    lanes: Vec<LaneRun>,
    events: BinaryHeap<Scheduled>,
    scheduled: u64,
    now_ns: u64,
    /// Run time zero in µs since the Unix epoch (the service's clock and the Put stamps).
    epoch_us: u64,
    /// Round-trip draws.
    random: SplitMix64,
    measurements: Measurements,
    interval_index: u64,
    in_flight: usize,
    last_answer_ns: u64,
    /// When the shard has served every request that reached it so far.
    shard_free_ns: u64,
    /// What one request takes of the shard (`1 / --sim-server-rate`).
    request_cost_ns: u64,
    controller: Option<Controller>,
    /// `count=visible`: the controller's Peek of `VISIBLE_PEEK_MESSAGES`, as KEDA's scaler's.
    peeker: Option<RequestEncoder>,
    reports: SyncSender<CoreReport>,
}

impl<'a> Simulation<'a> {
    fn new(
        plan: &'a RunPlan,
        service: &'a mut ServiceModel,
        epoch_us: u64,
        reports: SyncSender<CoreReport>,
    ) -> Result<Simulation<'a>, String> {
        let Some(simulated) = plan.simulation.as_deref() else {
            return Err("not a simulated run".to_string());
        };
        let roles = lane_roles(plan);
        let lanes = (0..plan.lanes())
            .map(|lane| LaneRun::new(plan, lane, roles[lane]))
            .collect();
        let controller = plan.autoscale.clone().map(Controller::new);
        let peeker = match &plan.autoscale {
            Some(policy) if policy.count == QueueCount::VisibleOnly => {
                let mut settings = plan.settings.clone();
                settings.batch = VISIBLE_PEEK_MESSAGES;
                let peeker =
                    RequestEncoder::new(plan.endpoint.clone(), plan.credentials.clone(), settings);
                Some(peeker.map_err(|error| error.0)?)
            }
            _ => None,
        };
        if let Some(controller) = &controller {
            plan.replicas_ready
                .store(controller.initial_replicas(), Ordering::Release);
        }
        Ok(Simulation {
            plan,
            service,
            simulated,
            encoder: encoder(plan)?,
            lanes,
            events: BinaryHeap::new(),
            scheduled: 0,
            now_ns: 0,
            epoch_us,
            random: SplitMix64::new(mix64(plan.seed ^ 0x5133_7a7e)),
            measurements: Measurements::default(),
            interval_index: 0,
            in_flight: 0,
            last_answer_ns: 0,
            shard_free_ns: 0,
            request_cost_ns: (1e9 / simulated.plan.server_rate_per_s).min(u64::MAX as f64) as u64,
            controller,
            peeker,
            reports,
        })
    }

    fn schedule(&mut self, at_ns: u64, event: Event) {
        self.scheduled += 1;
        self.events.push(Scheduled {
            at_ns,
            order: self.scheduled,
            event,
        });
    }

    fn now_ms(&self) -> u64 {
        (self.epoch_us + self.now_ns / 1000) / 1000
    }

    /// Runs to the end; returns the run time of the last answer.
    fn run(mut self) -> u64 {
        for lane in 0..self.lanes.len() {
            self.schedule(0, Event::Wake { lane });
        }
        self.schedule(INTERVAL_NS, Event::Interval);
        if self.plan.scenario.consumes() {
            self.schedule(0, Event::Depth);
        }
        if let Some(controller) = &self.controller {
            let (at_ns, _) = controller.next_ns();
            self.schedule(at_ns, Event::Control);
        }
        let end_ns = match self.plan.duration_ns {
            Some(_) => u64::MAX,
            None => self.plan.warmup_ns.saturating_add(REQUESTS_RUN_NS_MAX),
        };
        while !self.finished() {
            let Some(Scheduled { at_ns, event, .. }) = self.events.pop() else {
                break;
            };
            if at_ns > end_ns {
                eprintln!(
                    "azq-loadgen: the simulation stopped after {} s of virtual time with its \
                     --requests not all sent (workers that never start?)",
                    REQUESTS_RUN_NS_MAX / INTERVAL_NS
                );
                break;
            }
            self.now_ns = at_ns;
            let going = match event {
                Event::Wake { lane } => {
                    self.wake(lane);
                    true
                }
                Event::Arrive {
                    flight,
                    request,
                    return_ns,
                } => {
                    // The shard takes requests in their order of arrival.
                    let served_ns = self.now_ns.max(self.shard_free_ns);
                    self.shard_free_ns = served_ns.saturating_add(self.request_cost_ns);
                    let served_ms = (self.epoch_us + served_ns / 1000) / 1000;
                    let mut answer = Vec::with_capacity(1024);
                    self.service.serve(&request, served_ms, &mut answer);
                    self.schedule(served_ns + return_ns, Event::Answer { flight, answer });
                    true
                }
                Event::Answer { flight, answer } => {
                    self.answer(flight, &answer);
                    true
                }
                Event::Interval => self.report_interval(),
                Event::Depth => self.sample_depth(),
                Event::Control => self.control(),
            };
            // The main thread stopped listening: nobody wants the rest.
            if !going {
                break;
            }
        }
        let report = CoreReport::Finished {
            core: 0,
            index: self.interval_index,
            measurements: Box::new(std::mem::take(&mut self.measurements)),
            last_answer_ns: self.last_answer_ns,
            usage: None,
        };
        let _ = self.reports.send(report);
        self.last_answer_ns
    }

    /// Whether every lane is done and every answer is in.
    fn finished(&self) -> bool {
        self.in_flight == 0 && self.lanes.iter().all(|lane| lane.done)
    }

    /// Sends the lane's next request if it is due, else wakes it when it is.
    fn wake(&mut self, index: usize) {
        let now_ns = self.now_ns;
        let lane = &mut self.lanes[index];
        lane.drop_unsent(self.plan, now_ns, &mut self.measurements);
        let Some(due_ns) = lane.next_send_ns(self.plan) else {
            return;
        };
        if due_ns > now_ns {
            self.schedule(due_ns, Event::Wake { lane: index });
            return;
        }
        if lane.holds_off(self.plan, now_ns) {
            let ready_ns = lane.ready_ns;
            self.schedule(ready_ns, Event::Wake { lane: index });
            return;
        }
        let step = lane.lane.next_step();
        let mark = matches!(step, Step::Put | Step::Refill).then(|| lane.next_put_mark(self.plan));
        let mut request = Vec::with_capacity(1024);
        let now_us = self.epoch_us + now_ns / 1000;
        if encode_step(
            &mut self.encoder,
            &lane.lane,
            step,
            mark,
            now_us,
            &mut request,
        )
        .is_err()
        {
            // As the driver: a request the lane cannot sign stops the lane.
            self.measurements.protocol_errors += 1;
            lane.done = true;
            return;
        }
        let flight = lane.take_request(self.plan, index, due_ns, now_ns);
        let round_trip_ns = self.simulated.plan.latency[step.operation().index()]
            .sample_us(&mut self.random)
            * 1000;
        self.in_flight += 1;
        let way_in_ns = round_trip_ns / 2;
        self.schedule(
            now_ns + way_in_ns,
            Event::Arrive {
                flight,
                request,
                return_ns: round_trip_ns - way_in_ns,
            },
        );
    }

    /// Hands an answer to its lane's accounting, then lets the lane go on.
    fn answer(&mut self, flight: InFlight, answer: &[u8]) {
        self.in_flight -= 1;
        self.last_answer_ns = self.now_ns;
        let index = flight.lane;
        let wall_clock_us = self.epoch_us + self.now_ns / 1000;
        match Response::parse_whole(answer) {
            Ok(response) => take_answer(
                self.plan,
                &mut self.measurements,
                &mut self.lanes[index],
                flight,
                self.now_ns,
                &response,
                &|| wall_clock_us,
            ),
            // The service's answers are azq's own: one that does not parse is a bug, counted
            // as the driver counts a broken answer, and the lane stops.
            Err(_) => {
                self.measurements.protocol_errors += 1;
                self.lanes[index].done = true;
            }
        }
        self.schedule(self.now_ns, Event::Wake { lane: index });
    }

    /// Ships the interval's measurements; `false` when the main thread is gone.
    fn report_interval(&mut self) -> bool {
        let index = self.interval_index;
        self.interval_index += 1;
        let report = CoreReport::Interval {
            core: 0,
            index,
            measurements: Box::new(std::mem::take(&mut self.measurements)),
        };
        self.schedule((index + 2) * INTERVAL_NS, Event::Interval);
        self.reports.send(report).is_ok()
    }

    /// The summed depth of the run's queues, as the real sampler reads it once a second.
    fn sample_depth(&mut self) -> bool {
        let now_ms = self.now_ms();
        self.schedule(self.now_ns + INTERVAL_NS, Event::Depth);
        let mut messages = 0;
        for queue in 0..self.plan.settings.queue_names.len() {
            // As the real sampler: a failed read (a 503 of Azure's targets) is no sample.
            match read_depth(&mut self.encoder, self.service, queue, now_ms) {
                Ok(depth) => messages += depth,
                Err(_) => return true,
            }
        }
        let report = CoreReport::Depth {
            at_ns: self.now_ns,
            messages,
        };
        self.reports.send(report).is_ok()
    }

    /// The controller's evaluation or readiness report, and its next act.
    fn control(&mut self) -> bool {
        let Some(mut controller) = self.controller.take() else {
            return true;
        };
        let (at_ns, evaluation) = controller.next_ns();
        let read = evaluation.then(|| self.queue_length()).flatten();
        let scale: ScaleReport = controller.act(at_ns, evaluation, read);
        self.plan
            .replicas_ready
            .store(scale.ready, Ordering::Release);
        let (next_ns, _) = controller.next_ns();
        self.controller = Some(controller);
        self.schedule(next_ns, Event::Control);
        self.reports.send(CoreReport::Scale(scale)).is_ok()
    }

    /// The queue length as the policy counts it (`count=visible`: a Peek of 32 first, as
    /// KEDA's scaler does).
    fn queue_length(&mut self) -> Option<u64> {
        let now_ms = self.now_ms();
        if let Some(peeker) = self.peeker.as_mut() {
            let (mut request, mut answer) = (Vec::new(), Vec::new());
            peeker
                .encode(0, RequestKind::Peek, now_ms, &mut request)
                .ok()?;
            self.service.serve(&request, now_ms, &mut answer);
            let visible = listed_messages(Response::parse_whole(&answer).ok()?.body).count() as u64;
            if visible < u64::from(VISIBLE_PEEK_MESSAGES) {
                return Some(visible);
            }
        }
        read_depth(&mut self.encoder, self.service, 0, now_ms).ok()
    }
}

//! The thread-per-core engine: one executor pinned per `--cpus` entry, each driving its
//! share of the connections (connection `c` runs on core `c % cores`) and recording into its own
//! `Measurements`. Once a second every core ships its interval's measurements to the main thread
//! over a bounded channel and starts afresh; cores share nothing else.
//!
//! Before the measured run, a setup executor creates the queues and preloads them; during a
//! consuming run, core 0 also samples the queues' depth once a second with Get Metadata on a
//! connection of its own.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_lite::future;

use crate::connection::{Connection, ConnectionError, Response};
use crate::endpoint::{Credentials, Endpoint};
use crate::metrics::Measurements;
use crate::report::CoreUsage;
use crate::runtime::{self, CoreHandle, CoreOptions, ReportSender};
use crate::scenario::{roles, Lane, Role, Scenario, Step};
use crate::schedule::{LoadModel, Pacer, Timing, NANOSECONDS_PER_SECOND};
use crate::wire::{listed_messages, parse_timestamp, RequestEncoder, RequestKind, RequestSettings};

/// How often cores report and the progress line and time series advance.
pub const INTERVAL_NS: u64 = NANOSECONDS_PER_SECOND;
/// Pause before reconnecting after a connection fails, so a dead server is not hammered.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long an idle core keeps polling before it sleeps in the kernel, in an open loop. Its cores
/// are idle between scheduled sends, and waking a sleeping thread costs tens of microseconds at
/// the median and milliseconds at p99 on a busy machine, all of it added to every latency
/// measured: at 200 ops/s, polling cut the p99 send lag from 3.7 ms to 39 us. The price is a
/// busy CPU for the length of the run, taken from the server if they share one; a closed loop
/// never waits on a timer, so it sleeps instead and leaves shared CPUs to the server.
const SPIN_BEFORE_PARK: Duration = Duration::from_millis(10);
/// Time between starting the cores and run time zero.
const START_DELAY: Duration = Duration::from_millis(200);
/// Requests in flight on the setup connection while preloading.
const PRELOAD_WINDOW: usize = 64;
/// Messages one preload may put into one queue.
pub const PRELOAD_MESSAGES_MAX: u64 = 10_000_000;
/// Reports a core may have queued for the main thread before it waits (the main thread drains
/// them continuously, so this is never reached in practice; it only has to be bounded).
const REPORTS_QUEUED_MAX: usize = 1024;

/// Everything a run needs, fixed before it starts.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub endpoint: Endpoint,
    pub credentials: Credentials,
    pub settings: RequestSettings,
    pub scenario: Scenario,
    pub cpus: Vec<usize>,
    pub connections: usize,
    /// Lanes per connection (requests in flight on it).
    pub pipeline: usize,
    /// For `mixed`: connections that produce; the rest consume.
    pub producers: usize,
    pub load: LoadModel,
    pub warmup_ns: u64,
    /// Measured time; `None` when the run is bounded by `requests`.
    pub duration_ns: Option<u64>,
    /// Chains to start in the measured window, over all lanes.
    pub requests: Option<u64>,
    /// Fill each queue to this many messages before the run.
    pub preload: u64,
    /// Consumers put a new message for each one they delete.
    pub refill: bool,
    /// Seed of the Poisson schedules.
    pub seed: u64,
}

impl RunPlan {
    fn lanes(&self) -> usize {
        self.connections * self.pipeline
    }

    /// When measuring starts, in run time.
    pub fn measure_start_ns(&self) -> u64 {
        self.warmup_ns
    }

    /// When no more chains start, in run time.
    fn measure_end_ns(&self) -> u64 {
        match self.duration_ns {
            Some(duration) => self.warmup_ns + duration,
            None => u64::MAX,
        }
    }
}

/// What cores tell the main thread.
#[derive(Debug)]
pub enum CoreReport {
    /// Measurements of interval `index` (run time `[index, index + 1)` seconds) of `core`.
    Interval {
        core: usize,
        index: u64,
        measurements: Box<Measurements>,
    },
    /// The summed approximate message count of the run's queues at run time `at_ns`.
    Depth { at_ns: u64, messages: u64 },
    /// `core` has finished: the measurements of its last, partial interval `index`, and the run
    /// time of its last answer.
    Finished {
        core: usize,
        index: u64,
        measurements: Box<Measurements>,
        last_answer_ns: u64,
        /// How the core's thread spent the run, when the kernel tells.
        usage: Option<CoreUsage>,
    },
    /// `core` could not run at all.
    Failed { core: usize, reason: String },
}

/// Creates the queues and preloads them on an executor pinned to the first CPU. Returns the
/// messages each queue held afterwards.
pub fn set_up(plan: &RunPlan) -> Result<Vec<u64>, String> {
    let plan = plan.clone();
    let cpu = plan.cpus[0];
    let options = CoreOptions {
        cpu,
        name: "azq-loadgen-setup".to_string(),
        spin_before_park: None,
    };
    runtime::start_core(options, move || async move { set_up_queues(&plan).await })?
        .join()
        .map_err(|error| format!("setup failed: {error}"))?
}

async fn set_up_queues(plan: &RunPlan) -> Result<Vec<u64>, String> {
    let mut encoder = RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    )
    .map_err(|error| error.0)?;
    let address = plan.endpoint.address;
    let mut connection = Connection::connect(address)
        .await
        .map_err(|error| format!("cannot connect to {address}: {error}"))?;
    let queues = plan.settings.queue_names.len();
    let mut output = Vec::with_capacity(64 * 1024);
    for queue in 0..queues {
        encoder
            .encode(queue, RequestKind::CreateQueue, unix_ms(), &mut output)
            .map_err(|error| error.0)?;
    }
    connection.send(&output).await.map_err(describe)?;
    for queue in 0..queues {
        let response = connection.read_response().await.map_err(describe)?;
        // 201 created, 204 already there; 409 exists with other metadata, which is fine too.
        if !response.is_success() && response.status != 409 {
            return Err(format!(
                "cannot create queue {}: {}",
                plan.settings.queue_names[queue],
                describe_response(&response)
            ));
        }
    }
    let mut depths = queue_depths(&mut encoder, &mut connection).await?;
    for (queue, depth) in depths.iter_mut().enumerate() {
        let missing = plan.preload.saturating_sub(*depth);
        let mut sent = 0;
        let mut answered = 0;
        while answered < missing {
            output.clear();
            while sent < missing && sent - answered < PRELOAD_WINDOW as u64 {
                let now_ms = unix_ms();
                encoder
                    .encode(
                        queue,
                        RequestKind::Put {
                            sent_unix_us: now_ms * 1000,
                        },
                        now_ms,
                        &mut output,
                    )
                    .map_err(|error| error.0)?;
                sent += 1;
            }
            connection.send(&output).await.map_err(describe)?;
            while answered < sent {
                let response = connection.read_response().await.map_err(describe)?;
                if !response.is_success() {
                    return Err(format!("preload failed: {}", describe_response(&response)));
                }
                answered += 1;
            }
        }
        *depth += missing;
    }
    Ok(depths)
}

/// The approximate message count of every queue, pipelined on one connection.
async fn queue_depths(
    encoder: &mut RequestEncoder,
    connection: &mut Connection,
) -> Result<Vec<u64>, String> {
    let queues = encoder.settings().queue_names.len();
    let mut output = Vec::with_capacity(queues * 512);
    for queue in 0..queues {
        encoder
            .encode(queue, RequestKind::GetMetadata, unix_ms(), &mut output)
            .map_err(|error| error.0)?;
    }
    connection.send(&output).await.map_err(describe)?;
    let mut depths = Vec::with_capacity(queues);
    for _ in 0..queues {
        let response = connection.read_response().await.map_err(describe)?;
        match (response.is_success(), response.approximate_messages_count) {
            (true, Some(count)) => depths.push(count),
            _ => {
                return Err(format!(
                    "Get Queue Metadata: {}",
                    describe_response(&response)
                ))
            }
        }
    }
    Ok(depths)
}

fn describe(error: ConnectionError) -> String {
    error.to_string()
}

fn describe_response(response: &Response<'_>) -> String {
    let code = response
        .error_code
        .map(|code| String::from_utf8_lossy(code).into_owned())
        .unwrap_or_default();
    format!("HTTP {} {code}", response.status)
}

/// Milliseconds since the Unix epoch (the wall clock: request dates and message timestamps).
fn unix_ms() -> u64 {
    unix_us() / 1000
}

/// Microseconds since the Unix epoch.
fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// A started run.
pub struct Started {
    /// Where the cores' reports arrive.
    pub reports: Receiver<CoreReport>,
    /// Join these after the last `Finished` report.
    pub executors: Vec<CoreHandle<()>>,
    /// Run time zero.
    pub start: Instant,
}

/// Starts one executor per CPU.
pub fn start(plan: Arc<RunPlan>) -> Result<Started, String> {
    let (reports, receiver) = runtime::report_channel(REPORTS_QUEUED_MAX);
    // Give every executor time to start and connect before the schedule begins, so that no
    // core's first requests are late because its thread or connections were still being made.
    let start = Instant::now() + START_DELAY;
    let mut executors = Vec::with_capacity(plan.cpus.len());
    for (core, &cpu) in plan.cpus.iter().enumerate() {
        let plan = plan.clone();
        let reports = reports.clone();
        let options = CoreOptions {
            cpu,
            name: format!("azq-loadgen-{core}"),
            spin_before_park: matches!(plan.load, LoadModel::Open { .. })
                .then_some(SPIN_BEFORE_PARK),
        };
        let executor = runtime::start_core(options, move || async move {
            run_core(core, plan, start, reports).await
        })?;
        executors.push(executor);
    }
    Ok(Started {
        reports: receiver,
        executors,
        start,
    })
}

/// Run time: nanoseconds since the shared start instant (0 before it).
#[derive(Clone, Copy, Debug)]
struct RunClock {
    start: Instant,
}

impl RunClock {
    fn now_ns(self) -> u64 {
        Instant::now()
            .checked_duration_since(self.start)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64)
    }

    /// Waits for run time zero: the cores start their schedules together.
    async fn wait_for_start(self) {
        let wait = self.start.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            runtime::sleep(wait).await;
        }
    }

    async fn sleep_until(self, at_ns: u64) {
        let now = self.now_ns();
        if at_ns > now {
            runtime::sleep(Duration::from_nanos(at_ns - now)).await;
        }
    }
}

/// What the connections of one core share.
struct Core {
    plan: Arc<RunPlan>,
    clock: RunClock,
    encoder: RefCell<RequestEncoder>,
    measurements: RefCell<Measurements>,
    /// The interval `measurements` belongs to; advanced by the reporter task.
    interval_index: Cell<u64>,
}

async fn run_core(
    core_index: usize,
    plan: Arc<RunPlan>,
    start: Instant,
    reports: ReportSender<CoreReport>,
) {
    let encoder = match RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    ) {
        Ok(encoder) => encoder,
        Err(error) => {
            let _ = reports.send(CoreReport::Failed {
                core: core_index,
                reason: error.0,
            });
            return;
        }
    };
    let clock = RunClock { start };
    let core = Rc::new(Core {
        plan: plan.clone(),
        clock,
        encoder: RefCell::new(encoder),
        measurements: RefCell::new(Measurements::default()),
        interval_index: Cell::new(0),
    });
    let cores = plan.cpus.len();
    let lane_roles = lane_roles(&plan);
    clock.wait_for_start().await;
    let scheduler_at_start = read_scheduler_statistics();
    let mut tasks = Vec::new();
    for connection in (core_index..plan.connections).step_by(cores) {
        let lanes: Vec<LaneRun> = (0..plan.pipeline)
            .map(|slot| {
                let lane_index = connection * plan.pipeline + slot;
                LaneRun::new(&plan, lane_index, lane_roles[lane_index])
            })
            .collect();
        tasks.push(runtime::spawn(drive_connection(core.clone(), lanes)));
    }
    let reporter = runtime::spawn(report_intervals(core.clone(), core_index, reports.clone()));
    let sampler = (core_index == 0 && plan.scenario.consumes())
        .then(|| runtime::spawn(sample_depth(core.clone(), reports.clone())));

    let mut last_answer_ns = 0;
    for task in tasks {
        last_answer_ns = last_answer_ns.max(task.await);
    }
    // Dropping a task cancels it: both only sleep and report.
    drop(reporter);
    drop(sampler);
    let measurements = core.measurements.replace(Measurements::default());
    let usage = match (scheduler_at_start, read_scheduler_statistics()) {
        (Some(start), Some(end)) => Some(CoreUsage {
            cpu: plan.cpus[core_index],
            elapsed_ns: clock.now_ns(),
            running_ns: end.0.saturating_sub(start.0),
            waiting_ns: end.1.saturating_sub(start.1),
        }),
        _ => None,
    };
    let _ = reports.send(CoreReport::Finished {
        core: core_index,
        index: core.interval_index.get(),
        measurements: Box::new(measurements),
        last_answer_ns,
        usage,
    });
}

/// The calling thread's time on the CPU and time runnable but waiting for it, in nanoseconds,
/// from Linux's schedstat. Waiting time is the one sign of a client starved by other processes
/// on its CPU that no latency figure shows on its own.
fn read_scheduler_statistics() -> Option<(u64, u64)> {
    parse_scheduler_statistics(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// Parses `running_ns waiting_ns timeslices`.
fn parse_scheduler_statistics(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

/// Roles of all lanes: for `mixed`, the lanes of the first `producers` connections produce.
/// Queues are assigned separately among producers and among the others, so that every queue
/// has both when there are enough lanes.
fn lane_roles(plan: &RunPlan) -> Vec<Role> {
    roles(plan.scenario, plan.lanes(), plan.producers * plan.pipeline)
}

/// Ships the core's measurements once a second, until cancelled.
async fn report_intervals(core: Rc<Core>, core_index: usize, reports: ReportSender<CoreReport>) {
    core.clock.wait_for_start().await;
    loop {
        let index = core.interval_index.get();
        core.clock.sleep_until((index + 1) * INTERVAL_NS).await;
        let measurements = core.measurements.replace(Measurements::default());
        core.interval_index.set(index + 1);
        let report = CoreReport::Interval {
            core: core_index,
            index,
            measurements: Box::new(measurements),
        };
        if reports.send(report).is_err() {
            return;
        }
    }
}

/// Samples the total depth of the run's queues once a second, until cancelled. It has its own
/// encoder: the core's is shared by the connections and must not stay borrowed across an await.
async fn sample_depth(core: Rc<Core>, reports: ReportSender<CoreReport>) {
    let plan = &core.plan;
    let Ok(mut encoder) = RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    ) else {
        return;
    };
    let mut connection: Option<Connection> = None;
    let mut sample = 0;
    core.clock.wait_for_start().await;
    loop {
        core.clock.sleep_until(sample * INTERVAL_NS).await;
        sample += 1;
        if connection.is_none() {
            connection = Connection::connect(core.plan.endpoint.address).await.ok();
        }
        let Some(open) = connection.as_mut() else {
            continue;
        };
        let at_ns = core.clock.now_ns();
        match queue_depths(&mut encoder, open).await {
            Ok(depths) => {
                let _ = reports.send(CoreReport::Depth {
                    at_ns,
                    messages: depths.iter().sum(),
                });
            }
            Err(_) => connection = None,
        }
    }
}

/// One lane and its pacing.
struct LaneRun {
    lane: Lane,
    /// The open-loop schedule; `None` in a closed loop.
    pacer: Option<Pacer>,
    /// When the lane last became free.
    ready_ns: u64,
    /// Intended start of the lane's current chain (Get → Delete, Get → Update → Delete): every
    /// step of a chain is measured, or not, with the chain, so a run that ends between a Get and
    /// its Delete never counts the message received but not its deletion.
    chain_intended_ns: u64,
    busy: bool,
    /// Chains the lane may still start in the measured window (`--requests`).
    budget: Option<u64>,
    done: bool,
}

impl LaneRun {
    fn new(plan: &RunPlan, lane_index: usize, role: Role) -> LaneRun {
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
    fn next_send_ns(&mut self, plan: &RunPlan) -> Option<u64> {
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
    fn start_chain(&mut self, intended_ns: u64, plan: &RunPlan) {
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
#[derive(Clone, Copy, Debug)]
struct InFlight {
    lane: usize,
    step: Step,
    intended_ns: u64,
    /// Intended start of the chain this step belongs to; decides whether it is measured.
    chain_intended_ns: u64,
    ready_ns: u64,
    sent_ns: u64,
}

/// Drives one connection and its lanes until every lane is done and every answer is in.
/// Returns the run time of its last answer.
async fn drive_connection(core: Rc<Core>, mut lanes: Vec<LaneRun>) -> u64 {
    let plan = core.plan.clone();
    let clock = core.clock;
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(lanes.len());
    let mut output: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Connect before run time zero, so that the first requests are not late by a handshake.
    let mut connection = Connection::connect(plan.endpoint.address).await.ok();
    clock.wait_for_start().await;
    let mut last_answer_ns = 0;
    loop {
        if lanes.iter().all(|lane| lane.done) && in_flight.is_empty() {
            return last_answer_ns;
        }
        let Some(open) = connection.as_mut() else {
            match Connection::connect(plan.endpoint.address).await {
                Ok(new) => connection = Some(new),
                Err(_) => {
                    lose_due_requests(&core, &mut lanes);
                    runtime::sleep(RECONNECT_DELAY).await;
                }
            }
            continue;
        };

        // Send every request that is due on a free lane.
        let now = clock.now_ns();
        let mut wake_ns = u64::MAX;
        let already_in_flight = in_flight.len();
        for (index, lane) in lanes.iter_mut().enumerate() {
            let Some(due_ns) = lane.next_send_ns(&plan) else {
                continue;
            };
            if due_ns > now {
                wake_ns = wake_ns.min(due_ns);
                continue;
            }
            let step = lane.lane.next_step();
            let encoded = encode_step(&core, &lane.lane, step, &mut output);
            if encoded.is_err() {
                // A request azq-loadgen cannot sign is a bug or a bad key: stop this lane.
                core.measurements.borrow_mut().protocol_errors += 1;
                lane.done = true;
                continue;
            }
            if step.starts_chain() {
                lane.start_chain(due_ns, &plan);
            }
            lane.busy = true;
            in_flight.push_back(InFlight {
                lane: index,
                step,
                intended_ns: due_ns,
                chain_intended_ns: lane.chain_intended_ns,
                ready_ns: lane.ready_ns,
                sent_ns: now,
            });
        }
        if !output.is_empty() {
            // Sent when handed to the socket, after encoding.
            let sent_ns = clock.now_ns();
            for flight in in_flight.iter_mut().skip(already_in_flight) {
                flight.sent_ns = sent_ns;
            }
            let sent = open.send(&output).await;
            output.clear();
            if sent.is_err() {
                lose_connection(&core, &mut lanes, &mut in_flight);
                connection = None;
                continue;
            }
        }

        if in_flight.is_empty() {
            if wake_ns != u64::MAX {
                clock.sleep_until(wake_ns).await;
            }
            continue;
        }
        // Wait for the next answer, or for the next scheduled send if that comes first.
        let answer = if wake_ns == u64::MAX {
            Some(open.read_response().await)
        } else {
            future::or(async { Some(open.read_response().await) }, async {
                clock.sleep_until(wake_ns).await;
                None
            })
            .await
        };
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
                    &core,
                    &mut lanes[flight.lane],
                    flight,
                    received_ns,
                    &response,
                );
                !close
            }
            Some(Err(_)) => false,
        };
        if !keep_open {
            lose_connection(&core, &mut lanes, &mut in_flight);
            connection = None;
        }
    }
}

/// Counts every request due now as lost, as if sent on a broken connection, when no connection
/// can be made: this keeps the error ratio honest and a run against a dead server finite.
fn lose_due_requests(core: &Core, lanes: &mut [LaneRun]) {
    let plan = &core.plan;
    let now = core.clock.now_ns();
    let mut measurements = core.measurements.borrow_mut();
    for lane in lanes.iter_mut() {
        match lane.next_send_ns(plan) {
            Some(due_ns) if due_ns <= now => {
                if due_ns >= plan.measure_start_ns() {
                    measurements.connection_errors += 1;
                }
                lane.start_chain(due_ns, plan);
                lane.ready_ns = now;
            }
            _ => {}
        }
    }
}

/// Counts every request in flight as lost and frees its lane to start a new chain.
fn lose_connection(core: &Core, lanes: &mut [LaneRun], in_flight: &mut VecDeque<InFlight>) {
    let now = core.clock.now_ns();
    let mut measurements = core.measurements.borrow_mut();
    for flight in in_flight.drain(..) {
        if flight.chain_intended_ns >= core.plan.measure_start_ns() {
            measurements.connection_errors += 1;
        }
        let lane = &mut lanes[flight.lane];
        lane.busy = false;
        lane.ready_ns = now;
        lane.lane.on_chain_end();
    }
}

/// Encodes `step` of `lane` into `output`.
fn encode_step(
    core: &Core,
    lane: &Lane,
    step: Step,
    output: &mut Vec<u8>,
) -> Result<(), crate::wire::EncodeError> {
    let now_us = unix_us();
    let kind = match step {
        Step::Put | Step::Refill => RequestKind::Put {
            sent_unix_us: now_us,
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
    core.encoder
        .borrow_mut()
        .encode(lane.queue, kind, now_us / 1000, output)
}

/// Records an answer and moves its lane on.
fn take_answer(
    core: &Core,
    lane: &mut LaneRun,
    flight: InFlight,
    received_ns: u64,
    response: &Response<'_>,
) {
    let plan = &core.plan;
    let timing = Timing {
        intended_ns: flight.intended_ns,
        ready_ns: flight.ready_ns,
        sent_ns: flight.sent_ns,
        received_ns,
    };
    let measured = flight.chain_intended_ns >= plan.measure_start_ns()
        && flight.chain_intended_ns < plan.measure_end_ns();
    let mut measurements = core.measurements.borrow_mut();
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
                let now_us = unix_us();
                let mut messages = 0;
                for message in listed_messages(response.body) {
                    messages += 1;
                    if let Some(sent_us) = parse_timestamp(message.message_text) {
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

    #[test]
    fn scheduler_statistics() {
        assert_eq!(
            parse_scheduler_statistics("1200 3400 5\n"),
            Some((1200, 3400))
        );
        assert_eq!(parse_scheduler_statistics("1200"), None);
        assert_eq!(parse_scheduler_statistics("a b c"), None);
        // This thread's own line parses on Linux.
        assert!(read_scheduler_statistics().is_some());
    }
}

//! A lane's run: its open-loop schedule, its budget of chains (`--requests`), its retries and
//! put tokens, and the requests it has in flight. Without I/O or clocks: the driver asks when
//! the lane's next request is due and takes it; the accounting frees the lane again.

use azq::random::SplitMix64;

use crate::engine::lane::{Lane, Step};
use crate::engine::plan::RunPlan;
use crate::metrics::{Measurements, PUT_TOKEN_SEQUENCE_BITS};
use crate::retry::RetryPolicy;
use crate::scenario::{Role, Scenario};
use crate::schedule::{lane_random, LoadModel, Pacer};
use crate::wire::mark::PutMark;

/// How often a worker that an autoscaled fleet does not have ready looks whether it is: the
/// precision of its start after a scale-up (and the cost of its waiting, 40 wake-ups a second).
pub const REPLICA_CHECK_NS: u64 = 25_000_000;

/// A request that failed and goes out again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingRetry {
    /// Retries so far, this one included (1 for the first retry).
    pub attempt: u32,
    /// When it goes out.
    pub at_ns: u64,
    /// The first try's intended and actual send times: the operation's latency counts from them.
    pub operation_intended_ns: u64,
    pub operation_sent_ns: u64,
}

/// One lane and its pacing.
#[derive(Clone, Debug)]
pub struct LaneRun {
    pub lane: Lane,
    /// The open-loop schedule; `None` in a closed loop, and for workers, which pace themselves.
    pub pacer: Option<Pacer>,
    /// When the lane last became free (for a worker: when its work is done).
    pub ready_ns: u64,
    /// Intended start of the lane's current chain (Get → Delete, Get → Update → Delete): every
    /// step of a chain is measured, or not, with the chain, so a run that ends between a Get and
    /// its Delete never counts the message received but not its deletion.
    pub chain_intended_ns: u64,
    pub busy: bool,
    /// Chains the lane may still start in the measured window (`--requests`).
    pub budget: Option<u64>,
    pub done: bool,
    /// The failed request to send again, if any.
    pub retry: Option<PendingRetry>,
    /// Retry jitter and work times, seeded per lane.
    pub random: SplitMix64,
    /// A worker's current pause between Gets of an empty queue (0: it found messages last).
    pub backoff_ns: u64,
    /// When the lease of the messages a worker holds runs out, at the earliest (the Get's send
    /// time plus the visibility timeout).
    pub lease_end_ns: u64,
    /// For a worker: its index among the workers, which decides when an autoscaled fleet has it
    /// ready (see `RunPlan::worker_is_ready`).
    worker_index: Option<usize>,
    /// The lane's run-wide index in the high bits of its put tokens.
    put_token_lane: u64,
    /// Puts the lane has started (retries not counted): the low bits of its put tokens.
    puts_started: u64,
    /// A producer's last answered put: when it was intended and sent (the arrivals' gaps).
    pub last_put_ns: Option<(u64, u64)>,
    /// A worker's last Get, when it found the queue empty: when it was sent (the poll gaps).
    pub empty_get_sent_ns: Option<u64>,
    /// When a worker's service of its current message began (see `FleetStats::service_ns`).
    pub service_from_ns: u64,
    /// The work time a worker drew for its current message.
    pub work_drawn_ns: u64,
}

impl LaneRun {
    /// Lane `lane_index` of the run, with `role`.
    pub fn new(plan: &RunPlan, lane_index: usize, role: Role) -> LaneRun {
        let lanes = plan.lanes();
        // Queues are spread separately over producers and over the other lanes.
        let producers = plan.producer_lanes();
        let split = plan.scenario.has_producers_and_consumers();
        let (position, group) = match role {
            Role::Producer if split => (lane_index, producers),
            _ if split => (lane_index - producers, lanes - producers),
            _ => (lane_index, lanes),
        };
        let queues = plan.settings.queue_names.len();
        // More queues than lanes of the role: each lane takes every queue in turn, from its
        // own place among them, so that every queue is worked on as often. A worker keeps to
        // one queue, as a deployment's replicas do (one that polled the others in turn would
        // back off on each empty one, and the fleet's latency would grow with the queues).
        let rotates = queues > group && role != Role::Worker;
        let queue = if rotates {
            position * queues / group
        } else {
            position % queues
        };
        // Workers pace themselves; in a workers run the rate is the producers' alone.
        let (paced_lanes, paced_index) = match (plan.scenario, role) {
            (Scenario::Workers, Role::Producer) => (producers, lane_index),
            (Scenario::Workers, _) => (0, 0),
            _ => (lanes, lane_index),
        };
        let pacer = match plan.load {
            LoadModel::Open { arrival, .. } if paced_lanes > 0 && plan.shape.is_some() => plan
                .shape
                .clone()
                .map(|shape| Pacer::shaped(shape, arrival, paced_lanes, paced_index, plan.seed)),
            LoadModel::Open {
                rate_per_s,
                arrival,
            } if paced_lanes > 0 => Some(Pacer::new(
                rate_per_s,
                arrival,
                paced_lanes,
                paced_index,
                0,
                plan.seed,
            )),
            _ => None,
        };
        let budget = plan.requests.map(|requests| {
            let lanes = lanes as u64;
            requests / lanes + u64::from((lane_index as u64) < requests % lanes)
        });
        LaneRun {
            lane: match Lane::new(role, queue, plan.settings.batch as usize, plan.refill) {
                lane if rotates => lane.rotating(queues),
                lane => lane,
            },
            pacer,
            ready_ns: 0,
            chain_intended_ns: 0,
            busy: false,
            budget,
            done: false,
            retry: None,
            random: lane_random(plan.seed, lane_index),
            backoff_ns: 0,
            lease_end_ns: 0,
            worker_index: (role == Role::Worker).then(|| lane_index - producers),
            put_token_lane: (lane_index as u64) << PUT_TOKEN_SEQUENCE_BITS,
            puts_started: 0,
            last_put_ns: None,
            empty_get_sent_ns: None,
            service_from_ns: 0,
            work_drawn_ns: 0,
        }
    }

    /// The mark of the Put the lane tries next (sent, or lost before it could be): a new token
    /// for a new put, the same token and the retry's number for a retry.
    pub fn next_put_mark(&mut self, plan: &RunPlan) -> PutMark {
        let attempt = match self.retry {
            Some(retry) => u8::try_from(retry.attempt).unwrap_or(u8::MAX),
            None => {
                self.puts_started += 1;
                0
            }
        };
        PutMark {
            nonce: plan.settings.put_mark_nonce,
            token: self.put_token_lane | self.puts_started,
            attempt,
        }
    }

    /// When this lane's next request may go out, or `None` when it has finished. Marks the
    /// lane done when its next chain would start after the end or beyond its budget.
    pub fn next_send_ns(&mut self, plan: &RunPlan) -> Option<u64> {
        if self.done || self.busy {
            return None;
        }
        // A retry finishes what was started, even after the end.
        if let Some(retry) = &self.retry {
            return Some(retry.at_ns);
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

    /// Ends an open-loop lane still behind its schedule at `now_ns`, `--grace` past the
    /// measured window: the chains it scheduled in the window and has not started are never
    /// sent, and are counted unsent in `measurements` under the operation that starts them.
    /// Nothing happens before the grace has run out, nor to a lane in the middle of a chain or
    /// a retry (it finishes that first); a lane that is not behind just ends.
    pub fn drop_unsent(&mut self, plan: &RunPlan, now_ns: u64, measurements: &mut Measurements) {
        if self.done
            || self.busy
            || self.retry.is_some()
            || !self.lane.is_between_chains()
            || now_ns < plan.send_end_ns()
        {
            return;
        }
        let Some(pacer) = self.pacer.as_mut() else {
            return;
        };
        let mut unsent = 0;
        while pacer.intended_ns() < plan.measure_end_ns() {
            // Chains of the warm-up are not measured, so not counted either.
            if pacer.intended_ns() >= plan.measure_start_ns() {
                unsent += 1;
            }
            pacer.advance();
        }
        self.done = true;
        measurements
            .operation_mut(self.lane.next_step().operation())
            .unsent += unsent;
    }

    /// Whether the lane is a worker of an autoscaled fleet that is not ready at `now_ns` (not
    /// yet started, or scaled away) and would start a chain: it then looks again after
    /// `REPLICA_CHECK_NS`. A worker scaled away in the middle of a chain finishes it first, as
    /// a pod finishes its message in its termination grace period.
    pub fn holds_off(&mut self, plan: &RunPlan, now_ns: u64) -> bool {
        let Some(worker_index) = self.worker_index else {
            return false;
        };
        if !self.lane.is_between_chains() || self.retry.is_some() {
            return false;
        }
        if plan.worker_is_ready(worker_index) {
            return false;
        }
        self.ready_ns = now_ns + REPLICA_CHECK_NS;
        true
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

    /// Takes the lane's next request, due at `due_ns` (from `next_send_ns`) and sent at
    /// `now_ns`: the lane is busy until it is answered or lost. `lane_index` is the lane's
    /// position on its connection.
    pub fn take_request(
        &mut self,
        plan: &RunPlan,
        lane_index: usize,
        due_ns: u64,
        now_ns: u64,
    ) -> InFlight {
        let step = self.lane.next_step();
        let retry = self.retry.take();
        if step.starts_chain() && retry.is_none() {
            self.start_chain(due_ns, plan);
        }
        self.busy = true;
        InFlight {
            lane: lane_index,
            step,
            intended_ns: due_ns,
            chain_intended_ns: self.chain_intended_ns,
            ready_ns: self.ready_ns,
            sent_ns: now_ns,
            attempt: retry.map_or(0, |retry| retry.attempt),
            operation_intended_ns: retry.map_or(due_ns, |retry| retry.operation_intended_ns),
            operation_sent_ns: retry.map_or(now_ns, |retry| retry.operation_sent_ns),
        }
    }

    /// Schedules `flight` to go out again after the policy's delay from `now_ns`.
    pub(super) fn schedule_retry(&mut self, policy: &RetryPolicy, flight: &InFlight, now_ns: u64) {
        let attempt = flight.attempt + 1;
        let at_ns = now_ns + policy.delay_ns(attempt, &mut self.random);
        self.busy = false;
        self.ready_ns = at_ns;
        self.retry = Some(PendingRetry {
            attempt,
            at_ns,
            operation_intended_ns: flight.operation_intended_ns,
            operation_sent_ns: flight.operation_sent_ns,
        });
    }
}

/// A request on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Index of the lane on its connection.
    pub lane: usize,
    pub step: Step,
    /// When this try was due.
    pub intended_ns: u64,
    /// Intended start of the chain this step belongs to; decides whether it is measured.
    pub chain_intended_ns: u64,
    pub ready_ns: u64,
    /// When this try was handed to the socket.
    pub sent_ns: u64,
    /// Retries before this try (0: the first try).
    pub attempt: u32,
    /// When the operation's first try was due, and sent.
    pub operation_intended_ns: u64,
    pub operation_sent_ns: u64,
}

impl InFlight {
    /// Whether the chain of this request started in the measured window.
    pub(super) fn is_measured(&self, plan: &RunPlan) -> bool {
        self.chain_intended_ns >= plan.measure_start_ns()
            && self.chain_intended_ns < plan.measure_end_ns()
    }
}

//! The autoscaler of a workers run (`--autoscale`): KEDA's `azure-queue` scaler feeding the
//! Kubernetes Horizontal Pod Autoscaler, as a pure, deterministic function of time and the
//! observed queue length. The engine polls the queue when `Autoscaler::next_evaluation_ns`
//! says, hands the count to `evaluate`, and lets `ReadyReplicas` decide when the replicas it
//! asked for have started (the cold start). docs/CAPACITY.md ("Autoscaling") cites the
//! documents each rule follows and says where the model simplifies.
//!
//! The two loops, as KEDA and the HPA run them:
//! - KEDA, every `pollingInterval`: the trigger is active when the queue length exceeds
//!   `activationQueueLength`; an inactive deployment at zero replicas is scaled to one when it
//!   turns active, and an active one is scaled to zero once no poll has been active for
//!   `cooldownPeriod` (with `minReplicaCount` 0).
//! - The HPA, every sync period (15 s), while there is at least one replica: the metric is an
//!   external `AverageValue`, so the raw recommendation is ceil(length / `queueLength`), kept
//!   at the current count while length / (`queueLength` · current) is within the tolerance of
//!   1; clamped to [max(min, 1), max]; stabilised (scale up to the lowest recommendation of the
//!   up window, down to the highest of the down window); then limited by the rate policies of
//!   the direction (each policy's limit counts from the replicas at the start of its period;
//!   `selectPolicy: Max` takes the policy allowing the larger change).

use crate::units::{number, parse_duration_ns, parse_ratio};

/// Nanoseconds in one second.
const SECOND_NS: u64 = 1_000_000_000;
/// Replicas one run may scale to: each is a worker with a connection of its own.
pub const REPLICAS_MAX: usize = 10_000;
/// Rate policies one direction may list.
pub const POLICIES_MAX: usize = 8;
/// Recommendations and scale events kept: the windows and periods are bounded by an hour
/// (`WINDOW_NS_MAX`), and an evaluation at most every `EVALUATION_NS_MIN`.
pub const HISTORY_MAX: usize = 4 * 3600 * 10 + 16;
/// The longest stabilisation window or policy period, as the HPA allows (an hour; the HPA
/// caps policy periods at 30 minutes).
pub const WINDOW_NS_MAX: u64 = 3600 * SECOND_NS;
/// The shortest polling interval or sync period.
pub const EVALUATION_NS_MIN: u64 = 100_000_000;

/// Which count KEDA's azure-queue scaler reads (`queueLengthStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueCount {
    /// `all`: the approximate message count of Get Queue Metadata, visible and invisible.
    All,
    /// `visibleonly`: the messages a Peek of 32 returns; at 32 or more, the approximate count.
    VisibleOnly,
}

/// A rate policy: how far one period may move the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimit {
    /// `type: Pods`: by this many replicas.
    Pods(usize),
    /// `type: Percent`: by this percentage of the replicas at the period's start.
    Percent(u32),
}

/// A rate policy and its period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatePolicy {
    pub limit: RateLimit,
    pub period_ns: u64,
}

/// One direction's rules (`behavior.scaleUp` / `scaleDown`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalingRules {
    pub stabilization_window_ns: u64,
    pub policies: Vec<RatePolicy>,
    /// `selectPolicy: Max` (true; the default) or `Min`.
    pub select_max: bool,
}

/// The whole policy, with KEDA's and the HPA's defaults unless given.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalePolicy {
    /// `queueLength`: the target messages per replica (default 5).
    pub queue_length: f64,
    /// `activationQueueLength` (default 0).
    pub activation_queue_length: f64,
    /// `minReplicaCount` (default 0) and `maxReplicaCount` (the run's `--consumers`).
    pub min_replicas: usize,
    pub max_replicas: usize,
    /// KEDA's `pollingInterval` (default 30 s).
    pub polling_interval_ns: u64,
    /// KEDA's `cooldownPeriod` (default 300 s).
    pub cooldown_period_ns: u64,
    /// The HPA controller's sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s).
    pub sync_period_ns: u64,
    /// The HPA's tolerance (default 10%).
    pub tolerance: f64,
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
    pub count: QueueCount,
    /// From a replica's creation until it takes messages.
    pub cold_start_ns: u64,
}

impl AutoscalePolicy {
    /// KEDA's and the HPA's defaults, scaling up to `max_replicas`: scale up by the larger of
    /// 100% and 4 pods per 15 s without stabilisation, down by 100% per 15 s after a 300 s
    /// window.
    pub fn defaults(max_replicas: usize) -> AutoscalePolicy {
        AutoscalePolicy {
            queue_length: 5.0,
            activation_queue_length: 0.0,
            min_replicas: 0,
            max_replicas,
            polling_interval_ns: 30 * SECOND_NS,
            cooldown_period_ns: 300 * SECOND_NS,
            sync_period_ns: 15 * SECOND_NS,
            tolerance: 0.1,
            scale_up: ScalingRules {
                stabilization_window_ns: 0,
                policies: vec![
                    RatePolicy {
                        limit: RateLimit::Percent(100),
                        period_ns: 15 * SECOND_NS,
                    },
                    RatePolicy {
                        limit: RateLimit::Pods(4),
                        period_ns: 15 * SECOND_NS,
                    },
                ],
                select_max: true,
            },
            scale_down: ScalingRules {
                stabilization_window_ns: 300 * SECOND_NS,
                policies: vec![RatePolicy {
                    limit: RateLimit::Percent(100),
                    period_ns: 15 * SECOND_NS,
                }],
                select_max: true,
            },
            count: QueueCount::All,
            cold_start_ns: 0,
        }
    }

    /// Parses `--autoscale`: `keda` (the defaults) or `key=value` pairs over them, with
    /// `max_replicas` from `--consumers` unless `max=` is given. Keys: `queue-length`,
    /// `activation`, `min`, `max`, `polling`, `cooldown`, `sync`, `tolerance`, `up-window`,
    /// `down-window`, `up` and `down` (policies such as `100%/15s+4/15s`, `+`-joined; a
    /// trailing `:min` selects the smaller change), `count` (`all` or `visible`), `cold-start`.
    pub fn parse(text: &str, max_replicas: usize) -> Result<AutoscalePolicy, String> {
        let mut policy = AutoscalePolicy::defaults(max_replicas);
        if text == "keda" {
            return Ok(policy);
        }
        let error = |part: &str, why: &str| format!("--autoscale {text}: {part}: {why}");
        for part in text.split(',') {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| error(part, "expected key=value, or keda for the defaults"))?;
            let duration = |maximum_ns: u64| -> Result<u64, String> {
                let ns =
                    parse_duration_ns("--autoscale", value).map_err(|why| error(part, &why))?;
                if ns > maximum_ns {
                    return Err(error(part, "at most an hour"));
                }
                Ok(ns)
            };
            let period = || -> Result<u64, String> {
                let ns = duration(WINDOW_NS_MAX)?;
                if ns < EVALUATION_NS_MIN {
                    return Err(error(part, "at least 100ms"));
                }
                Ok(ns)
            };
            let count = |maximum: usize| {
                number("--autoscale", value, 0, maximum).map_err(|why| error(part, &why))
            };
            match key {
                "queue-length" => {
                    policy.queue_length = value
                        .parse::<f64>()
                        .ok()
                        .filter(|length| length.is_finite() && *length > 0.0)
                        .ok_or_else(|| error(part, "expected a positive number"))?
                }
                "activation" => {
                    policy.activation_queue_length = value
                        .parse::<f64>()
                        .ok()
                        .filter(|length| length.is_finite() && *length >= 0.0)
                        .ok_or_else(|| error(part, "expected a number, 0 or more"))?
                }
                "min" => policy.min_replicas = count(REPLICAS_MAX)?,
                "max" => policy.max_replicas = count(REPLICAS_MAX)?,
                "polling" => policy.polling_interval_ns = period()?,
                "sync" => policy.sync_period_ns = period()?,
                "cooldown" => policy.cooldown_period_ns = duration(WINDOW_NS_MAX)?,
                "cold-start" => policy.cold_start_ns = duration(WINDOW_NS_MAX)?,
                "up-window" => policy.scale_up.stabilization_window_ns = duration(WINDOW_NS_MAX)?,
                "down-window" => {
                    policy.scale_down.stabilization_window_ns = duration(WINDOW_NS_MAX)?
                }
                "tolerance" => {
                    policy.tolerance =
                        parse_ratio("--autoscale", value).map_err(|why| error(part, &why))?
                }
                "up" | "down" => {
                    let (policies, select_max) =
                        parse_policies(value).map_err(|why| error(part, &why))?;
                    let rules = if key == "up" {
                        &mut policy.scale_up
                    } else {
                        &mut policy.scale_down
                    };
                    rules.policies = policies;
                    rules.select_max = select_max;
                }
                "count" => {
                    policy.count = match value {
                        "all" => QueueCount::All,
                        "visible" | "visibleonly" => QueueCount::VisibleOnly,
                        _ => return Err(error(part, "expected all or visible")),
                    }
                }
                _ => {
                    return Err(error(
                        key,
                        "unknown key; expected queue-length, activation, min, max, polling, \
                         cooldown, sync, tolerance, up-window, down-window, up, down, count or \
                         cold-start",
                    ))
                }
            }
        }
        if policy.max_replicas == 0 || policy.min_replicas > policy.max_replicas {
            return Err(format!(
                "--autoscale {text}: max must be at least 1 and at least min"
            ));
        }
        Ok(policy)
    }

    /// The lowest replica count the HPA keeps while scaled up (KEDA scales to zero itself).
    fn hpa_min_replicas(&self) -> usize {
        self.min_replicas.max(1).min(self.max_replicas)
    }
}

/// Parses `100%/15s+4/15s[:min]`.
fn parse_policies(text: &str) -> Result<(Vec<RatePolicy>, bool), String> {
    let (list, select_max) = match text.strip_suffix(":min") {
        Some(list) => (list, false),
        None => (text.strip_suffix(":max").unwrap_or(text), true),
    };
    let mut policies = Vec::new();
    for part in list.split('+') {
        if policies.len() == POLICIES_MAX {
            return Err(format!("at most {POLICIES_MAX} policies"));
        }
        let (amount, period) = part
            .split_once('/')
            .ok_or_else(|| format!("{part}: expected e.g. 100%/15s or 4/15s"))?;
        let limit = match amount.strip_suffix('%') {
            Some(percent) => RateLimit::Percent(
                percent
                    .parse()
                    .ok()
                    .filter(|percent| *percent > 0)
                    .ok_or_else(|| format!("{part}: expected a positive percentage"))?,
            ),
            None => RateLimit::Pods(
                amount
                    .parse()
                    .ok()
                    .filter(|pods| *pods > 0)
                    .ok_or_else(|| format!("{part}: expected a positive number of pods"))?,
            ),
        };
        let period_ns = parse_duration_ns("--autoscale", period)?;
        if !(1..=WINDOW_NS_MAX / 2).contains(&period_ns) {
            return Err(format!("{part}: the period must be positive, at most 30m"));
        }
        policies.push(RatePolicy { limit, period_ns });
    }
    Ok((policies, select_max))
}

/// What one evaluation saw and decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Run time of the evaluation.
    pub at_ns: u64,
    /// The queue length read.
    pub observed: u64,
    /// The replicas asked for after it.
    pub desired: usize,
}

/// The autoscaler's state between evaluations.
#[derive(Clone, Debug)]
pub struct Autoscaler {
    policy: AutoscalePolicy,
    /// The replicas asked for (the deployment's `spec.replicas`).
    replicas: usize,
    /// When KEDA last found the trigger active (`None`: never).
    last_active_ns: Option<u64>,
    /// The HPA's raw recommendations, for the stabilisation windows.
    recommendations: Vec<(u64, usize)>,
    /// Replica changes the HPA made, for the rate policies: (time, change).
    scale_events: Vec<(u64, i64)>,
    next_poll_ns: u64,
    next_sync_ns: u64,
}

impl Autoscaler {
    /// An autoscaler at `min_replicas`, first evaluating at time 0.
    pub fn new(policy: AutoscalePolicy) -> Autoscaler {
        assert!(policy.max_replicas >= 1 && policy.min_replicas <= policy.max_replicas);
        assert!(policy.polling_interval_ns >= EVALUATION_NS_MIN);
        assert!(policy.sync_period_ns >= EVALUATION_NS_MIN);
        Autoscaler {
            replicas: policy.min_replicas,
            policy,
            last_active_ns: None,
            recommendations: Vec::new(),
            scale_events: Vec::new(),
            next_poll_ns: 0,
            next_sync_ns: 0,
        }
    }

    /// The replicas asked for now.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// When the next evaluation is due: KEDA's next poll or the HPA's next sync.
    pub fn next_evaluation_ns(&self) -> u64 {
        self.next_poll_ns.min(self.next_sync_ns)
    }

    /// Evaluates at `now_ns` (at or after `next_evaluation_ns`) with the queue length
    /// `observed`, and returns the replicas asked for after it.
    pub fn evaluate(&mut self, now_ns: u64, observed: u64) -> Decision {
        let polls = now_ns >= self.next_poll_ns;
        let syncs = now_ns >= self.next_sync_ns;
        assert!(polls || syncs, "evaluated before it was due");
        let length = observed as f64;
        if polls {
            self.next_poll_ns = now_ns + self.policy.polling_interval_ns;
            let active = length > self.policy.activation_queue_length;
            if active {
                self.last_active_ns = Some(now_ns);
            }
            if self.replicas == 0 && active {
                // KEDA's activation: zero to one, then the HPA takes over.
                self.replicas = self.policy.hpa_min_replicas();
            } else if self.replicas > 0 && !active && self.policy.min_replicas == 0 {
                let idle_since = self.last_active_ns.unwrap_or(0);
                if now_ns.saturating_sub(idle_since) >= self.policy.cooldown_period_ns {
                    self.replicas = 0;
                    self.recommendations.clear();
                    self.scale_events.clear();
                }
            }
        }
        if syncs {
            self.next_sync_ns = now_ns + self.policy.sync_period_ns;
            if self.replicas > 0 {
                self.sync(now_ns, length);
            }
        }
        Decision {
            at_ns: now_ns,
            observed,
            desired: self.replicas,
        }
    }

    /// One HPA sync with the metric at `length`.
    fn sync(&mut self, now_ns: u64, length: f64) {
        let policy = &self.policy;
        let current = self.replicas;
        let ratio = length / (policy.queue_length * current as f64);
        let raw = if (ratio - 1.0).abs() <= policy.tolerance {
            current
        } else {
            (length / policy.queue_length).ceil() as usize
        };
        let raw = raw.clamp(policy.hpa_min_replicas(), policy.max_replicas);
        // Stabilisation over the recommendations of each window, this one included.
        let up_cutoff = now_ns.saturating_sub(policy.scale_up.stabilization_window_ns);
        let down_cutoff = now_ns.saturating_sub(policy.scale_down.stabilization_window_ns);
        let mut up = raw;
        let mut down = raw;
        for &(at_ns, recommendation) in &self.recommendations {
            if at_ns > up_cutoff {
                up = up.min(recommendation);
            }
            if at_ns > down_cutoff {
                down = down.max(recommendation);
            }
        }
        self.recommendations.push((now_ns, raw));
        let keep_ns = policy
            .scale_up
            .stabilization_window_ns
            .max(policy.scale_down.stabilization_window_ns);
        self.recommendations
            .retain(|&(at_ns, _)| now_ns.saturating_sub(at_ns) <= keep_ns);
        assert!(self.recommendations.len() <= HISTORY_MAX);
        let stabilised = current.max(up).min(down);
        let desired = if stabilised > current {
            stabilised.min(self.scale_up_limit(now_ns))
        } else if stabilised < current {
            stabilised.max(self.scale_down_limit(now_ns))
        } else {
            current
        };
        let desired = desired.clamp(policy.hpa_min_replicas(), policy.max_replicas);
        if desired != current {
            self.scale_events
                .push((now_ns, desired as i64 - current as i64));
        }
        let periods_ns = self
            .policy
            .scale_up
            .policies
            .iter()
            .chain(&self.policy.scale_down.policies)
            .map(|policy| policy.period_ns)
            .max()
            .unwrap_or(0);
        self.scale_events
            .retain(|&(at_ns, _)| now_ns.saturating_sub(at_ns) <= periods_ns);
        assert!(self.scale_events.len() <= HISTORY_MAX);
        self.replicas = desired;
    }

    /// Replicas added (`sign` 1) or removed (-1) by the HPA within `period_ns` before `now_ns`.
    fn changed_in_period(&self, now_ns: u64, period_ns: u64, sign: i64) -> usize {
        let cutoff = now_ns.saturating_sub(period_ns);
        self.scale_events
            .iter()
            .filter(|&&(at_ns, change)| at_ns > cutoff && change.signum() == sign)
            .map(|&(_, change)| change.unsigned_abs() as usize)
            .sum()
    }

    /// The most replicas the scale-up policies allow now.
    fn scale_up_limit(&self, now_ns: u64) -> usize {
        let rules = &self.policy.scale_up;
        let current = self.replicas;
        let limits = rules.policies.iter().map(|policy| {
            let start = current.saturating_sub(self.changed_in_period(now_ns, policy.period_ns, 1));
            match policy.limit {
                RateLimit::Pods(pods) => start + pods,
                RateLimit::Percent(percent) => {
                    (start as f64 * (1.0 + f64::from(percent) / 100.0)).ceil() as usize
                }
            }
        });
        let limit = if rules.select_max {
            limits.max()
        } else {
            limits.min()
        };
        limit.unwrap_or(usize::MAX).max(current)
    }

    /// The fewest replicas the scale-down policies allow now.
    fn scale_down_limit(&self, now_ns: u64) -> usize {
        let rules = &self.policy.scale_down;
        let current = self.replicas;
        let limits = rules.policies.iter().map(|policy| {
            let start = current + self.changed_in_period(now_ns, policy.period_ns, -1);
            match policy.limit {
                RateLimit::Pods(pods) => start.saturating_sub(pods),
                RateLimit::Percent(percent) => (start as f64 * (1.0 - f64::from(percent) / 100.0))
                    .max(0.0)
                    .floor() as usize,
            }
        });
        // `Max` selects the policy allowing the larger change: here the lower limit.
        let limit = if rules.select_max {
            limits.min()
        } else {
            limits.max()
        };
        limit.unwrap_or(0).min(current)
    }
}

/// When the replicas asked for are ready: one asked for at `t` takes messages from
/// `t + cold_start`; one removed stops taking new messages at once (it finishes the message in
/// hand, as a pod does in its termination grace period). The newest replicas go first.
#[derive(Clone, Debug, Default)]
pub struct ReadyReplicas {
    /// Replicas asked for, each with the time it is ready, oldest first.
    ready_at_ns: Vec<u64>,
}

impl ReadyReplicas {
    /// Applies a decision to ask for `desired` replicas at `at_ns`, each new one ready after
    /// `cold_start_ns`.
    pub fn ask(&mut self, at_ns: u64, desired: usize, cold_start_ns: u64) {
        assert!(desired <= REPLICAS_MAX);
        self.ready_at_ns.truncate(desired);
        while self.ready_at_ns.len() < desired {
            self.ready_at_ns.push(at_ns + cold_start_ns);
        }
    }

    /// Replicas taking messages at `now_ns`.
    pub fn ready(&self, now_ns: u64) -> usize {
        self.ready_at_ns.iter().filter(|&&at| at <= now_ns).count()
    }

    /// When the next replica asked for but not yet ready will be, if any.
    pub fn next_ready_ns(&self, now_ns: u64) -> Option<u64> {
        self.ready_at_ns
            .iter()
            .copied()
            .filter(|&at| at > now_ns)
            .min()
    }
}

/// The fleet's cost: replica-seconds asked for from `from_ns` to `to_ns`, given the decisions
/// in time order (the count holds from each decision to the next; before the first, `initial`).
pub fn worker_seconds(decisions: &[Decision], initial: usize, from_ns: u64, to_ns: u64) -> f64 {
    let mut total_ns = 0u128;
    let mut replicas = initial;
    let mut since_ns = from_ns;
    for decision in decisions {
        let at_ns = decision.at_ns.clamp(from_ns, to_ns.max(from_ns));
        total_ns += replicas as u128 * u128::from(at_ns - since_ns.min(at_ns));
        since_ns = since_ns.max(at_ns);
        replicas = decision.desired;
    }
    total_ns += replicas as u128 * u128::from(to_ns.saturating_sub(since_ns));
    total_ns as f64 / SECOND_NS as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = SECOND_NS;

    /// Runs `autoscaler` at its own evaluation times with the queue length `length(t_s)`,
    /// until `end_s`; returns (seconds, desired) at every evaluation.
    fn schedule(
        autoscaler: &mut Autoscaler,
        end_s: u64,
        length: impl Fn(u64) -> u64,
    ) -> Vec<(u64, usize)> {
        let mut decisions = Vec::new();
        while autoscaler.next_evaluation_ns() <= end_s * S {
            let at_ns = autoscaler.next_evaluation_ns();
            let decision = autoscaler.evaluate(at_ns, length(at_ns / S));
            decisions.push((at_ns / S, decision.desired));
        }
        decisions
    }

    /// KEDA's and the HPA's defaults, at most 40 replicas, queueLength 5, against a backlog
    /// that is 0 until 10 s, 400 from 10 s to 100 s, then 0. By hand (polls every 30 s, syncs
    /// every 15 s, both at 0):
    ///
    /// | t (s) | length | what happens                                        | replicas |
    /// |-------|--------|-----------------------------------------------------|----------|
    /// | 0     | 0      | poll: inactive, at 0 stays 0; sync: HPA off at 0    | 0        |
    /// | 15    | 0      | sync: off                                           | 0        |
    /// | 30    | 400    | poll: active, 0 → 1; sync: raw 80 → 40 (max), up    |          |
    /// |       |        | limit max(1 + 4, 2·1) = 5                           | 5        |
    /// | 45    | 400    | sync: the +4 at 30 s is 15 s old, outside the period |          |
    /// |       |        | from 5, max(5 + 4, 2·5) = 10                        | 10       |
    /// | 60    | 400    | max(10 + 4, 20) = 20                                | 20       |
    /// | 75    | 400    | 40                                                  | 40       |
    /// | 90    | 400    | raw 40 (at max)                                     | 40       |
    /// | 105   | 0      | raw 1; down window holds 40 (recommendations of the |          |
    /// |       |        | last 300 s)                                         | 40       |
    /// | 120   | 0      | poll: inactive, last active 90, cooldown 300 not up | 40       |
    /// | 390   | 0      | poll: 300 s since the last active poll (90): → 0    | 0        |
    #[test]
    fn the_defaults_follow_a_hand_computed_schedule() {
        let mut autoscaler = Autoscaler::new(AutoscalePolicy::defaults(40));
        let length = |t_s: u64| if (10..100).contains(&t_s) { 400 } else { 0 };
        let decisions = schedule(&mut autoscaler, 420, length);
        let at = |t_s: u64| {
            decisions
                .iter()
                .rev()
                .find(|&&(at_s, _)| at_s == t_s)
                .map(|&(_, desired)| desired)
                .unwrap_or_else(|| panic!("no evaluation at {t_s}: {decisions:?}"))
        };
        assert_eq!(at(0), 0);
        assert_eq!(at(15), 0);
        assert_eq!(at(30), 5);
        assert_eq!(at(45), 10);
        assert_eq!(at(60), 20);
        assert_eq!(at(75), 40);
        assert_eq!(at(90), 40);
        assert_eq!(at(105), 40);
        assert_eq!(at(375), 40);
        assert_eq!(at(390), 0);
        assert_eq!(at(420), 0);
        // Evaluations land on the union of both loops: 0, 15, 30, 45, ...
        assert!(decisions.windows(2).all(|pair| pair[1].0 - pair[0].0 == 15));
    }

    /// Tuned: sync and poll every second, queueLength 10, no scale-down window, at most 2
    /// replicas added a second, min 1. The backlog 0, 55, 55, 30, 10, 10, 0 (one a second):
    /// raw ceil(55/10) = 6 but +2 a second; then down at once (100% a second).
    #[test]
    fn tuned_windows_and_policies() {
        let policy = AutoscalePolicy::parse(
            "queue-length=10,min=1,max=8,polling=1s,sync=1s,down-window=0s,up=2/1s,down=100%/1s",
            8,
        )
        .unwrap();
        let mut autoscaler = Autoscaler::new(policy);
        assert_eq!(autoscaler.replicas(), 1);
        let lengths = [0, 55, 55, 30, 10, 10, 0];
        let decisions = schedule(&mut autoscaler, 6, |t_s| lengths[t_s as usize]);
        let desired: Vec<usize> = decisions.iter().map(|&(_, desired)| desired).collect();
        // 0: raw 0 → min 1. 1: raw 6, +2 → 3. 2: +2 → 5. 3: raw 3 → 3. 4: raw 1 (10/(10·3)
        // is far from 1) → 1. 5: 10/(10·1) = 1: within tolerance → 1. 6: → 1 (min).
        assert_eq!(desired, vec![1, 3, 5, 3, 1, 1, 1]);
    }

    #[test]
    fn the_tolerance_and_the_activation_threshold() {
        let policy =
            AutoscalePolicy::parse("activation=20,polling=1s,sync=1s,cooldown=2s", 10).unwrap();
        let mut autoscaler = Autoscaler::new(policy);
        // 20 is not above the activation threshold: stays at zero.
        assert_eq!(autoscaler.evaluate(0, 20).desired, 0);
        // 21 is: one replica, then the HPA at the same instant: ceil(21/5) = 5, up limit 5.
        assert_eq!(autoscaler.evaluate(S, 21).desired, 5);
        // 26 / (5·5) = 1.04: within 10%, no change.
        assert_eq!(autoscaler.evaluate(2 * S, 26).desired, 5);
        // Below activation but the HPA keeps replicas (down window 300 s) until the cooldown
        // from the last active poll (2 s) has passed: at 4 s, to zero.
        assert_eq!(autoscaler.evaluate(3 * S, 0).desired, 5);
        assert_eq!(autoscaler.evaluate(4 * S, 0).desired, 0);
    }

    #[test]
    fn cold_starts_and_worker_seconds() {
        let mut ready = ReadyReplicas::default();
        ready.ask(0, 2, 3 * S);
        assert_eq!(ready.ready(2 * S), 0);
        assert_eq!(ready.next_ready_ns(2 * S), Some(3 * S));
        assert_eq!(ready.ready(3 * S), 2);
        ready.ask(4 * S, 5, 3 * S);
        assert_eq!(ready.ready(6 * S), 2);
        assert_eq!(ready.ready(7 * S), 5);
        ready.ask(8 * S, 1, 3 * S);
        assert_eq!(ready.ready(8 * S), 1);
        assert_eq!(ready.next_ready_ns(8 * S), None);

        let decisions = [
            Decision {
                at_ns: 2 * S,
                observed: 10,
                desired: 4,
            },
            Decision {
                at_ns: 5 * S,
                observed: 0,
                desired: 1,
            },
        ];
        // From 1 s to 10 s: 1 s at 0, 3 s at 4, 5 s at 1.
        assert_eq!(worker_seconds(&decisions, 0, S, 10 * S), 17.0);
        // A window that starts after both decisions: 1 replica throughout.
        assert_eq!(worker_seconds(&decisions, 0, 6 * S, 8 * S), 2.0);
    }

    #[test]
    fn bad_specs_name_the_part() {
        for (spec, part) in [
            ("queue-length=0", "queue-length=0"),
            ("polling=10ms", "at least 100ms"),
            ("cooldown=2h", "at most an hour"),
            ("up=100%", "100%: expected"),
            ("up=0/15s", "positive number of pods"),
            ("down=50%/0s", "period"),
            ("count=some", "all or visible"),
            ("speed=2", "speed: unknown key"),
            ("min=5,max=2", "at least min"),
            ("max", "expected key=value"),
        ] {
            let error = AutoscalePolicy::parse(spec, 10).unwrap_err();
            assert!(error.contains(part), "{spec}: {error}");
        }
        let policy = AutoscalePolicy::parse("up=50%/30s+2/10s:min,count=visible", 10).unwrap();
        assert!(!policy.scale_up.select_max);
        assert_eq!(policy.scale_up.policies.len(), 2);
        assert_eq!(policy.count, QueueCount::VisibleOnly);
        assert_eq!(AutoscalePolicy::parse("keda", 7).unwrap().max_replicas, 7);
    }
}

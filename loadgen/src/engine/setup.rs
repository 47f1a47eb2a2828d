//! Before the measured run: create the run's queues and preload them, on an executor of its own.
//! The preload is resumable: it reads each queue's approximate message count first and puts only
//! what is missing, spread over up to `PRELOAD_CONNECTIONS_MAX` connections that each keep
//! `PRELOAD_WINDOW` puts in flight, until done or until `--preload-timeout` runs out (then it
//! stops, and a second run resumes), saying how far it got every few seconds. Also the Get
//! Queue Metadata sweep that both setup and the depth sampler use.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use azq::runtime::backend::{Backend, Idle};
use azq::runtime::select::OnBackend;
use azq::time::unix_ms;

use crate::connection::{Connection, ConnectionError, Response};
use crate::runtime::{start_core, CoreOptions};
use crate::wire::request::{RequestEncoder, RequestKind};

use crate::engine::plan::RunPlan;

/// Requests in flight on each preload connection.
const PRELOAD_WINDOW: usize = 64;
/// Connections a preload opens at most (fewer when the run has fewer).
pub const PRELOAD_CONNECTIONS_MAX: usize = 64;
/// Time between the preload's progress lines: a fill of millions takes minutes.
const PRELOAD_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// What setup found and did.
#[derive(Clone, Debug, PartialEq)]
pub struct SetUp {
    /// Each queue's approximate message count before the preload.
    pub found: Vec<u64>,
    /// Each queue's message count after it (what was found plus what was put).
    pub depths: Vec<u64>,
    /// How long the preload's puts took (zero when nothing was missing, or simulated).
    pub preload_elapsed: Duration,
}

impl SetUp {
    /// Messages the preload put, over every queue.
    pub fn put(&self) -> u64 {
        self.depths.iter().sum::<u64>() - self.found.iter().sum::<u64>()
    }
}

/// What each preload connection puts: (queue, messages) pairs, every queue's missing messages
/// (`target` less its count, none when it holds as many or more) spread evenly over
/// `connections`, the first connections taking one more where they do not divide.
fn preload_shares(found: &[u64], target: u64, connections: usize) -> Vec<Vec<(usize, u64)>> {
    assert!(connections > 0);
    let mut shares = vec![Vec::new(); connections];
    for (queue, &count) in found.iter().enumerate() {
        let missing = target.saturating_sub(count);
        let connections = connections as u64;
        for (connection, share) in shares.iter_mut().enumerate() {
            let connection = connection as u64;
            let messages = missing / connections + u64::from(connection < missing % connections);
            if messages > 0 {
                share.push((queue, messages));
            }
        }
    }
    shares
}

/// Creates the queues and preloads them on an event loop of the plan's backend, pinned to the
/// first CPU; with `progress`, a line on stderr every `PRELOAD_PROGRESS_INTERVAL` of the fill.
pub fn set_up(plan: &RunPlan, progress: bool) -> Result<SetUp, String> {
    /// The setup, run on the plan's backend.
    struct SetUpOnBackend(RunPlan, bool);
    impl OnBackend for SetUpOnBackend {
        type Output = Result<SetUp, String>;
        fn run<B: Backend>(self) -> Self::Output {
            let (plan, progress) = (self.0, self.1);
            let options = CoreOptions {
                cpu: plan.cpus[0],
                name: "azq-loadgen-setup".to_string(),
                idle: Idle::Park,
            };
            start_core::<B, _, _, _>(options, move || async move {
                set_up_queues::<B>(&plan, progress).await
            })?
            .join()
            .map_err(|error| format!("setup failed: {error}"))?
        }
    }
    plan.backend
        .dispatch(SetUpOnBackend(plan.clone(), progress))
}

fn encoder(plan: &RunPlan) -> Result<RequestEncoder, String> {
    RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    )
    .map_err(|error| error.0)
}

async fn connect<B: Backend>(plan: &RunPlan) -> Result<Connection<B>, String> {
    let address = plan.endpoint.address;
    Connection::<B>::connect(&plan.endpoint)
        .await
        .map_err(|error| format!("cannot connect to {address}: {error}"))
}

async fn set_up_queues<B: Backend>(plan: &RunPlan, progress: bool) -> Result<SetUp, String> {
    let mut encoder = encoder(plan)?;
    let mut connection = connect::<B>(plan).await?;
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
    let found = queue_depths(&mut encoder, &mut connection).await?;
    let missing: u64 = found
        .iter()
        .map(|&count| plan.preload.saturating_sub(count))
        .sum();
    let connections = plan.connections.clamp(1, PRELOAD_CONNECTIONS_MAX);
    let shares = preload_shares(&found, plan.preload, connections);
    let started = Instant::now();
    let deadline = started + Duration::from_nanos(plan.preload_timeout_ns);
    let answered = Rc::new(Cell::new(0));
    let tasks: Vec<_> = shares
        .into_iter()
        .filter(|share| !share.is_empty())
        .map(|share| {
            let answered = answered.clone();
            B::spawn_task(preload_share::<B>(plan.clone(), share, deadline, answered))
        })
        .collect();
    // Dropped (so cancelled) once the shares are done.
    let _reporter = (progress && missing > 0)
        .then(|| B::spawn_task(report_preload::<B>(answered, missing, started)));
    let mut depths = found.clone();
    let mut failure = None;
    let mut stopped = false;
    for task in tasks {
        let outcome = task.await;
        for &(queue, messages) in &outcome.put {
            depths[queue] += messages;
        }
        stopped |= outcome.stopped;
        if let Some(error) = outcome.error {
            failure.get_or_insert(error);
        }
    }
    let setup = SetUp {
        found,
        depths,
        preload_elapsed: if plan.preload > 0 {
            started.elapsed()
        } else {
            Duration::ZERO
        },
    };
    let progress = format!(
        "put {} of the {missing} messages missing ({} were there)",
        setup.put(),
        setup.found.iter().sum::<u64>()
    );
    if let Some(error) = failure {
        return Err(format!(
            "preload failed: {error}; {progress}; run again to resume"
        ));
    }
    if stopped {
        return Err(format!(
            "preload stopped by --preload-timeout ({:?}): {progress}; run again to resume",
            Duration::from_nanos(plan.preload_timeout_ns)
        ));
    }
    Ok(setup)
}

/// What one preload connection did.
struct ShareOutcome {
    /// (queue, messages answered with success).
    put: Vec<(usize, u64)>,
    /// It stopped at the deadline with messages left to put.
    stopped: bool,
    error: Option<String>,
}

/// Prints how far the preload got every `PRELOAD_PROGRESS_INTERVAL`, until cancelled.
async fn report_preload<B: Backend>(answered: Rc<Cell<u64>>, missing: u64, started: Instant) {
    loop {
        B::sleep(PRELOAD_PROGRESS_INTERVAL).await;
        let put = answered.get();
        let elapsed_s = started.elapsed().as_secs_f64();
        eprintln!(
            "azq-loadgen: preload {put} of {missing} messages put in {elapsed_s:.0} s \
             ({:.0}/s)",
            put as f64 / elapsed_s
        );
    }
}

/// Puts `share`'s messages on a connection of its own, `PRELOAD_WINDOW` at a time, checking the
/// deadline after each window's answers: each connection answers at least one window. Counts
/// every put answered into `answered_total`, which the connections share for the progress line.
async fn preload_share<B: Backend>(
    plan: RunPlan,
    share: Vec<(usize, u64)>,
    deadline: Instant,
    answered_total: Rc<Cell<u64>>,
) -> ShareOutcome {
    let mut outcome = ShareOutcome {
        put: Vec::with_capacity(share.len()),
        stopped: false,
        error: None,
    };
    let connected = match encoder(&plan) {
        Ok(encoder) => connect::<B>(&plan)
            .await
            .map(|connection| (encoder, connection)),
        Err(error) => Err(error),
    };
    let (mut encoder, mut connection) = match connected {
        Ok(pair) => pair,
        Err(error) => {
            outcome.error = Some(error);
            return outcome;
        }
    };
    let mut output = Vec::with_capacity(PRELOAD_WINDOW * 2048);
    for (queue, missing) in share {
        let mut sent = 0;
        let mut answered = 0;
        while answered < missing {
            if answered > 0 && Instant::now() >= deadline {
                outcome.stopped = true;
                break;
            }
            output.clear();
            while sent < missing && sent - answered < PRELOAD_WINDOW as u64 {
                let now_ms = unix_ms();
                let put = RequestKind::Put {
                    sent_unix_us: now_ms * 1000,
                    mark: None,
                };
                if let Err(error) = encoder.encode(queue, put, now_ms, &mut output) {
                    outcome.error = Some(error.0);
                    break;
                }
                sent += 1;
            }
            if let Err(error) = connection.send(&output).await {
                outcome.error = Some(describe(error));
            }
            while outcome.error.is_none() && answered < sent {
                match connection.read_response().await {
                    Ok(response) if response.is_success() => {
                        answered += 1;
                        answered_total.set(answered_total.get() + 1);
                    }
                    Ok(response) => outcome.error = Some(describe_response(&response)),
                    Err(error) => outcome.error = Some(describe(error)),
                }
            }
            if outcome.error.is_some() {
                break;
            }
        }
        if answered > 0 {
            outcome.put.push((queue, answered));
        }
        if outcome.stopped || outcome.error.is_some() {
            break;
        }
    }
    outcome
}

/// The approximate message count of every queue, pipelined on one connection.
pub(super) async fn queue_depths<B: Backend>(
    encoder: &mut RequestEncoder,
    connection: &mut Connection<B>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preload_puts_only_what_each_queue_is_missing() {
        // Three queues found at 0, 7 and 12 of a target of 10, over two connections.
        assert_eq!(
            preload_shares(&[0, 7, 12], 10, 2),
            vec![vec![(0, 5), (1, 2)], vec![(0, 5), (1, 1)]]
        );
        // Resumed after an interruption that left 13,337 of 20,000: the rest, spread evenly.
        let shares = preload_shares(&[13_337], 20_000, 16);
        let counts: Vec<u64> = shares.iter().map(|share| share[0].1).collect();
        assert_eq!(counts.iter().sum::<u64>(), 6_663);
        assert!(counts.iter().all(|&count| count == 416 || count == 417));
        // Nothing missing: nothing to put, and no connection has work.
        assert!(preload_shares(&[20_000, 25_000], 20_000, 4)
            .iter()
            .all(Vec::is_empty));
        // Fewer messages than connections: one each for the first ones.
        assert_eq!(
            preload_shares(&[0], 2, 3),
            vec![vec![(0, 1)], vec![(0, 1)], vec![]]
        );
    }
}

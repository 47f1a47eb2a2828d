//! The command line: flags into a validated `Options`, with the usage text. Hand-written, like
//! azq's own, to keep the dependency list short; every limit is checked here so that the engine
//! can assert instead of validate.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use azq::limits::{MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX, VISIBILITY_TIMEOUT_S_MAX};
use azq::machine::RuntimeChoice;

use crate::autoscale::AutoscalePolicy;
use crate::endpoint::TargetArguments;
use crate::retry::RetryPolicy;
use crate::scenario::Scenario;
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::shape::Shape;
use crate::simulation::SimulationPlan;
use crate::steps::{parse_rate_steps, FindMax, LatencyBound, StepPlan};
use crate::sweep::{describe, SweepOptions};
use crate::units::{number, parse_duration_ns, parse_rate, parse_ratio};
use crate::wire::mark::TIMESTAMP_DIGITS;
use crate::workers::{parse_poll_backoff, WorkTime, WorkerPlan};

/// The `x-ms-version` sent by default: old enough for every Azurite 3.x without
/// `--skipApiVersionCheck`, and still served by Azure.
pub const API_VERSION_DEFAULT: &str = "2021-12-02";
/// Requests one connection may have in flight.
pub const PIPELINE_MAX: usize = 256;
/// Connections one run may open.
pub const CONNECTIONS_MAX: usize = 65_536;
/// Queues one run may use.
pub const QUEUES_MAX: usize = 100_000;
/// Messages one preload may put into one queue.
pub const PRELOAD_MESSAGES_MAX: u64 = 10_000_000;
/// How long a preload may take without `--preload-timeout`.
pub const PRELOAD_TIMEOUT_NS_DEFAULT: u64 = 3600 * NANOSECONDS_PER_SECOND;
/// The longest `--preload-timeout`.
pub const PRELOAD_TIMEOUT_NS_MAX: u64 = 86_400 * NANOSECONDS_PER_SECOND;
/// How long after the measured window an open loop may still send what it scheduled in the
/// window, without `--grace`.
pub const GRACE_NS_DEFAULT: u64 = 10 * NANOSECONDS_PER_SECOND;
/// The longest `--grace`.
pub const GRACE_NS_MAX: u64 = 3600 * NANOSECONDS_PER_SECOND;
/// Workers of a `workers` run without `--consumers`.
pub const WORKERS_DEFAULT: usize = 16;
/// A worker's pause after an empty Get, doubling from the first to the second.
pub const POLL_BACKOFF_NS_DEFAULT: (u64, u64) = (100_000_000, 1_000_000_000);
/// The knee search's first rate, per second.
pub const FIND_MAX_START_RATE_DEFAULT: f64 = 100.0;
/// The knee search stops when passing and failing rates are within this share.
pub const FIND_MAX_PRECISION_DEFAULT: f64 = 0.1;

pub const USAGE: &str = "\
azq-loadgen: load generator for Azure Queue Storage endpoints (azq, Azurite, Azure)

Usage: azq-loadgen [options]
       azq-loadgen merge A.hlog B.hlog ... [--json FILE] [--plot FILE.svg] [--hdr-log FILE]
                                           [--csv FILE]

Target
  --endpoint URL            queue endpoint, http:// or https://
                            (default http://127.0.0.1:10001/devstoreaccount1)
  --account NAME            account (default: from the URL, else devstoreaccount1)
  --key BASE64              account key (default: the development account's key)
  --connection-string TEXT  Azure Storage connection string (UseDevelopmentStorage=true works)
  --sas TOKEN               sign with a SAS token instead of SharedKey
  --bearer TOKEN            send Authorization: Bearer TOKEN instead (https only); the value
                            unsigned makes an unsigned JWT for the storage audience, which
                            azq and Azurite with --oauth basic accept
  --ca FILE                 https: trust the certificates in FILE (PEM), e.g. azq's
                            DIR/__azq__/cert.pem (default: the system's trusted roots)
  --insecure                https: accept any certificate (still encrypted, not verified)
  --api-version VERSION     x-ms-version sent (default 2021-12-02)

Engine
  --cpus LIST               CPUs to pin client cores to, e.g. 1 or 2,3 (default: all allowed)
  --connections N           keep-alive connections, spread over the cores (default 16)
  --pipeline N              requests in flight per connection (default 1)
  --runtime KIND            portable | auto | io_uring: the client's event loop, one of
                            azq's backends (default portable: the faster client, even with
                            wrk; auto: portable, as azq's, with one line on stderr when
                            io_uring is refused here saying why)

Scenario
  --scenario NAME           put | get-delete | get | peek | update | mixed | workers
                            (default put); get leaves messages leased (they return after
                            --visibility-timeout)
  --producers N             mixed: connections that put (default: half);
                            workers: connections that put (default 1; may be 0 with
                            --preload)
  --consumers M             mixed: connections that get and delete (default: the rest);
                            workers: workers, one connection each (default 16)
  --queues N                queues named <prefix>-0 .. <prefix>-(N-1) (default 1); with more
                            queues than lanes (connections x pipeline; producers and the
                            others counted apart), each lane takes every queue in turn, a
                            Put or a Get and its Deletes at a time (a worker keeps to one)
  --queue-prefix TEXT       queue name prefix (default azqload); queues are created if missing
  --message-bytes N         message text size, 16..65536 (default 1024)
  --batch N                 numofmessages of gets and peeks, 1..32 (default 1)
  --visibility-timeout S    visibilitytimeout of gets and updates (default 30)
  --preload N               fill each queue to N messages before measuring (default 0), at
                            most 10,000,000: resumable (puts only what each queue's count
                            lacks), pipelined over up to 64 of the run's connections
  --preload-timeout TIME    stop the preload after TIME, saying how far it got; the same
                            command run again resumes it (default 1h)
  --refill                  consumers put a new message for each one they delete, so the
                            queues keep their preloaded depth (get-delete at a fixed depth)

Workers (--scenario workers: get up to --batch messages, work on each, then delete it)
  --work-time SPEC          time per message, a pause, not CPU: 20ms | 10ms..50ms (uniform) |
                            lognormal:p50=20ms,p99=200ms | exp:mean=20ms (exponential)
                            (default 0ms)
  --crash-rate P            share of deliveries abandoned undeleted after the work, e.g. 1%
                            (default 0); they come back after the visibility timeout
  --poll-backoff MIN..MAX   pause after an empty get, doubling up to MAX (default 100ms..1s)
  --autoscale SPEC          scale the workers as KEDA's azure-queue scaler and the Kubernetes
                            HPA would (one queue): keda (their defaults), or key=value pairs
                            over them: queue-length=5 (target per replica), activation=0,
                            min=0, max=(--consumers), polling=30s, cooldown=300s (to zero),
                            sync=15s (the HPA's), tolerance=10%, up-window=0s,
                            down-window=300s, up=100%/15s+4/15s, down=100%/15s (policies,
                            +-joined, :min to take the smaller change), count=all|visible,
                            cold-start=0s (a new replica's start-up)
  --slo BOUND               judge the end-to-end latency, e.g. e2e-p99=60s (p50 .. p99.99, max)

Load
  --duration TIME           measured time, e.g. 10s, 500ms, 2m (default 10s)
  --requests N              instead of --duration: start N operations in total
  --warmup TIME             unmeasured time before measuring (default 2s)
  --grace TIME              open loop: how long after the measured window the operations
                            it scheduled and could not send in time may still go out
                            (default 10s, at most 1h); the rest are not sent, and are
                            reported as unsent, so an overloaded run still ends (a retry
                            under way still runs its --retry course)
  --rate R                  open loop: R operations/s in total (default: closed loop)
  --arrival KIND            open loop gaps: constant | poisson (default constant)
  --shape SPEC              open loop whose rate changes over time (instead of --rate; time 0
                            is the measured window's start, the warm-up runs at the first rate):
                              step:100/s@0s,2000/s@10s,100/s@40s   rates from each time on
                              ramp:100/s..2000/s@30s (or @10s..40s) linear, then held
                              spike:base=100/s,peak=2000/s,at=10s,for=20s
                              sine:min=100/s,max=2000/s,period=60s  a day compressed, from min
                              trace:FILE   CSV of arrival timestamps (s), or of second,rate rows
                            rates N, N/s, N/m or N/h; without --duration the run lasts the
                            shape's last change plus 10s (a sine: a period; a trace: its length)
  --seed N                  seed of the poisson schedule, retry jitter, work times and
                            crashes (default 1)
                            (an open loop above 1,000/s per core polls rather than sleeps
                            between sends, for punctual sends, and so does a closed loop
                            pinned with --cpus, for cheaper wake-ups: pin them away from the
                            server's CPUs; a lighter open loop sleeps, polling 250 us around
                            each send)
  --retry POLICY            none | exponential[:max=N,base=TIME]: retry 408 and 5xx answers
                            and lost connections as the Azure SDKs do (default none;
                            exponential alone is max=3,base=1s); retries are counted apart
  --start-at UNIX_TIME      start the measured run at this wall-clock second (after setup),
                            so that loadgens on several machines start together

Steps (open loop; each step runs --warmup then --step-duration and is reported on its own)
  --rate-steps R1,R2,...    run these rates in turn
  --find-max BOUND          find the highest rate that keeps a percentile under a bound, e.g.
                            p99=20ms (p50 .. p99.99, max), with errors within --max-error-rate:
                            double from --find-max-start until a step fails, then bisect
  --find-max-start R        first rate of the search (default 100)
  --find-max-precision P    stop when failing and passing rates are within P (default 10%)
  --step-duration TIME      measured time of each step (default 10s)

Simulation (virtual time: no server; hours of traffic in seconds, repeatable under --seed)
  --simulate                run the same command line against a model of the service: azq's
                            own queue semantics in-process (visibility, leases, redelivery,
                            TTLs), the lanes, workers and autoscaler as in a real run, and a
                            round trip per request drawn from --sim-latency; the report is a
                            real run's, marked simulated (the target flags are not used)
  --sim-latency SPEC|FILE   round trip of every request: 200us | 100us-300us |
                            p50=100us,p99=400us (default), or FILE.json, a real run's --json
                            report, to fit each operation's own (its p50 and p99)
  --sim-profile azure       the service refuses beyond Azure's targets (2,000 messages/s per
                            queue, 20,000 requests/s per account) with 503 ServerBusy
  --sim-server-rate R       requests/s the simulated shard serves (default 50000): requests
                            arriving faster wait for it in turn, as on a saturated server
  --sweep NAME=V1,V2,...    simulate once per value (several --sweep: every combination) and
                            report each point's SLO verdict, worker-seconds, backlog peak and
                            drain time, marking the cheapest point that meets --slo within
                            --max-error-rate. NAME is a
                            flag without its dashes (consumers, rate, work-time, ...) or an
                            --autoscale key (queue-length, max, cooldown, ...)

Output
  --json FILE               write the results as JSON
  --hdr-log FILE            write an HdrHistogram interval log (one tag per operation)
  --plot FILE.svg           write latency percentiles (and, for consuming runs, throughput,
                            queue depth and end-to-end latency over time; for stepped runs,
                            latency by rate) as SVG (default with --json: beside the JSON
                            file, with the extension .svg)
  --csv FILE                write the per-second timeline as CSV
  --server-metrics auto|off scrape the server's /_azq/metrics once a second: its resident
                            memory, message bytes, messages, disk bytes and snapshots running,
                            summed over shards, in every report (default auto: each series a server exposes; none
                            from Azurite or Azure, which the run does not ask again)
  --html FILE               write one self-contained HTML report to share (opens without a
                            network): the answer first (SLO, worker-seconds, backlog), then
                            arrivals, depth and replicas over time, latency, the details
  --max-error-rate R        exit 1 when errors/requests exceed R, e.g. 1% or 0.01 (default 1%)
  --quiet                   no progress line
  -h, --help                this text

Under --rate, R counts operations started by the schedule (puts, gets, peeks); the deletes and
updates that follow a get go out as soon as it answers. Latency is measured from each
operation's intended send time (corrected for coordinated omission) and, beside it, from its
actual send time.

merge unions HdrHistogram interval logs written with --hdr-log (by loadgens on several
machines, or several runs) exactly, per tag: the counts add up and the percentiles are those
of one histogram of every answer. It prints the table and writes what the flags ask.
";

/// A validated command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub target: TargetArguments,
    pub api_version: String,
    pub cpus: Option<Vec<usize>>,
    /// The client cores' event loop (`--runtime`).
    pub runtime: RuntimeChoice,
    pub connections: usize,
    pub pipeline: usize,
    pub scenario: Scenario,
    /// For `mixed` and `workers`: producing connections; the other `connections - producers`
    /// consume.
    pub producers: usize,
    pub queues: usize,
    pub queue_prefix: String,
    pub message_bytes: usize,
    pub batch: u32,
    pub visibility_timeout_s: u64,
    pub preload: u64,
    /// `--preload-timeout`: how long the preload may take.
    pub preload_timeout_ns: u64,
    /// `--server-metrics`: scrape the server's metrics (not in a simulated run).
    pub server_metrics: bool,
    pub refill: bool,
    pub duration_ns: Option<u64>,
    pub requests: Option<u64>,
    pub warmup_ns: u64,
    /// `--grace`: how long after the measured window the open loop may still send what it
    /// scheduled in the window.
    pub grace_ns: u64,
    pub load: LoadModel,
    pub seed: u64,
    pub json_path: Option<PathBuf>,
    pub hdr_log_path: Option<PathBuf>,
    pub plot_path: Option<PathBuf>,
    pub csv_path: Option<PathBuf>,
    pub html_path: Option<PathBuf>,
    pub max_error_ratio: f64,
    pub quiet: bool,
    pub retry: Option<RetryPolicy>,
    /// For `workers`.
    pub workers: Option<WorkerPlan>,
    /// A stepped run (`--rate-steps`, `--find-max`), each step measured for `duration_ns`.
    pub steps: Option<StepPlan>,
    /// When the measured run starts, by the wall clock.
    pub start_at: Option<SystemTime>,
    /// `--shape`: the open loop's rate over time (`load` then holds its mean over the measured
    /// window), with its text as given.
    pub shape: Option<(String, Shape)>,
    /// `--autoscale`, for `workers`: the policy; the workers are its most replicas.
    pub autoscale: Option<AutoscalePolicy>,
    /// `--slo`: a bound on end-to-end latency the report judges.
    pub slo: Option<LatencyBound>,
    /// `--simulate`: the run in virtual time, with these assumptions about the service.
    pub simulation: Option<SimulationPlan>,
}

/// `azq-loadgen merge`'s command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeOptions {
    pub inputs: Vec<PathBuf>,
    pub json_path: Option<PathBuf>,
    pub plot_path: Option<PathBuf>,
    pub hdr_log_path: Option<PathBuf>,
    pub csv_path: Option<PathBuf>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Run(Box<Options>),
    /// `--sweep`: a simulated run per point (every point's command line parses).
    Sweep(Box<SweepOptions>),
    Merge(MergeOptions),
    Help,
}

/// Parses the arguments after the program name.
pub fn parse(arguments: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let arguments: Vec<String> = arguments.into_iter().collect();
    if arguments.first().map(String::as_str) == Some("merge") {
        return parse_merge(arguments.into_iter().skip(1));
    }
    if let Some(sweep) = SweepOptions::parse(&arguments)? {
        for point in sweep.points() {
            match parse_run(sweep.point_arguments(&point)?.into_iter()) {
                Ok(Command::Help) => return Ok(Command::Help),
                Ok(_) => {}
                Err(error) => return Err(format!("--sweep at {}: {error}", describe(&point))),
            }
        }
        return Ok(Command::Sweep(Box::new(sweep)));
    }
    parse_run(arguments.into_iter())
}

/// Parses the arguments of one run.
fn parse_run(arguments: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut target = TargetArguments::default();
    let mut api_version = API_VERSION_DEFAULT.to_string();
    let mut cpus = None;
    let mut runtime = RuntimeChoice::Portable;
    let mut connections = None;
    let mut pipeline = 1;
    let mut scenario = Scenario::Put;
    let mut producers = None;
    let mut consumers = None;
    let mut queues = 1;
    let mut queue_prefix = "azqload".to_string();
    let mut message_bytes = 1024;
    let mut batch = 1;
    let mut visibility_timeout_s = 30;
    let mut preload = 0;
    let mut preload_timeout_ns = PRELOAD_TIMEOUT_NS_DEFAULT;
    let mut server_metrics = true;
    let mut refill = false;
    let mut duration_ns = None;
    let mut requests = None;
    let mut warmup_ns = 2 * NANOSECONDS_PER_SECOND;
    let mut grace_ns = GRACE_NS_DEFAULT;
    let mut rate_per_s = None;
    let mut arrival = Arrival::Constant;
    let mut seed = 1;
    let mut json_path = None;
    let mut hdr_log_path = None;
    let mut plot_path = None;
    let mut csv_path = None;
    let mut html_path = None;
    let mut max_error_ratio = 0.01;
    let mut quiet = false;
    let mut retry = None;
    let mut work_time = None;
    let mut crash_ratio = None;
    let mut poll_backoff = None;
    let mut rate_steps = None;
    let mut find_max_bound = None;
    let mut find_max_start = None;
    let mut find_max_precision = None;
    let mut step_duration_ns = None;
    let mut start_at = None;
    let mut shape = None;
    let mut autoscale_text: Option<String> = None;
    let mut slo = None;
    let mut simulate = false;
    let mut sim_latency: Option<SimulationPlan> = None;
    let mut sim_profile_azure = None;
    let mut sim_server_rate = None;

    let mut flags = Flags {
        arguments,
        inline_value: None,
    };
    while let Some(flag) = flags.next_flag() {
        let mut value = || flags.value(&flag);
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--quiet" => quiet = true,
            "--refill" => refill = true,
            "--endpoint" => target.endpoint = Some(value()?),
            "--account" => target.account = Some(value()?),
            "--key" => target.key = Some(value()?),
            "--connection-string" => target.connection_string = Some(value()?),
            "--sas" => target.sas = Some(value()?),
            "--bearer" => target.bearer = Some(value()?),
            "--ca" => target.tls.ca = Some(value()?),
            "--insecure" => target.tls.insecure = true,
            "--api-version" => api_version = value()?,
            "--cpus" => cpus = Some(parse_cpu_list(&value()?)?),
            "--runtime" => {
                let name = value()?;
                runtime = RuntimeChoice::parse(&name).ok_or_else(|| {
                    format!("--runtime {name}: expected auto, io_uring or portable")
                })?;
            }
            "--connections" => connections = Some(number(&flag, &value()?, 1, CONNECTIONS_MAX)?),
            "--pipeline" => pipeline = number(&flag, &value()?, 1, PIPELINE_MAX)?,
            "--scenario" => {
                let name = value()?;
                scenario = Scenario::parse(&name).ok_or_else(|| {
                    format!(
                        "--scenario {name}: expected put, get-delete, get, peek, update, mixed \
                         or workers"
                    )
                })?;
            }
            "--producers" => producers = Some(number(&flag, &value()?, 0, CONNECTIONS_MAX)?),
            "--consumers" => consumers = Some(number(&flag, &value()?, 0, CONNECTIONS_MAX)?),
            "--queues" => queues = number(&flag, &value()?, 1, QUEUES_MAX)?,
            "--queue-prefix" => queue_prefix = value()?,
            "--message-bytes" => {
                message_bytes = number(&flag, &value()?, TIMESTAMP_DIGITS, MESSAGE_TEXT_BYTES_MAX)?
            }
            "--batch" => batch = number(&flag, &value()?, 1, MESSAGES_PER_GET_MAX as usize)? as u32,
            "--visibility-timeout" => {
                visibility_timeout_s =
                    number(&flag, &value()?, 1, VISIBILITY_TIMEOUT_S_MAX as usize)? as u64
            }
            "--preload" => {
                preload = number(&flag, &value()?, 0, PRELOAD_MESSAGES_MAX as usize)? as u64
            }
            "--preload-timeout" => {
                preload_timeout_ns = parse_duration_ns(&flag, &value()?)?;
                if preload_timeout_ns == 0 || preload_timeout_ns > PRELOAD_TIMEOUT_NS_MAX {
                    return Err(format!("{flag} must be more than 0 and at most a day"));
                }
            }
            "--server-metrics" => {
                server_metrics = match value()?.as_str() {
                    "auto" => true,
                    "off" => false,
                    other => return Err(format!("{flag}: auto or off, not {other}")),
                }
            }
            "--duration" => duration_ns = Some(parse_duration_ns(&flag, &value()?)?),
            "--requests" => requests = Some(number(&flag, &value()?, 1, usize::MAX)? as u64),
            "--warmup" => warmup_ns = parse_duration_ns(&flag, &value()?)?,
            "--grace" => {
                grace_ns = parse_duration_ns(&flag, &value()?)?;
                if grace_ns > GRACE_NS_MAX {
                    return Err(format!("{flag} must be at most an hour"));
                }
            }
            "--rate" => rate_per_s = Some(parse_rate(&flag, &value()?)?),
            "--arrival" => {
                arrival = match value()?.as_str() {
                    "constant" => Arrival::Constant,
                    "poisson" => Arrival::Poisson,
                    other => {
                        return Err(format!("--arrival {other}: expected constant or poisson"))
                    }
                }
            }
            "--seed" => {
                let text = value()?;
                seed = text
                    .parse()
                    .map_err(|_| format!("--seed {text}: not a number"))?;
            }
            "--json" => json_path = Some(PathBuf::from(value()?)),
            "--hdr-log" => hdr_log_path = Some(PathBuf::from(value()?)),
            "--plot" => plot_path = Some(PathBuf::from(value()?)),
            "--csv" => csv_path = Some(PathBuf::from(value()?)),
            "--html" => html_path = Some(PathBuf::from(value()?)),
            "--max-error-rate" => max_error_ratio = parse_ratio(&flag, &value()?)?,
            "--retry" => retry = RetryPolicy::parse(&value()?)?,
            "--work-time" => work_time = Some(WorkTime::parse(&value()?)?),
            "--crash-rate" => crash_ratio = Some(parse_ratio(&flag, &value()?)?),
            "--poll-backoff" => poll_backoff = Some(parse_poll_backoff(&value()?)?),
            "--rate-steps" => rate_steps = Some(parse_rate_steps(&value()?)?),
            "--find-max" => find_max_bound = Some(LatencyBound::parse(&value()?)?),
            "--find-max-start" => find_max_start = Some(parse_rate(&flag, &value()?)?),
            "--find-max-precision" => find_max_precision = Some(parse_ratio(&flag, &value()?)?),
            "--step-duration" => step_duration_ns = Some(parse_duration_ns(&flag, &value()?)?),
            "--start-at" => start_at = Some(parse_start_at(&value()?)?),
            "--autoscale" => autoscale_text = Some(value()?),
            "--slo" => {
                let text = value()?;
                let bound = text
                    .strip_prefix("e2e-")
                    .ok_or_else(|| format!("--slo {text}: expected e.g. e2e-p99=60s"))?;
                slo = Some(
                    LatencyBound::parse(bound)
                        .map_err(|_| format!("--slo {text}: expected e.g. e2e-p99=60s"))?,
                );
            }
            "--shape" => {
                let text = value()?;
                shape = Some((text.clone(), Shape::parse(&text)?));
            }
            "--simulate" => simulate = true,
            "--sim-latency" => sim_latency = Some(SimulationPlan::parse_latency(&value()?)?),
            "--sim-server-rate" => sim_server_rate = Some(parse_rate(&flag, &value()?)?),
            "--sim-profile" => match value()?.as_str() {
                "azure" => sim_profile_azure = Some(true),
                other => return Err(format!("--sim-profile {other}: expected azure")),
            },
            other => return Err(format!("unknown option {other} (see --help)")),
        }
    }

    if duration_ns.is_some() && requests.is_some() {
        return Err("give --duration or --requests, not both".to_string());
    }
    let steps = match (rate_steps, find_max_bound) {
        (Some(_), Some(_)) => return Err("give --rate-steps or --find-max, not both".to_string()),
        (Some(rates), None) => Some(StepPlan::Rates(rates)),
        (None, Some(bound)) => Some(StepPlan::FindMax(FindMax {
            bound,
            start_rate_per_s: find_max_start.unwrap_or(FIND_MAX_START_RATE_DEFAULT),
            precision: find_max_precision.unwrap_or(FIND_MAX_PRECISION_DEFAULT),
        })),
        (None, None) => None,
    };
    if steps.is_some() {
        if rate_per_s.is_some() || duration_ns.is_some() || requests.is_some() {
            return Err(
                "--rate-steps and --find-max set the rates; give each step's length with \
                 --step-duration, not --rate, --duration or --requests"
                    .to_string(),
            );
        }
        duration_ns = Some(step_duration_ns.unwrap_or(10 * NANOSECONDS_PER_SECOND));
        // The rate of each step replaces this one.
        rate_per_s = Some(1.0);
    } else if step_duration_ns.is_some() || find_max_start.is_some() || find_max_precision.is_some()
    {
        return Err(
            "--step-duration and --find-max-* apply to --rate-steps and --find-max".to_string(),
        );
    }
    if let Some((_, parsed)) = &shape {
        if steps.is_some() || rate_per_s.is_some() || requests.is_some() {
            return Err(
                "--shape sets the rate over time: give it without --rate, --rate-steps, \
                 --find-max or --requests"
                    .to_string(),
            );
        }
        if matches!(parsed, Shape::Arrivals { .. }) && arrival == Arrival::Poisson {
            return Err(
                "--shape trace: a trace of timestamps replays its instants; leave out \
                 --arrival poisson"
                    .to_string(),
            );
        }
        duration_ns = Some(duration_ns.unwrap_or_else(|| parsed.default_duration_ns()));
    }
    if requests.is_none() && duration_ns.is_none() {
        duration_ns = Some(10 * NANOSECONDS_PER_SECOND);
    }
    if duration_ns == Some(0) {
        return Err("--duration must be positive".to_string());
    }
    let shape = match shape {
        Some((text, parsed)) => {
            let duration_s = duration_ns.unwrap_or(0) as f64 / NANOSECONDS_PER_SECOND as f64;
            let parsed = parsed.extended(duration_s)?;
            // The target rate a shaped run reports: the shape's mean over the measured window.
            rate_per_s = Some(parsed.mean_rate_per_s(duration_s));
            Some((text, parsed))
        }
        None => None,
    };
    let mut autoscale = None;
    let (connections, producers) = match scenario {
        Scenario::Workers => {
            let producers = producers.unwrap_or(1);
            let mut consumers = consumers.unwrap_or_else(|| {
                connections.map_or(WORKERS_DEFAULT, |connections: usize| {
                    connections.saturating_sub(producers)
                })
            });
            if let Some(text) = &autoscale_text {
                let policy = AutoscalePolicy::parse(text, consumers.max(1))?;
                if queues != 1 {
                    return Err(
                        "--autoscale reads one queue, as one KEDA trigger: --queues 1".to_string(),
                    );
                }
                if steps.is_some() {
                    return Err(
                        "--autoscale runs one fleet: not with --rate-steps or --find-max"
                            .to_string(),
                    );
                }
                // The fleet's ceiling is its connections: one per replica.
                consumers = policy.max_replicas;
                autoscale = Some(policy);
            }
            if consumers == 0 {
                return Err("workers needs at least one worker (--consumers)".to_string());
            }
            if producers == 0 && preload == 0 {
                return Err("workers without producers needs --preload".to_string());
            }
            if producers == 0 && shape.is_some() {
                return Err("--shape paces the producers: give workers at least one".to_string());
            }
            if producers + consumers > CONNECTIONS_MAX {
                return Err(format!("at most {CONNECTIONS_MAX} connections"));
            }
            (producers + consumers, producers)
        }
        Scenario::Mixed => {
            let connections = match (producers, consumers, connections) {
                (Some(producers), Some(consumers), _) => producers + consumers,
                (_, _, Some(connections)) => connections,
                _ => 16,
            };
            let producers = match (producers, consumers) {
                (Some(producers), _) => producers,
                (None, Some(consumers)) => connections.saturating_sub(consumers),
                (None, None) => connections / 2,
            };
            if producers == 0 || producers >= connections {
                return Err("mixed needs at least one producer and one consumer".to_string());
            }
            (connections, producers)
        }
        _ => {
            if autoscale_text.is_some() || slo.is_some() {
                return Err("--autoscale and --slo apply to --scenario workers".to_string());
            }
            if producers.is_some() || consumers.is_some() {
                return Err(
                    "--producers and --consumers apply to --scenario mixed and workers".to_string(),
                );
            }
            (connections.unwrap_or(16), 0)
        }
    };
    if refill && (!scenario.consumes() || scenario == Scenario::Workers) {
        return Err("--refill applies to get-delete, update and mixed".to_string());
    }
    let workers = if scenario == Scenario::Workers {
        let (poll_backoff_min_ns, poll_backoff_max_ns) =
            poll_backoff.unwrap_or(POLL_BACKOFF_NS_DEFAULT);
        Some(WorkerPlan {
            work_time: work_time.unwrap_or(WorkTime::Fixed { ns: 0 }),
            crash_ratio: crash_ratio.unwrap_or(0.0),
            poll_backoff_min_ns,
            poll_backoff_max_ns,
        })
    } else {
        if work_time.is_some() || crash_ratio.is_some() || poll_backoff.is_some() {
            return Err(
                "--work-time, --crash-rate and --poll-backoff apply to --scenario workers"
                    .to_string(),
            );
        }
        None
    };
    if queue_prefix.is_empty()
        || !queue_prefix
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
    {
        return Err("--queue-prefix must be lowercase letters, digits and -".to_string());
    }
    if plot_path.is_none() {
        plot_path = json_path
            .as_ref()
            .map(|path: &PathBuf| path.with_extension("svg"));
    }
    let simulation = match (simulate, sim_latency, sim_profile_azure, sim_server_rate) {
        (false, None, None, None) => None,
        (false, _, _, _) => {
            return Err(
                "--sim-latency, --sim-profile and --sim-server-rate apply to --simulate"
                    .to_string(),
            )
        }
        (true, latency, profile_azure, server_rate) => {
            if start_at.is_some() {
                return Err("--start-at: a simulated run has no wall-clock start".to_string());
            }
            let latency = latency.unwrap_or_default();
            Some(SimulationPlan {
                profile_azure: profile_azure.unwrap_or(false),
                server_rate_per_s: server_rate.unwrap_or(latency.server_rate_per_s),
                ..latency
            })
        }
    };
    let load = match rate_per_s {
        Some(rate_per_s) => LoadModel::Open {
            rate_per_s,
            arrival,
        },
        None => LoadModel::Closed,
    };
    Ok(Command::Run(Box::new(Options {
        target,
        api_version,
        cpus,
        runtime,
        connections,
        pipeline,
        scenario,
        producers,
        queues,
        queue_prefix,
        message_bytes,
        batch,
        visibility_timeout_s,
        preload,
        preload_timeout_ns,
        // A simulated run has no server to scrape.
        server_metrics: server_metrics && simulation.is_none(),
        refill,
        duration_ns,
        requests,
        warmup_ns,
        grace_ns,
        load,
        seed,
        json_path,
        hdr_log_path,
        plot_path,
        csv_path,
        html_path,
        max_error_ratio,
        quiet,
        retry,
        workers,
        steps,
        start_at,
        shape,
        autoscale,
        slo,
        simulation,
    })))
}

/// Walks a command line: each argument as a flag, and on request the flag's value, given
/// inline (`--flag=value`) or as the next argument.
struct Flags<I> {
    arguments: I,
    /// The value given inline with the last flag.
    inline_value: Option<String>,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// The next argument; a `--flag=value` yields `--flag` and keeps the value for `value`.
    fn next_flag(&mut self) -> Option<String> {
        let argument = self.arguments.next()?;
        match argument.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                self.inline_value = Some(value.to_string());
                Some(flag.to_string())
            }
            _ => {
                self.inline_value = None;
                Some(argument)
            }
        }
    }

    /// The value of `flag`.
    fn value(&mut self, flag: &str) -> Result<String, String> {
        self.inline_value
            .take()
            .or_else(|| self.arguments.next())
            .ok_or_else(|| format!("{flag} needs a value"))
    }
}

/// Parses `merge`'s arguments: input logs and output flags.
fn parse_merge(arguments: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut merge = MergeOptions {
        inputs: Vec::new(),
        json_path: None,
        plot_path: None,
        hdr_log_path: None,
        csv_path: None,
    };
    let mut flags = Flags {
        arguments,
        inline_value: None,
    };
    while let Some(flag) = flags.next_flag() {
        let mut value = || flags.value(&flag).map(PathBuf::from);
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--json" => merge.json_path = Some(value()?),
            "--plot" => merge.plot_path = Some(value()?),
            "--hdr-log" => merge.hdr_log_path = Some(value()?),
            "--csv" => merge.csv_path = Some(value()?),
            other if other.starts_with('-') => {
                return Err(format!("merge: unknown option {other} (see --help)"))
            }
            _ => merge.inputs.push(PathBuf::from(flag)),
        }
    }
    if merge.inputs.is_empty() {
        return Err("merge needs at least one interval log".to_string());
    }
    Ok(Command::Merge(merge))
}

/// Parses `--start-at`: seconds since the Unix epoch, fractions allowed.
fn parse_start_at(text: &str) -> Result<SystemTime, String> {
    let seconds: f64 = text
        .parse()
        .ok()
        .filter(|seconds: &f64| seconds.is_finite() && *seconds >= 0.0 && *seconds < 1e11)
        .ok_or_else(|| {
            format!("--start-at {text}: expected seconds since 1970, e.g. $(date +%s)")
        })?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(seconds))
}

/// The queue names of a run: `<prefix>-<i>`.
pub fn queue_names(options: &Options) -> Vec<String> {
    (0..options.queues)
        .map(|index| format!("{}-{index}", options.queue_prefix))
        .collect()
}

/// Parses `0,2,4-7`.
fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let parse = |cpu: &str| {
            cpu.trim()
                .parse::<usize>()
                .map_err(|_| format!("--cpus {text}: expected e.g. 0,2,4-7"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (parse(first)?, parse(last)?);
                if first > last || last - first > 1024 {
                    return Err(format!("--cpus {text}: bad range {part}"));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(parse(part)?),
        }
    }
    if cpus.is_empty() {
        return Err("--cpus needs at least one CPU".to_string());
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::DEVELOPMENT_ENDPOINT;

    fn run(arguments: &[&str]) -> Result<Options, String> {
        match parse(arguments.iter().map(|argument| argument.to_string()))? {
            Command::Run(options) => Ok(*options),
            Command::Merge(_) => Err("merge".to_string()),
            Command::Sweep(_) => Err("sweep".to_string()),
            Command::Help => Err("help".to_string()),
        }
    }

    #[test]
    fn simulation_flags() {
        let options = run(&[
            "--simulate",
            "--sim-latency",
            "1ms",
            "--sim-profile",
            "azure",
        ])
        .unwrap();
        let simulation = options.simulation.unwrap();
        assert!(simulation.profile_azure);
        assert_eq!(simulation.latency_source, "1ms");
        assert_eq!(
            run(&["--simulate"]).unwrap().simulation,
            Some(Default::default())
        );
        assert_eq!(run(&[]).unwrap().simulation, None);
        for bad in [
            &["--sim-latency", "1ms"][..],
            &["--sim-profile", "azure"],
            &["--simulate", "--sim-profile", "aws"],
            &["--simulate", "--sim-latency", "fast"],
            &["--simulate", "--start-at", "2000000000"],
        ] {
            assert!(run(bad).is_err(), "{bad:?}");
        }
        // A sweep is a command of its own, whose every point must parse.
        let sweep = |arguments: &[&str]| parse(arguments.iter().map(|a| a.to_string()));
        assert!(matches!(
            sweep(&["--sweep", "consumers=1,2", "--scenario", "workers"]),
            Ok(Command::Sweep(_))
        ));
        let error = sweep(&["--sweep", "consumers=1,x", "--scenario", "workers"]).unwrap_err();
        assert!(error.starts_with("--sweep at consumers=x: "), "{error}");
    }

    #[test]
    fn the_grace_defaults_to_ten_seconds_and_is_at_most_an_hour() {
        assert_eq!(run(&[]).unwrap().grace_ns, GRACE_NS_DEFAULT);
        assert_eq!(run(&["--grace", "0s"]).unwrap().grace_ns, 0);
        assert_eq!(run(&["--grace", "1h"]).unwrap().grace_ns, GRACE_NS_MAX);
        let error = run(&["--grace", "61m"]).unwrap_err();
        assert_eq!(error, "--grace must be at most an hour");
        assert!(run(&["--grace", "soon"]).is_err());
    }

    #[test]
    fn backlog_flags() {
        let options = run(&["--preload", "20000", "--preload-timeout", "90s"]).unwrap();
        assert_eq!(options.preload, 20_000);
        assert_eq!(options.preload_timeout_ns, 90 * NANOSECONDS_PER_SECOND);
        assert!(options.server_metrics);
        let defaults = run(&[]).unwrap();
        assert_eq!(defaults.preload_timeout_ns, PRELOAD_TIMEOUT_NS_DEFAULT);
        assert!(!run(&["--server-metrics", "off"]).unwrap().server_metrics);
        assert!(run(&["--server-metrics=auto"]).unwrap().server_metrics);
        // A simulation has no server to scrape.
        assert!(!run(&["--simulate"]).unwrap().server_metrics);
        for bad in [
            &["--preload", "10000001"][..],
            &["--preload-timeout", "0s"],
            &["--preload-timeout", "25h"],
            &["--preload-timeout", "soon"],
            &["--server-metrics", "on"],
        ] {
            assert!(run(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults() {
        let options = run(&[]).unwrap();
        assert_eq!(options.scenario, Scenario::Put);
        assert_eq!(options.duration_ns, Some(10 * NANOSECONDS_PER_SECOND));
        assert_eq!(options.warmup_ns, 2 * NANOSECONDS_PER_SECOND);
        assert_eq!(options.load, LoadModel::Closed);
        assert_eq!(options.message_bytes, 1024);
        assert_eq!(options.connections, 16);
        assert_eq!(options.runtime, RuntimeChoice::Portable);
        assert_eq!(options.max_error_ratio, 0.01);
        assert_eq!(options.target.endpoint, None);
        assert_eq!(queue_names(&options), vec!["azqload-0".to_string()]);
        assert!(USAGE.contains(DEVELOPMENT_ENDPOINT));
    }

    #[test]
    fn a_full_command_line() {
        let options = run(&[
            "--scenario=mixed",
            "--producers",
            "3",
            "--consumers",
            "5",
            "--rate",
            "2000",
            "--arrival",
            "poisson",
            "--duration",
            "1.5s",
            "--warmup",
            "250ms",
            "--batch",
            "32",
            "--cpus",
            "1,3-4",
            "--max-error-rate",
            "5%",
            "--queues",
            "4",
            "--queue-prefix",
            "bench",
            "--runtime",
            "portable",
        ])
        .unwrap();
        assert_eq!(options.scenario, Scenario::Mixed);
        assert_eq!(options.runtime, RuntimeChoice::Portable);
        assert_eq!((options.connections, options.producers), (8, 3));
        assert_eq!(
            options.load,
            LoadModel::Open {
                rate_per_s: 2000.0,
                arrival: Arrival::Poisson
            }
        );
        assert_eq!(options.duration_ns, Some(1_500_000_000));
        assert_eq!(options.warmup_ns, 250_000_000);
        assert_eq!(options.cpus, Some(vec![1, 3, 4]));
        assert!((options.max_error_ratio - 0.05).abs() < 1e-12);
        assert_eq!(queue_names(&options)[3], "bench-3");
        assert_eq!(options.plot_path, None);
    }

    #[test]
    fn the_plot_goes_beside_the_json_unless_named() {
        let options = run(&["--json", "runs/out.json"]).unwrap();
        assert_eq!(options.plot_path, Some(PathBuf::from("runs/out.svg")));
        let options = run(&["--json", "out.json", "--plot", "latency.svg"]).unwrap();
        assert_eq!(options.plot_path, Some(PathBuf::from("latency.svg")));
    }

    #[test]
    fn refusals() {
        for arguments in [
            &["--batch", "33"][..],
            &["--batch", "0"],
            &["--message-bytes", "15"],
            &["--message-bytes", "65537"],
            &["--duration", "10s", "--requests", "5"],
            &["--duration", "0s"],
            &["--duration", "ten"],
            &["--rate", "0"],
            &["--rate", "-5"],
            &["--arrival", "bursty"],
            &["--scenario", "delete"],
            &[
                "--scenario",
                "mixed",
                "--producers",
                "0",
                "--consumers",
                "2",
            ],
            &["--scenario", "mixed", "--connections", "1"],
            &["--producers", "2"],
            &["--refill"],
            &["--queue-prefix", "Upper"],
            &["--cpus", ""],
            &["--max-error-rate", "150%"],
            &["--connections"],
            &["--frobnicate"],
            &["--scenario", "workers", "--consumers", "0"],
            &["--scenario", "workers", "--producers", "0"],
            &["--scenario", "workers", "--refill"],
            &["--work-time", "10ms"],
            &["--crash-rate", "1%"],
            &["--poll-backoff", "1s..2s"],
            &["--scenario", "workers", "--crash-rate", "101%"],
            &["--retry", "linear"],
            &["--rate-steps", "100", "--find-max", "p99=1ms"],
            &["--rate-steps", "100", "--rate", "5"],
            &["--find-max", "p99=1ms", "--duration", "5s"],
            &["--step-duration", "5s"],
            &["--find-max-start", "10"],
            &["--start-at", "yesterday"],
            &["--runtime", "epoll"],
            &["--shape", "step:1,2@1s", "--rate", "5"],
            &["--shape", "step:1,2@1s", "--rate-steps", "5"],
            &["--shape", "step:1,2@1s", "--requests", "5"],
            &["--shape", "wave:1"],
            &["--autoscale", "keda"],
            &["--slo", "e2e-p99=60s"],
            &["--scenario", "workers", "--autoscale", "speed=1"],
            &[
                "--scenario",
                "workers",
                "--autoscale",
                "keda",
                "--queues",
                "2",
            ],
            &["--scenario", "workers", "--slo", "p99=60s"],
            &["--shape", "spike:base=1,peak=2,at=1s"],
            &[
                "--scenario",
                "workers",
                "--producers",
                "0",
                "--preload",
                "5",
                "--shape",
                "step:1",
            ],
        ] {
            assert!(run(arguments).is_err(), "{arguments:?} should be refused");
        }
        assert_eq!(run(&["--help"]), Err("help".to_string()));
    }

    #[test]
    fn a_workers_command_line() {
        let options = run(&[
            "--scenario",
            "workers",
            "--consumers",
            "8",
            "--rate",
            "500",
            "--work-time",
            "lognormal:p50=20ms,p99=200ms",
            "--crash-rate",
            "0.5%",
            "--poll-backoff",
            "50ms..2s",
            "--retry",
            "exponential:max=4,base=100ms",
            "--csv",
            "timeline.csv",
            "--html",
            "report.html",
            "--start-at",
            "1795305600.5",
        ])
        .unwrap();
        assert_eq!((options.connections, options.producers), (9, 1));
        let workers = options.workers.unwrap();
        assert_eq!(workers.crash_ratio, 0.005);
        assert_eq!(
            (workers.poll_backoff_min_ns, workers.poll_backoff_max_ns),
            (50_000_000, 2_000_000_000)
        );
        assert_eq!(options.retry.unwrap().retries_max, 4);
        assert_eq!(options.csv_path, Some(PathBuf::from("timeline.csv")));
        assert_eq!(options.html_path, Some(PathBuf::from("report.html")));
        assert_eq!(
            options.start_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_305_600_500))
        );
        // Without producers, a preload feeds the workers.
        let drain = run(&[
            "--scenario",
            "workers",
            "--producers",
            "0",
            "--preload",
            "10",
        ]);
        assert_eq!(drain.unwrap().connections, WORKERS_DEFAULT);
    }

    #[test]
    fn stepped_command_lines() {
        let options = run(&["--rate-steps", "100,200", "--step-duration", "3s"]).unwrap();
        assert_eq!(options.steps, Some(StepPlan::Rates(vec![100.0, 200.0])));
        assert_eq!(options.duration_ns, Some(3 * NANOSECONDS_PER_SECOND));
        assert!(matches!(options.load, LoadModel::Open { .. }));
        let options = run(&["--find-max", "p99.9=5ms", "--find-max-start", "1000"]).unwrap();
        let Some(StepPlan::FindMax(search)) = options.steps else {
            panic!("{:?}", options.steps);
        };
        assert_eq!(search.bound.percentile, "p999");
        assert_eq!(search.start_rate_per_s, 1000.0);
        assert_eq!(search.precision, FIND_MAX_PRECISION_DEFAULT);
        assert_eq!(options.duration_ns, Some(10 * NANOSECONDS_PER_SECOND));
    }

    #[test]
    fn shaped_command_lines() {
        let options = run(&["--shape", "step:100/s,300/s@5s", "--arrival", "poisson"]).unwrap();
        // 5 s at 100/s and 10 s at 300/s: the run lasts the last change plus 10 s.
        assert_eq!(options.duration_ns, Some(15 * NANOSECONDS_PER_SECOND));
        let LoadModel::Open {
            rate_per_s,
            arrival,
        } = options.load
        else {
            panic!("{:?}", options.load)
        };
        assert!((rate_per_s - 3500.0 / 15.0).abs() < 1e-9);
        assert_eq!(arrival, Arrival::Poisson);
        assert_eq!(options.shape.unwrap().0, "step:100/s,300/s@5s");
        let options = run(&[
            "--scenario",
            "workers",
            "--shape",
            "sine:min=1,max=3,period=2s",
            "--duration",
            "5s",
        ])
        .unwrap();
        assert_eq!(options.duration_ns, Some(5 * NANOSECONDS_PER_SECOND));
        let (_, shape) = options.shape.unwrap();
        // The sine was repeated to cover the run: at 5 s it is a period and a half in, at max.
        assert!((shape.target_rate_per_s(4.99, 5.01) - 3.0).abs() < 0.01);
    }

    #[test]
    fn autoscaled_command_lines() {
        let options = run(&[
            "--scenario",
            "workers",
            "--autoscale",
            "max=40,polling=5s",
            "--slo",
            "e2e-p99=60s",
        ])
        .unwrap();
        // One producer and 40 workers, the most the policy may ask for.
        assert_eq!((options.connections, options.producers), (41, 1));
        let policy = options.autoscale.unwrap();
        assert_eq!(policy.max_replicas, 40);
        assert_eq!(policy.polling_interval_ns, 5 * NANOSECONDS_PER_SECOND);
        assert_eq!(options.slo.unwrap().bound_us, 60_000_000);
        let options = run(&[
            "--scenario",
            "workers",
            "--consumers",
            "8",
            "--autoscale",
            "keda",
        ])
        .unwrap();
        assert_eq!(options.autoscale.unwrap().max_replicas, 8);
    }

    #[test]
    fn merge_command_lines() {
        let merge = parse(
            [
                "merge",
                "a.hlog",
                "b.hlog",
                "--json",
                "m.json",
                "--plot=m.svg",
            ]
            .iter()
            .map(|argument| argument.to_string()),
        )
        .unwrap();
        assert_eq!(
            merge,
            Command::Merge(MergeOptions {
                inputs: vec![PathBuf::from("a.hlog"), PathBuf::from("b.hlog")],
                json_path: Some(PathBuf::from("m.json")),
                plot_path: Some(PathBuf::from("m.svg")),
                hdr_log_path: None,
                csv_path: None,
            })
        );
        for bad in [&["merge"][..], &["merge", "a.hlog", "--rate", "5"]] {
            assert!(parse(bad.iter().map(|argument| argument.to_string())).is_err());
        }
    }
}

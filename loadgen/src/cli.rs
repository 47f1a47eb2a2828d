//! The command line: flags into a validated `Options`, with the usage text. Hand-written, like
//! azq's own, to keep the dependency list short; every limit is checked here so that the engine
//! can assert instead of validate.

use std::path::PathBuf;

use azq::config::{MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX, VISIBILITY_TIMEOUT_S_MAX};

use crate::endpoint::TargetArguments;
use crate::engine::PRELOAD_MESSAGES_MAX;
use crate::scenario::Scenario;
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::wire::{API_VERSION_DEFAULT, TIMESTAMP_DIGITS};

/// Requests one connection may have in flight.
pub const PIPELINE_MAX: usize = 256;
/// Connections one run may open.
pub const CONNECTIONS_MAX: usize = 65_536;
/// Queues one run may use.
pub const QUEUES_MAX: usize = 100_000;

pub const USAGE: &str = "\
azq-loadgen: load generator for Azure Queue Storage endpoints (azq, Azurite, Azure)

Usage: azq-loadgen [options]

Target
  --endpoint URL            queue endpoint (default http://127.0.0.1:10001/devstoreaccount1)
  --account NAME            account (default: from the URL, else devstoreaccount1)
  --key BASE64              account key (default: the development account's key)
  --connection-string TEXT  Azure Storage connection string (UseDevelopmentStorage=true works)
  --sas TOKEN               sign with a SAS token instead of SharedKey
  --api-version VERSION     x-ms-version sent (default 2021-12-02)

Engine
  --cpus LIST               CPUs to pin client cores to, e.g. 1 or 2,3 (default: all allowed)
  --connections N           keep-alive connections, spread over the cores (default 16)
  --pipeline N              requests in flight per connection (default 1)

Scenario
  --scenario NAME           put | get-delete | get | peek | update | mixed (default put);
                            get leaves messages leased (they return after --visibility-timeout)
  --producers N             mixed: connections that put (default: half)
  --consumers M             mixed: connections that get and delete (default: the rest)
  --queues N                queues named <prefix>-0 .. <prefix>-(N-1) (default 1)
  --queue-prefix TEXT       queue name prefix (default azqload); queues are created if missing
  --message-bytes N         message text size, 16..65536 (default 1024)
  --batch N                 numofmessages of gets and peeks, 1..32 (default 1)
  --visibility-timeout S    visibilitytimeout of gets and updates (default 30)
  --preload N               fill each queue to N messages before measuring (default 0)
  --refill                  consumers put a new message for each one they delete, so the
                            queues keep their preloaded depth (get-delete at a fixed depth)

Load
  --duration TIME           measured time, e.g. 10s, 500ms, 2m (default 10s)
  --requests N              instead of --duration: start N operations in total
  --warmup TIME             unmeasured time before measuring (default 2s)
  --rate R                  open loop: R operations/s in total (default: closed loop)
  --arrival KIND            open loop gaps: constant | poisson (default constant)
  --seed N                  seed of the poisson schedule (default 1)
                            (an open loop's cores poll rather than sleep between sends, for
                            punctual sends: pin them away from the server's CPUs)

Output
  --json FILE               write the results as JSON
  --hdr-log FILE            write an HdrHistogram interval log (one tag per operation)
  --plot FILE.svg           write latency percentiles (and, for consuming runs, throughput and
                            queue depth over time) as SVG (default with --json: beside the
                            JSON file, with the extension .svg)
  --max-error-rate R        exit 1 when errors/requests exceed R, e.g. 1% or 0.01 (default 1%)
  --quiet                   no progress line
  -h, --help                this text

Under --rate, R counts operations started by the schedule (puts, gets, peeks); the deletes and
updates that follow a get go out as soon as it answers. Latency is measured from each
operation's intended send time (corrected for coordinated omission) and, beside it, from its
actual send time.
";

/// A validated command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub target: TargetArguments,
    pub api_version: String,
    pub cpus: Option<Vec<usize>>,
    pub connections: usize,
    pub pipeline: usize,
    pub scenario: Scenario,
    /// For `mixed`: producing connections; the other `connections - producers` consume.
    pub producers: usize,
    pub queues: usize,
    pub queue_prefix: String,
    pub message_bytes: usize,
    pub batch: u32,
    pub visibility_timeout_s: u64,
    pub preload: u64,
    pub refill: bool,
    pub duration_ns: Option<u64>,
    pub requests: Option<u64>,
    pub warmup_ns: u64,
    pub load: LoadModel,
    pub seed: u64,
    pub json_path: Option<PathBuf>,
    pub hdr_log_path: Option<PathBuf>,
    pub plot_path: Option<PathBuf>,
    pub max_error_ratio: f64,
    pub quiet: bool,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Run(Box<Options>),
    Help,
}

/// Parses the arguments after the program name.
pub fn parse(arguments: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut target = TargetArguments::default();
    let mut api_version = API_VERSION_DEFAULT.to_string();
    let mut cpus = None;
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
    let mut refill = false;
    let mut duration_ns = None;
    let mut requests = None;
    let mut warmup_ns = 2 * NANOSECONDS_PER_SECOND;
    let mut rate_per_s = None;
    let mut arrival = Arrival::Constant;
    let mut seed = 1;
    let mut json_path = None;
    let mut hdr_log_path = None;
    let mut plot_path = None;
    let mut max_error_ratio = 0.01;
    let mut quiet = false;

    let mut arguments = arguments.into_iter();
    while let Some(argument) = arguments.next() {
        let (flag, inline_value) = match argument.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (argument, None),
        };
        let mut value = || {
            inline_value
                .clone()
                .or_else(|| arguments.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--quiet" => quiet = true,
            "--refill" => refill = true,
            "--endpoint" => target.endpoint = Some(value()?),
            "--account" => target.account = Some(value()?),
            "--key" => target.key = Some(value()?),
            "--connection-string" => target.connection_string = Some(value()?),
            "--sas" => target.sas = Some(value()?),
            "--api-version" => api_version = value()?,
            "--cpus" => cpus = Some(parse_cpu_list(&value()?)?),
            "--connections" => connections = Some(number(&flag, &value()?, 1, CONNECTIONS_MAX)?),
            "--pipeline" => pipeline = number(&flag, &value()?, 1, PIPELINE_MAX)?,
            "--scenario" => {
                let name = value()?;
                scenario = Scenario::parse(&name).ok_or_else(|| {
                    format!(
                        "--scenario {name}: expected put, get-delete, get, peek, update or mixed"
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
            "--duration" => duration_ns = Some(parse_duration_ns(&flag, &value()?)?),
            "--requests" => requests = Some(number(&flag, &value()?, 1, usize::MAX)? as u64),
            "--warmup" => warmup_ns = parse_duration_ns(&flag, &value()?)?,
            "--rate" => {
                let text = value()?;
                let rate: f64 = text
                    .parse()
                    .map_err(|_| format!("--rate {text}: not a number"))?;
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(format!("--rate {text}: must be positive"));
                }
                rate_per_s = Some(rate);
            }
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
            "--max-error-rate" => max_error_ratio = parse_ratio(&value()?)?,
            other => return Err(format!("unknown option {other} (see --help)")),
        }
    }

    if duration_ns.is_some() && requests.is_some() {
        return Err("give --duration or --requests, not both".to_string());
    }
    if requests.is_none() && duration_ns.is_none() {
        duration_ns = Some(10 * NANOSECONDS_PER_SECOND);
    }
    if duration_ns == Some(0) {
        return Err("--duration must be positive".to_string());
    }
    let (connections, producers) = match scenario {
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
            if producers.is_some() || consumers.is_some() {
                return Err("--producers and --consumers apply to --scenario mixed".to_string());
            }
            (connections.unwrap_or(16), 0)
        }
    };
    if refill && !scenario.consumes() {
        return Err("--refill applies to get-delete, update and mixed".to_string());
    }
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
        refill,
        duration_ns,
        requests,
        warmup_ns,
        load,
        seed,
        json_path,
        hdr_log_path,
        plot_path,
        max_error_ratio,
        quiet,
    })))
}

/// The queue names of a run: `<prefix>-<i>`.
pub fn queue_names(options: &Options) -> Vec<String> {
    (0..options.queues)
        .map(|index| format!("{}-{index}", options.queue_prefix))
        .collect()
}

/// Parses an integer in `minimum..=maximum`.
fn number(flag: &str, text: &str, minimum: usize, maximum: usize) -> Result<usize, String> {
    let value: usize = text
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{flag} {text}: not a whole number"))?;
    if !(minimum..=maximum).contains(&value) {
        return Err(format!(
            "{flag} {text}: must be between {minimum} and {maximum}"
        ));
    }
    Ok(value)
}

/// Parses `10s`, `500ms`, `2m`, `1.5s` or a bare number of seconds.
pub fn parse_duration_ns(flag: &str, text: &str) -> Result<u64, String> {
    let (number, unit_ns) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1e6)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1e9)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60e9)
    } else if let Some(number) = text.strip_suffix('h') {
        (number, 3600e9)
    } else {
        (text, 1e9)
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{flag} {text}: expected a time such as 10s, 500ms or 2m"))?;
    if !(value.is_finite() && value >= 0.0) || value * unit_ns > 1e9 * 86_400.0 * 365.0 {
        return Err(format!("{flag} {text}: out of range"));
    }
    Ok((value * unit_ns).round() as u64)
}

/// Parses `1%` or `0.01`.
fn parse_ratio(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number, 0.01),
        None => (text, 1.0),
    };
    let ratio = number
        .parse::<f64>()
        .map(|value| value * scale)
        .map_err(|_| format!("--max-error-rate {text}: expected e.g. 1% or 0.01"))?;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(format!(
            "--max-error-rate {text}: must be between 0 and 100%"
        ));
    }
    Ok(ratio)
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
            Command::Help => Err("help".to_string()),
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
        ])
        .unwrap();
        assert_eq!(options.scenario, Scenario::Mixed);
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
        ] {
            assert!(run(arguments).is_err(), "{arguments:?} should be refused");
        }
        assert_eq!(run(&["--help"]), Err("help".to_string()));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("-", "10s"), Ok(10_000_000_000));
        assert_eq!(parse_duration_ns("-", "500ms"), Ok(500_000_000));
        assert_eq!(parse_duration_ns("-", "2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("-", "3"), Ok(3_000_000_000));
        assert_eq!(parse_duration_ns("-", "0s"), Ok(0));
        assert!(parse_duration_ns("-", "1y").is_err());
    }
}

//! One run from start to end on the main thread: resolve the target, set up the queues, start
//! the cores, then gather their once-a-second reports into the totals, the time series, the
//! HdrHistogram interval log and the progress line, until every core has finished. A stepped
//! run (`--rate-steps`, `--find-max`) does this once per step, on the same queues and into one
//! log and one time series.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriter, IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::cli::{queue_names, Options};
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use azq::runtime::select::Selected;

use crate::endpoint::{self, TargetArguments};
use crate::engine::{self, CoreReport, RunPlan, ServiceModel, Simulated, INTERVAL_NS};
use crate::metrics::{CoreUsage, Measurements, PutCopyTally};
use crate::report::{
    progress_line, replica_series, server_series, DepthPoint, PreloadOutcome, RunSummary,
    ScalePoint, SearchOutcome, ServerPoint, StepResult, TimelinePoint,
};
use crate::runtime;
use crate::scenario::Operation;
use crate::schedule::{Arrival, LoadModel, RunShape, NANOSECONDS_PER_SECOND};
use crate::steps::{KneeSearch, StepPlan};
use crate::wire::mark::{PUT_MARK_DIGITS, TIMESTAMP_DIGITS};
use crate::wire::request::RequestSettings;

/// The interval log's tag for end-to-end message latency (the others are operation names).
pub const END_TO_END_TAG: &str = "end-to-end";

/// An interval log being written into memory.
type LogWriter<'a> = IntervalLogWriter<'a, 'a, Vec<u8>, V2DeflateSerializer>;

/// What a run produced.
pub struct RunOutcome {
    pub summary: RunSummary,
    /// The HdrHistogram interval log, when asked for.
    pub hdr_log: Option<Vec<u8>>,
}

/// Runs `options` to the end.
pub fn run(options: &Options) -> Result<RunOutcome, String> {
    // A simulated run talks to its own service, with the development account's key.
    let (endpoint, credentials) = match options.simulation {
        Some(_) => endpoint::resolve(&TargetArguments::default())?,
        None => endpoint::resolve(&options.target)?,
    };
    let simulation = match &options.simulation {
        Some(assumptions) => {
            let service = ServiceModel::new(
                DEVELOPMENT_ACCOUNT_NAME,
                DEVELOPMENT_ACCOUNT_KEY,
                options.seed,
                engine::VIRTUAL_EPOCH_US / 1000,
                assumptions.profile_azure,
            )?;
            Some(Arc::new(Simulated::new(assumptions.clone(), service)))
        }
        None => None,
    };
    let cpus = match simulation {
        // Virtual time runs on no client core.
        Some(_) => Vec::new(),
        None => options
            .cpus
            .clone()
            .unwrap_or_else(azq::machine::allowed_cpus),
    };
    let plan = RunPlan {
        backend: match simulation {
            // No event loop runs: the portable backend, unprobed, stands for none.
            Some(_) => Selected::Portable,
            None => runtime::select(options.runtime)?,
        },
        endpoint,
        credentials,
        settings: RequestSettings {
            queue_names: queue_names(options),
            message_bytes: options.message_bytes,
            batch: options.batch,
            visibility_timeout_s: options.visibility_timeout_s,
            api_version: options.api_version.clone(),
            put_mark_nonce: put_mark_nonce(),
        },
        scenario: options.scenario,
        cpus,
        cpus_pinned: options.cpus.is_some(),
        connections: options.connections,
        pipeline: options.pipeline,
        producers: options.producers,
        load: options.load,
        shape: options
            .shape
            .as_ref()
            .map(|(_, shape)| Arc::new(RunShape::new(shape, options.warmup_ns))),
        warmup_ns: options.warmup_ns,
        duration_ns: options.duration_ns,
        grace_ns: options.grace_ns,
        requests: options.requests,
        preload: options.preload,
        preload_timeout_ns: options.preload_timeout_ns,
        server_metrics: options.server_metrics,
        refill: options.refill,
        seed: options.seed,
        retry: options.retry,
        workers: options.workers,
        autoscale: options.autoscale.clone(),
        // The fleet starts at its minimum; the controller moves it.
        replicas_ready: Arc::new(std::sync::atomic::AtomicUsize::new(
            options
                .autoscale
                .as_ref()
                .map_or(0, |policy| policy.min_replicas),
        )),
        simulation,
    };
    let setup = match &plan.simulation {
        Some(simulated) => engine::set_up_simulated(&plan, simulated)?,
        None => engine::set_up(&plan, !options.quiet)?,
    };
    let preload = (plan.preload > 0).then(|| PreloadOutcome {
        target_per_queue: plan.preload,
        found: setup.found.iter().sum(),
        put: setup.put(),
        elapsed_s: setup.preload_elapsed.as_secs_f64(),
    });
    if !options.quiet {
        eprintln!(
            "azq-loadgen: {} queue(s) ready at {} ({} messages in total)",
            setup.depths.len(),
            plan.endpoint.address,
            setup.depths.iter().sum::<u64>()
        );
        if let Some(preload) = &preload {
            eprintln!(
                "azq-loadgen: preload put {} messages in {:.1} s ({} were there)",
                preload.put, preload.elapsed_s, preload.found
            );
        }
    }
    let mut log_output = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut log = Log {
        wanted: options.hdr_log_path.is_some(),
        writer: None,
        base: SystemTime::UNIX_EPOCH,
    };
    let mut runner = StepRunner {
        options,
        log: &mut log,
        log_output: Some(&mut log_output),
        serializer: Some(&mut serializer),
        start_at: options.start_at,
        timeline: Vec::new(),
        depth: Vec::new(),
        server: Vec::new(),
    };
    let mut summary = match &options.steps {
        None => runner.run_step(&plan)?,
        Some(steps) => run_steps(&mut runner, &plan, steps)?,
    };
    summary.preload = preload;
    drop(runner);
    let wanted = log.wanted;
    drop(log);
    Ok(RunOutcome {
        summary,
        hdr_log: wanted.then_some(log_output),
    })
}

/// A nonce for one run's (or step's) put marks: from the clock, so that runs with the same
/// `--seed`, and loadgens started together, still differ.
fn put_mark_nonce() -> u32 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    azq::random::mix64(now.as_nanos() as u64 ^ u64::from(std::process::id())) as u32
}

/// The interval log of a run: created when the first step starts, its timestamps relative to
/// that start (`base`).
struct Log<'a> {
    wanted: bool,
    writer: Option<LogWriter<'a>>,
    /// The first step's start: run time zero of every step's series, log or not (the epoch
    /// until the first step starts).
    base: SystemTime,
}

/// Runs the steps of one run in turn, into one log and one time series.
struct StepRunner<'o, 'l, 'a> {
    options: &'o Options,
    log: &'l mut Log<'a>,
    /// Lent to the log writer when the first step starts.
    log_output: Option<&'a mut Vec<u8>>,
    serializer: Option<&'a mut V2DeflateSerializer>,
    /// Run time zero of the first step, by the wall clock (`--start-at`).
    start_at: Option<SystemTime>,
    /// Every step's time series, on the first step's clock.
    timeline: Vec<TimelinePoint>,
    depth: Vec<DepthPoint>,
    server: Vec<ServerPoint>,
}

impl StepRunner<'_, '_, '_> {
    /// Runs one step (or the whole of an unstepped run) with `plan` and summarises it; its
    /// time series is added to the run's.
    fn run_step(&mut self, plan: &RunPlan) -> Result<RunSummary, String> {
        let options = self.options;
        let plan = Arc::new(plan.clone());
        let engine::Started {
            reports,
            executors,
            start_wall_clock,
        } = match plan.simulation {
            Some(_) => engine::start_simulated(plan.clone())?,
            None => engine::start(plan.clone(), self.start_at.take())?,
        };
        if self.log.base == SystemTime::UNIX_EPOCH {
            self.log.base = start_wall_clock;
        }
        if self.log.wanted && self.log.writer.is_none() {
            let (Some(output), Some(serializer)) = (self.log_output.take(), self.serializer.take())
            else {
                unreachable!("the log is created once");
            };
            let writer = IntervalLogWriterBuilder::new()
                .add_comment(
                    "azq-loadgen interval log: corrected latency in microseconds, one tag per \
                     operation (end-to-end: message latency)",
                )
                .with_start_time(start_wall_clock)
                .with_base_time(start_wall_clock)
                .with_max_value_divisor(1000.0)
                .begin_log_with(output, serializer)
                .map_err(|error| error.to_string())?;
            self.log.writer = Some(writer);
        }
        let offset = start_wall_clock
            .duration_since(self.log.base)
            .unwrap_or_default();
        let collected = collect(
            &plan,
            reports,
            options.quiet,
            self.log.writer.as_mut().map(|writer| (writer, offset)),
        );
        for executor in executors {
            executor
                .join()
                .map_err(|error| format!("a client core failed: {error}"))?;
        }
        let collected = collected?;
        let duration_ns = match plan.duration_ns {
            Some(duration) => duration,
            None => collected.last_answer_ns.saturating_sub(plan.warmup_ns),
        };
        let offset_s = offset.as_secs_f64();
        let step_rate = match plan.load {
            LoadModel::Open { rate_per_s, .. } if options.steps.is_some() => Some(rate_per_s),
            _ => None,
        };
        // A shaped run's target is the shape's mean rate over each interval (shape time is
        // run time less the warm-up).
        let mut collected = collected;
        if let Some((_, shape)) = &options.shape {
            let warmup_s = seconds(plan.warmup_ns);
            for point in &mut collected.timeline {
                let end_s = point.end_s - warmup_s;
                // To the thousandth of a message a second, as the reports round rates.
                let target = shape.target_rate_per_s(end_s - point.interval_s, end_s);
                point.step_rate_per_s = Some((target * 1000.0).round() / 1000.0);
            }
        }
        self.timeline
            .extend(collected.timeline.iter().map(|point| TimelinePoint {
                end_s: point.end_s + offset_s,
                step_rate_per_s: step_rate,
                ..point.clone()
            }));
        self.depth
            .extend(collected.depth.iter().map(|point| DepthPoint {
                at_s: point.at_s + offset_s,
                ..*point
            }));
        self.server
            .extend(collected.server.iter().map(|point| ServerPoint {
                at_s: point.at_s + offset_s,
                ..*point
            }));
        let mut series = replica_series(
            &collected.scale,
            seconds(collected.last_answer_ns.max(plan.warmup_ns + duration_ns)),
        );
        series.extend(server_series(&collected.server));
        Ok(RunSummary {
            scenario: plan.scenario,
            load: plan.load,
            shape: options.shape.as_ref().map(|(text, _)| text.clone()),
            connections: plan.connections,
            pipeline: plan.pipeline,
            cpus: plan.cpus.clone(),
            runtime: match plan.simulation {
                Some(_) => "simulated",
                None => plan.backend.name(),
            },
            simulation: plan
                .simulation
                .as_ref()
                .map(|simulated| simulated.plan.describe()),
            queues: plan.settings.queue_names.len(),
            message_bytes: plan.settings.message_bytes,
            batch: plan.settings.batch,
            refill: plan.refill,
            warmup_s: seconds(plan.warmup_ns),
            grace_s: seconds(plan.grace_ns),
            duration_s: seconds(duration_ns),
            last_answer_s: seconds(collected.last_answer_ns),
            start_unix_s: start_wall_clock
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |since| since.as_secs_f64()),
            total: collected.total,
            timeline: collected.timeline,
            depth: collected.depth,
            preload: None,
            // The autoscaler's replicas and the server's metrics, drawn and written as the
            // reports' generic series.
            series,
            client_cores: collected.client_cores,
            max_error_ratio: options.max_error_ratio,
            retry: plan.retry,
            workers: plan.workers,
            worker_lanes: match plan.scenario {
                crate::scenario::Scenario::Workers => {
                    (plan.connections - plan.producers) * plan.pipeline
                }
                _ => 0,
            },
            duplicates_from_retried_puts: (plan.workers.is_some()
                && plan.settings.message_bytes >= TIMESTAMP_DIGITS + PUT_MARK_DIGITS)
                .then(|| collected.put_copies.duplicates()),
            steps: Vec::new(),
            search: None,
            autoscale: plan.autoscale.clone(),
            scale: collected.scale,
            slo: options.slo,
        })
    }
}

/// Runs every step of `steps` and returns the summary of the step that answers the question:
/// the last of `--rate-steps`, the knee of `--find-max` (or, with no knee, the last step), with
/// every step's result and the whole run's time series.
fn run_steps(
    runner: &mut StepRunner<'_, '_, '_>,
    plan: &RunPlan,
    steps: &StepPlan,
) -> Result<RunSummary, String> {
    let options = runner.options;
    let arrival = match options.load {
        LoadModel::Open { arrival, .. } => arrival,
        LoadModel::Closed => Arrival::Constant,
    };
    let mut results = Vec::new();
    let mut summaries: Vec<RunSummary> = Vec::new();
    let step_at = |runner: &mut StepRunner<'_, '_, '_>, rate_per_s: f64| {
        let mut step_plan = plan.clone();
        step_plan.load = LoadModel::Open {
            rate_per_s,
            arrival,
        };
        // Each step's tally is its own: copies left from earlier steps are not its puts.
        step_plan.settings.put_mark_nonce = put_mark_nonce();
        if !options.quiet {
            eprintln!("azq-loadgen: step at {rate_per_s} ops/s");
        }
        runner.run_step(&step_plan)
    };
    let search = match steps {
        StepPlan::Rates(rates) => {
            for &rate in rates {
                let summary = step_at(runner, rate)?;
                results.push(StepResult::of(
                    rate,
                    summary.achieved_rate_per_s(),
                    &summary.total,
                    None,
                ));
                summaries.push(summary);
            }
            None
        }
        StepPlan::FindMax(settings) => {
            let mut search = KneeSearch::new(*settings);
            while let Some(rate) = search.next_rate() {
                let summary = step_at(runner, rate)?;
                let result = StepResult::of(
                    rate,
                    summary.achieved_rate_per_s(),
                    &summary.total,
                    Some((&settings.bound, options.max_error_ratio)),
                );
                search.record(rate, result.passed == Some(true));
                if !options.quiet {
                    eprintln!(
                        "azq-loadgen: {rate} ops/s {}",
                        if result.passed == Some(true) {
                            "passed"
                        } else {
                            "failed"
                        }
                    );
                }
                results.push(result);
                summaries.push(summary);
            }
            Some(SearchOutcome {
                bound: settings.bound,
                knee_rate_per_s: search.knee(),
            })
        }
    };
    let reference = search
        .as_ref()
        .and_then(|search| search.knee_rate_per_s)
        .and_then(|knee| {
            results
                .iter()
                .position(|result| result.target_rate_per_s == knee)
        })
        .unwrap_or(summaries.len().saturating_sub(1));
    let Some(mut summary) = summaries.into_iter().nth(reference) else {
        return Err("no step ran".to_string());
    };
    summary.steps = results;
    summary.search = search;
    summary.timeline = std::mem::take(&mut runner.timeline);
    summary.depth = std::mem::take(&mut runner.depth);
    // The server's series over every step, as the depth, in place of the step's own.
    let server = server_series(&runner.server);
    summary
        .series
        .retain(|series| !server.iter().any(|own| own.name == series.name));
    summary.series.extend(server);
    Ok(summary)
}

fn seconds(nanoseconds: u64) -> f64 {
    nanoseconds as f64 / NANOSECONDS_PER_SECOND as f64
}

/// What the main thread gathered.
struct Collected {
    total: Measurements,
    /// The copies of puts the workers received, from every interval.
    put_copies: PutCopyTally,
    timeline: Vec<TimelinePoint>,
    depth: Vec<DepthPoint>,
    server: Vec<ServerPoint>,
    scale: Vec<ScalePoint>,
    last_answer_ns: u64,
    client_cores: Vec<CoreUsage>,
}

/// Receives reports until every core has finished. An interval is closed (merged, logged,
/// printed) once every core has reported it or finished. `log` takes each closed interval's
/// histograms, stamped `offset` plus the interval's run time.
fn collect(
    plan: &RunPlan,
    reports: Receiver<CoreReport>,
    quiet: bool,
    mut log: Option<(&mut LogWriter<'_>, Duration)>,
) -> Result<Collected, String> {
    // A simulation reports as one core.
    let cores = match plan.simulation {
        Some(_) => 1,
        None => plan.cpus.len(),
    };
    let mut reported_through: Vec<Option<u64>> = vec![None; cores];
    let mut finished = vec![false; cores];
    let mut pending: BTreeMap<u64, Measurements> = BTreeMap::new();
    let mut collected = Collected {
        total: Measurements::default(),
        put_copies: PutCopyTally::default(),
        timeline: Vec::new(),
        depth: Vec::new(),
        server: Vec::new(),
        scale: Vec::new(),
        last_answer_ns: 0,
        client_cores: Vec::new(),
    };
    while !finished.iter().all(|&done| done) {
        let report = reports
            .recv()
            .map_err(|_| "a client core stopped without finishing".to_string())?;
        match report {
            CoreReport::Interval {
                core,
                index,
                measurements,
            } => {
                pending.entry(index).or_default().merge(&measurements);
                reported_through[core] = Some(index);
            }
            CoreReport::Depth { at_ns, messages } => collected.depth.push(DepthPoint {
                at_s: seconds(at_ns),
                messages,
            }),
            CoreReport::Server { at_ns, metrics } => collected.server.push(ServerPoint {
                at_s: seconds(at_ns),
                metrics,
            }),
            CoreReport::Scale(engine::ScaleReport {
                at_ns,
                observed,
                desired,
                ready,
            }) => collected.scale.push(ScalePoint {
                at_s: seconds(at_ns),
                observed,
                desired,
                ready,
            }),
            CoreReport::Finished {
                core,
                index,
                measurements,
                last_answer_ns,
                usage,
            } => {
                collected.client_cores.extend(usage);
                pending.entry(index).or_default().merge(&measurements);
                finished[core] = true;
                collected.last_answer_ns = collected.last_answer_ns.max(last_answer_ns);
            }
            CoreReport::Failed { core, reason } => {
                return Err(format!("client core {core} failed: {reason}"))
            }
        }
        // Close every interval all cores are done with.
        while let Some((&index, _)) = pending.first_key_value() {
            let complete = (0..cores).all(|core| {
                finished[core] || reported_through[core].is_some_and(|last| last >= index)
            });
            if !complete {
                break;
            }
            let Some(mut measurements) = pending.remove(&index) else {
                break;
            };
            for mark in measurements.deliveries.drain(..) {
                collected.put_copies.add(mark);
            }
            let start_ns = index * INTERVAL_NS;
            let all_finished = finished.iter().all(|&done| done);
            // The last interval ends with the last answer, not a full second later.
            let end_ns = if all_finished {
                (start_ns + INTERVAL_NS).min(collected.last_answer_ns.max(start_ns + 1))
            } else {
                start_ns + INTERVAL_NS
            };
            let interval_s = seconds(end_ns - start_ns);
            if let Some((writer, offset)) = log.as_mut() {
                let tagged = Operation::ALL
                    .iter()
                    .map(|&operation| {
                        let histogram = &measurements.operation(operation).latency_us;
                        (operation.name(), histogram)
                    })
                    .chain([(END_TO_END_TAG, &measurements.end_to_end_us)]);
                for (tag, histogram) in tagged {
                    if histogram.is_empty() {
                        continue;
                    }
                    writer
                        .write_histogram(
                            histogram,
                            *offset + Duration::from_nanos(start_ns),
                            Duration::from_nanos(end_ns - start_ns),
                            Tag::new(tag),
                        )
                        .map_err(|error| format!("--hdr-log: {error}"))?;
                }
            }
            // Points after the measured window hold only the answers still in flight at its
            // end: they are in the totals but would draw a misleading spike.
            let measured_end_ns = plan
                .duration_ns
                .map_or(u64::MAX, |duration| plan.warmup_ns + duration);
            if end_ns > plan.warmup_ns && start_ns < measured_end_ns {
                collected.timeline.push(TimelinePoint::of(
                    seconds(end_ns),
                    interval_s,
                    &measurements,
                ));
            }
            collected.total.merge(&measurements);
            // The drain after the end is a sliver of an interval: its rate would mislead.
            if !quiet && start_ns < measured_end_ns {
                eprintln!(
                    "{}",
                    progress_line(
                        seconds(end_ns),
                        end_ns <= plan.warmup_ns,
                        measurements.requests() + measurements.warmup_requests,
                        interval_s,
                        &collected.total,
                    )
                );
            }
        }
    }
    Ok(collected)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    use super::*;
    use crate::scenario::Scenario;
    use crate::schedule::LoadModel;

    const SECOND: u64 = NANOSECONDS_PER_SECOND;

    fn plan() -> RunPlan {
        crate::engine::tests::plan(Scenario::Put, LoadModel::Closed)
    }

    fn puts(count: u64, latency_us: u64) -> Box<Measurements> {
        let mut measurements = Measurements::default();
        for _ in 0..count {
            measurements
                .operation_mut(Operation::Put)
                .record_success(latency_us, latency_us);
        }
        Box::new(measurements)
    }

    /// Two cores report out of step; each interval is closed once both are done with it, the
    /// warm-up and the drain after the end stay out of the time series, and every measured
    /// interval lands in the HdrHistogram log.
    #[test]
    fn intervals_are_merged_across_cores_into_totals_series_and_log() {
        let (sender, receiver) = sync_channel(32);
        let warmup = Measurements {
            warmup_requests: 5,
            ..Measurements::default()
        };
        let reports = [
            CoreReport::Interval {
                core: 0,
                index: 0,
                measurements: Box::new(warmup),
            },
            CoreReport::Depth {
                at_ns: 0,
                messages: 0,
            },
            CoreReport::Interval {
                core: 0,
                index: 1,
                measurements: puts(10, 100),
            },
            CoreReport::Interval {
                core: 1,
                index: 0,
                measurements: puts(0, 0),
            },
            CoreReport::Interval {
                core: 1,
                index: 1,
                measurements: puts(20, 200),
            },
            CoreReport::Interval {
                core: 1,
                index: 2,
                measurements: puts(3, 300),
            },
            CoreReport::Finished {
                core: 0,
                index: 2,
                measurements: puts(1, 400),
                last_answer_ns: 3 * SECOND - 5,
                usage: None,
            },
            CoreReport::Finished {
                core: 1,
                index: 3,
                measurements: puts(1, 500),
                last_answer_ns: 3 * SECOND + 100,
                usage: Some(CoreUsage {
                    cpu: 1,
                    elapsed_ns: 3 * SECOND,
                    running_ns: SECOND,
                    waiting_ns: 0,
                }),
            },
        ];
        for report in reports {
            sender.send(report).unwrap();
        }
        drop(sender);
        let mut log = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        let mut writer = IntervalLogWriterBuilder::new()
            .with_base_time(SystemTime::UNIX_EPOCH)
            .begin_log_with(&mut log, &mut serializer)
            .unwrap();
        let collected = collect(
            &plan(),
            receiver,
            true,
            Some((&mut writer, Duration::from_secs(100))),
        )
        .unwrap();
        drop(writer);

        assert_eq!(collected.total.operation(Operation::Put).count, 35);
        assert_eq!(collected.total.warmup_requests, 5);
        assert_eq!(
            collected.total.operation(Operation::Put).latency_us.max(),
            500
        );
        assert_eq!(collected.last_answer_ns, 3 * SECOND + 100);
        assert_eq!(collected.depth.len(), 1);
        assert_eq!(collected.client_cores.len(), 1);
        let put_rates: Vec<(f64, f64)> = collected
            .timeline
            .iter()
            .map(|point| (point.end_s, point.operations_per_s[Operation::Put.index()]))
            .collect();
        assert_eq!(put_rates, vec![(2.0, 30.0), (3.0, 4.0)]);

        let logged: Vec<(f64, u64)> = IntervalLogIterator::new(&log)
            .filter_map(|entry| match entry {
                Ok(LogEntry::Interval(interval)) => {
                    assert_eq!(interval.tag().map(|tag| tag.as_str()), Some("put"));
                    let histogram: hdrhistogram::Histogram<u64> =
                        hdrhistogram::serialization::Deserializer::new()
                            .deserialize(&mut std::io::Cursor::new(
                                BASE64.decode(interval.encoded_histogram()).unwrap(),
                            ))
                            .unwrap();
                    Some((interval.start_timestamp().as_secs_f64(), histogram.len()))
                }
                Ok(_) => None,
                Err(error) => panic!("unreadable log: {error:?}"),
            })
            .collect();
        // Stamped with the step's offset (100 s) plus the interval's run time.
        assert_eq!(logged, vec![(101.0, 30), (102.0, 4), (103.0, 1)]);
    }
}

//! One run from start to end on the main thread: resolve the target, set up the queues, start
//! the cores, then gather their once-a-second reports into the totals, the time series, the
//! HdrHistogram interval log and the progress line, until every core has finished.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::cli::{queue_names, Options};
use crate::endpoint;
use crate::engine::{self, CoreReport, RunPlan, INTERVAL_NS};
use crate::metrics::{Measurements, Operation};
use crate::report::{progress_line, CoreUsage, DepthPoint, RunSummary, TimelinePoint};
use crate::schedule::NANOSECONDS_PER_SECOND;
use crate::wire::RequestSettings;

/// What a run produced.
pub struct RunOutcome {
    pub summary: RunSummary,
    /// The HdrHistogram interval log, when asked for.
    pub hdr_log: Option<Vec<u8>>,
}

/// Runs `options` to the end.
pub fn run(options: &Options) -> Result<RunOutcome, String> {
    let (endpoint, credentials) = endpoint::resolve(&options.target)?;
    let cpus = options
        .cpus
        .clone()
        .unwrap_or_else(azq::runtime::allowed_cpus);
    let plan = RunPlan {
        endpoint,
        credentials,
        settings: RequestSettings {
            queue_names: queue_names(options),
            message_bytes: options.message_bytes,
            batch: options.batch,
            visibility_timeout_s: options.visibility_timeout_s,
            api_version: options.api_version.clone(),
        },
        scenario: options.scenario,
        cpus,
        connections: options.connections,
        pipeline: options.pipeline,
        producers: options.producers,
        load: options.load,
        warmup_ns: options.warmup_ns,
        duration_ns: options.duration_ns,
        requests: options.requests,
        preload: options.preload,
        refill: options.refill,
        seed: options.seed,
    };
    let depths = engine::set_up(&plan)?;
    if !options.quiet {
        eprintln!(
            "azq-loadgen: {} queue(s) ready at {} ({} messages in total)",
            depths.len(),
            plan.endpoint.address,
            depths.iter().sum::<u64>()
        );
    }
    let plan = Arc::new(plan);
    let engine::Started {
        reports,
        executors,
        start,
    } = engine::start(plan.clone())?;
    let start_wall_clock = SystemTime::now()
        + start
            .checked_duration_since(std::time::Instant::now())
            .unwrap_or_default();
    let mut hdr_log = options.hdr_log_path.is_some().then(Vec::new);
    let collected = collect(
        &plan,
        reports,
        options.quiet,
        start_wall_clock,
        hdr_log.as_mut(),
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
    let summary = RunSummary {
        scenario: plan.scenario,
        load: plan.load,
        connections: plan.connections,
        pipeline: plan.pipeline,
        cpus: plan.cpus.clone(),
        queues: plan.settings.queue_names.len(),
        message_bytes: plan.settings.message_bytes,
        batch: plan.settings.batch,
        refill: plan.refill,
        warmup_s: seconds(plan.warmup_ns),
        duration_s: seconds(duration_ns),
        total: collected.total,
        timeline: collected.timeline,
        depth: collected.depth,
        client_cores: collected.client_cores,
        max_error_ratio: options.max_error_ratio,
    };
    Ok(RunOutcome { summary, hdr_log })
}

fn seconds(nanoseconds: u64) -> f64 {
    nanoseconds as f64 / NANOSECONDS_PER_SECOND as f64
}

/// What the main thread gathered.
struct Collected {
    total: Measurements,
    timeline: Vec<TimelinePoint>,
    depth: Vec<DepthPoint>,
    last_answer_ns: u64,
    client_cores: Vec<CoreUsage>,
}

/// Receives reports until every core has finished. An interval is closed (merged, logged,
/// printed) once every core has reported it or finished.
fn collect(
    plan: &RunPlan,
    reports: Receiver<CoreReport>,
    quiet: bool,
    start_wall_clock: SystemTime,
    hdr_log: Option<&mut Vec<u8>>,
) -> Result<Collected, String> {
    let cores = plan.cpus.len();
    let mut serializer = V2DeflateSerializer::new();
    let mut log_output = Vec::new();
    let mut log_writer = if hdr_log.is_some() {
        Some(
            IntervalLogWriterBuilder::new()
                .add_comment("azq-loadgen interval log: corrected latency in microseconds, one tag per operation")
                .with_start_time(start_wall_clock)
                .with_base_time(start_wall_clock)
                .with_max_value_divisor(1000.0)
                .begin_log_with(&mut log_output, &mut serializer)
                .map_err(|error| error.to_string())?,
        )
    } else {
        None
    };
    let mut reported_through: Vec<Option<u64>> = vec![None; cores];
    let mut finished = vec![false; cores];
    let mut pending: BTreeMap<u64, Measurements> = BTreeMap::new();
    let mut collected = Collected {
        total: Measurements::default(),
        timeline: Vec::new(),
        depth: Vec::new(),
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
            let Some(measurements) = pending.remove(&index) else {
                break;
            };
            let start_ns = index * INTERVAL_NS;
            let all_finished = finished.iter().all(|&done| done);
            // The last interval ends with the last answer, not a full second later.
            let end_ns = if all_finished {
                (start_ns + INTERVAL_NS).min(collected.last_answer_ns.max(start_ns + 1))
            } else {
                start_ns + INTERVAL_NS
            };
            let interval_s = seconds(end_ns - start_ns);
            if let Some(writer) = log_writer.as_mut() {
                for operation in Operation::ALL {
                    let histogram = &measurements.operation(operation).latency_us;
                    if histogram.is_empty() {
                        continue;
                    }
                    writer
                        .write_histogram(
                            histogram,
                            Duration::from_nanos(start_ns),
                            Duration::from_nanos(end_ns - start_ns),
                            Tag::new(operation.name()),
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
                let mut operations_per_s = [0.0; 5];
                for operation in Operation::ALL {
                    operations_per_s[operation.index()] =
                        measurements.operation(operation).count as f64 / interval_s;
                }
                collected.timeline.push(TimelinePoint {
                    end_s: seconds(end_ns),
                    operations_per_s,
                });
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
    drop(log_writer);
    if let Some(hdr_log) = hdr_log {
        *hdr_log = log_output;
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
        let collected = collect(
            &plan(),
            receiver,
            true,
            SystemTime::UNIX_EPOCH,
            Some(&mut log),
        )
        .unwrap();

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
        assert_eq!(logged, vec![(1.0, 30), (2.0, 4), (3.0, 1)]);
    }
}

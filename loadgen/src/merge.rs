//! `azq-loadgen merge`: the exact union of HdrHistogram interval logs written with `--hdr-log`,
//! per tag. Several loadgens (on several machines, started together with `--start-at`) each
//! log their own answers; adding their histograms gives the same counts as all the runs
//! together and the percentiles of one histogram of every answer, which averaging the runs'
//! percentiles would not. Intervals are also lined up by wall-clock second into one timeline.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::metrics::{new_histogram, LatencySummary};
use crate::report::Entries;

/// Interval timestamps below this many seconds are relative to the log's start time, not to
/// the Unix epoch (the convention of HdrHistogram's own log reader, which uses a year).
const RELATIVE_TIMESTAMP_S_MAX: f64 = 365.0 * 86_400.0;

/// One interval of one log, on the wall clock.
#[derive(Clone, Debug)]
pub struct Interval {
    pub tag: String,
    /// Seconds since the Unix epoch.
    pub start_unix_s: f64,
    pub duration_s: f64,
    pub histogram: Histogram<u64>,
}

/// Reads every tagged interval of an interval log.
pub fn read_log(bytes: &[u8]) -> Result<Vec<Interval>, String> {
    let mut start_time_s = None;
    let mut base_time_s = None;
    let mut intervals = Vec::new();
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(bytes) {
        match entry.map_err(|error| format!("not an interval log: {error:?}"))? {
            LogEntry::StartTime(time) => start_time_s = Some(time.as_secs_f64()),
            LogEntry::BaseTime(time) => base_time_s = Some(time.as_secs_f64()),
            LogEntry::Interval(interval) => {
                let timestamp_s = interval.start_timestamp().as_secs_f64();
                let base_s = match base_time_s {
                    Some(base) => base,
                    None if timestamp_s < RELATIVE_TIMESTAMP_S_MAX => start_time_s.unwrap_or(0.0),
                    None => 0.0,
                };
                let encoded = BASE64
                    .decode(interval.encoded_histogram())
                    .map_err(|error| format!("bad histogram encoding: {error}"))?;
                let histogram: Histogram<u64> = deserializer
                    .deserialize(&mut std::io::Cursor::new(encoded))
                    .map_err(|error| format!("bad histogram: {error:?}"))?;
                intervals.push(Interval {
                    tag: interval
                        .tag()
                        .map_or_else(String::new, |tag| tag.as_str().to_string()),
                    start_unix_s: base_s + timestamp_s,
                    duration_s: interval.duration().as_secs_f64(),
                    histogram,
                });
            }
        }
    }
    Ok(intervals)
}

/// One tag's union over every input.
#[derive(Clone, Debug)]
pub struct TagTotal {
    pub tag: String,
    pub histogram: Histogram<u64>,
}

/// The union of several logs: per tag in the order first seen, and per wall-clock second.
#[derive(Clone, Debug)]
pub struct Merged {
    pub inputs: Vec<String>,
    pub tags: Vec<TagTotal>,
    /// The earliest interval start, seconds since the Unix epoch.
    pub start_unix_s: f64,
    /// The latest interval end.
    pub end_unix_s: f64,
    /// Per second since `start_unix_s` (rounded), per tag: the union of the intervals that
    /// start in it.
    pub seconds: BTreeMap<u64, BTreeMap<String, Histogram<u64>>>,
}

impl Merged {
    /// The time the intervals span.
    pub fn span_s(&self) -> f64 {
        (self.end_unix_s - self.start_unix_s).max(0.0)
    }
}

/// Adds `from` into `into`; histograms that grow never run out of range.
fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_err() {
        for value in from.iter_recorded() {
            into.saturating_record_n(value.value_iterated_to(), value.count_at_value());
        }
    }
}

/// The union of the logs read from `inputs` (named for the report).
pub fn merge(inputs: Vec<(String, Vec<Interval>)>) -> Merged {
    let start_unix_s = inputs
        .iter()
        .flat_map(|(_, intervals)| intervals.iter().map(|interval| interval.start_unix_s))
        .fold(f64::INFINITY, f64::min);
    let mut merged = Merged {
        inputs: inputs.iter().map(|(name, _)| name.clone()).collect(),
        tags: Vec::new(),
        start_unix_s: if start_unix_s.is_finite() {
            start_unix_s
        } else {
            0.0
        },
        end_unix_s: 0.0,
        seconds: BTreeMap::new(),
    };
    for (_, intervals) in inputs {
        for interval in intervals {
            merged.end_unix_s = merged
                .end_unix_s
                .max(interval.start_unix_s + interval.duration_s);
            let total = match merged
                .tags
                .iter_mut()
                .find(|total| total.tag == interval.tag)
            {
                Some(total) => total,
                None => {
                    merged.tags.push(TagTotal {
                        tag: interval.tag.clone(),
                        histogram: new_histogram(),
                    });
                    merged.tags.last_mut().unwrap_or_else(|| unreachable!())
                }
            };
            add(&mut total.histogram, &interval.histogram);
            let second = (interval.start_unix_s - merged.start_unix_s)
                .round()
                .max(0.0) as u64;
            let bucket = merged
                .seconds
                .entry(second)
                .or_default()
                .entry(interval.tag)
                .or_insert_with(new_histogram);
            add(bucket, &interval.histogram);
        }
    }
    merged
}

/// The printed table: per tag, count, rate over the span, and percentiles.
pub fn table(merged: &Merged) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "azq-loadgen merge: {} log(s) over {:.2} s; corrected latency in microseconds\n",
        merged.inputs.len(),
        merged.span_s()
    );
    let _ = writeln!(
        out,
        "{:<14} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "tag", "count", "per s", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
    for total in &merged.tags {
        let _ = write!(
            out,
            "{:<14} {:>12} {:>10.0}",
            total.tag,
            total.histogram.len(),
            rate_per_s(total.histogram.len(), merged.span_s())
        );
        if !total.histogram.is_empty() {
            for (_, value) in LatencySummary::of(&total.histogram).labelled() {
                let _ = write!(out, " {value:>9}");
            }
        }
        out.push('\n');
    }
    out
}

fn rate_per_s(count: u64, span_s: f64) -> f64 {
    if span_s > 0.0 {
        count as f64 / span_s
    } else {
        0.0
    }
}

#[derive(Serialize)]
struct JsonMerged<'a> {
    inputs: &'a [String],
    start_unix_s: f64,
    duration_s: f64,
    /// Per tag, in the order first seen.
    ops: Entries<&'a str, JsonTag>,
    timeline: Vec<JsonSecond<'a>>,
}

#[derive(Serialize)]
struct JsonTag {
    count: u64,
    throughput_per_s: f64,
    latency_us: Option<LatencySummary>,
}

#[derive(Serialize)]
struct JsonSecond<'a> {
    t_s: u64,
    count: BTreeMap<&'a str, u64>,
    p99_us: BTreeMap<&'a str, u64>,
}

/// The `--json` file of a merge.
pub fn json(merged: &Merged) -> String {
    let report = JsonMerged {
        inputs: &merged.inputs,
        start_unix_s: merged.start_unix_s,
        duration_s: merged.span_s(),
        ops: Entries(
            merged
                .tags
                .iter()
                .map(|total| {
                    let count = total.histogram.len();
                    (
                        total.tag.as_str(),
                        JsonTag {
                            count,
                            throughput_per_s: rate_per_s(count, merged.span_s()),
                            latency_us: (!total.histogram.is_empty())
                                .then(|| LatencySummary::of(&total.histogram)),
                        },
                    )
                })
                .collect(),
        ),
        timeline: merged
            .seconds
            .iter()
            .map(|(&second, tags)| JsonSecond {
                t_s: second,
                count: tags
                    .iter()
                    .map(|(tag, histogram)| (tag.as_str(), histogram.len()))
                    .collect(),
                p99_us: tags
                    .iter()
                    .map(|(tag, histogram)| (tag.as_str(), histogram.value_at_quantile(0.99)))
                    .collect(),
            })
            .collect(),
    };
    // Serializing plain data into a String cannot fail.
    let mut text = serde_json::to_string(&report).unwrap_or_else(|_| unreachable!());
    text.push('\n');
    text
}

/// The `--csv` file of a merge: per second, the answers and the p99 of each tag.
pub fn csv(merged: &Merged) -> String {
    let mut out = String::from("t_s");
    for total in &merged.tags {
        let _ = write!(out, ",{0}_count,{0}_p99_us", total.tag);
    }
    out.push('\n');
    for (second, tags) in &merged.seconds {
        let _ = write!(out, "{second}");
        for total in &merged.tags {
            match tags.get(&total.tag) {
                Some(histogram) => {
                    let _ = write!(
                        out,
                        ",{},{}",
                        histogram.len(),
                        histogram.value_at_quantile(0.99)
                    );
                }
                None => out.push_str(",0,"),
            }
        }
        out.push('\n');
    }
    out
}

/// The union as an interval log itself: one interval per second and tag.
pub fn write_log(merged: &Merged) -> Result<Vec<u8>, String> {
    let mut output = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(merged.start_unix_s);
    let mut writer = IntervalLogWriterBuilder::new()
        .add_comment(&format!("azq-loadgen merge of {}", merged.inputs.join(" ")))
        .with_start_time(base)
        .with_base_time(base)
        .with_max_value_divisor(1000.0)
        .begin_log_with(&mut output, &mut serializer)
        .map_err(|error| error.to_string())?;
    for (&second, tags) in &merged.seconds {
        for (tag, histogram) in tags {
            writer
                .write_histogram(
                    histogram,
                    Duration::from_secs(second),
                    Duration::from_secs(1),
                    Tag::new(tag),
                )
                .map_err(|error| format!("--hdr-log: {error}"))?;
        }
    }
    drop(writer);
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval log like a run's: `(second, tag, latencies)` intervals after `start_unix_s`.
    fn log(start_unix_s: u64, intervals: &[(u64, &str, &[u64])]) -> Vec<u8> {
        let mut output = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(start_unix_s);
        let mut writer = IntervalLogWriterBuilder::new()
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut output, &mut serializer)
            .unwrap();
        for &(second, tag, values) in intervals {
            let mut histogram = new_histogram();
            for &value in values {
                histogram.record(value).unwrap();
            }
            writer
                .write_histogram(
                    &histogram,
                    Duration::from_secs(second),
                    Duration::from_secs(1),
                    Tag::new(tag),
                )
                .unwrap();
        }
        drop(writer);
        output
    }

    #[test]
    fn logs_are_unioned_per_tag_and_lined_up_by_wall_clock_second() {
        let first = log(1_000, &[(0, "put", &[10, 20]), (1, "put", &[30])]);
        // The second loadgen started a second later and also got messages.
        let second = log(
            1_001,
            &[(0, "put", &[40, 50, 60]), (0, "end-to-end", &[5_000])],
        );
        let merged = merge(vec![
            ("a".to_string(), read_log(&first).unwrap()),
            ("b".to_string(), read_log(&second).unwrap()),
        ]);
        assert_eq!(merged.start_unix_s, 1_000.0);
        assert_eq!(merged.end_unix_s, 1_002.0);
        let tags: Vec<(&str, u64)> = merged
            .tags
            .iter()
            .map(|total| (total.tag.as_str(), total.histogram.len()))
            .collect();
        assert_eq!(tags, vec![("put", 6), ("end-to-end", 1)]);
        let put = &merged.tags[0].histogram;
        assert_eq!((put.min(), put.max()), (10, 60));
        assert_eq!(put.value_at_quantile(0.5), 30);
        // Second 1 holds the first log's second interval and the second log's first.
        assert_eq!(merged.seconds[&1]["put"].len(), 4);
        assert_eq!(merged.seconds[&0]["put"].len(), 2);

        let value: serde_json::Value = serde_json::from_str(&json(&merged)).unwrap();
        assert_eq!(value["ops"]["put"]["count"], 6);
        assert_eq!(value["ops"]["put"]["latency_us"]["max"], 60);
        assert_eq!(value["timeline"][1]["count"]["put"], 4);
        assert!(table(&merged).contains("end-to-end"));
        assert_eq!(csv(&merged).lines().count(), 3);

        // The merged log reads back as the same union.
        let again = merge(vec![(
            "merged".to_string(),
            read_log(&write_log(&merged).unwrap()).unwrap(),
        )]);
        assert_eq!(again.tags[0].histogram, merged.tags[0].histogram);
        assert_eq!(again.start_unix_s, 1_000.0);
    }

    #[test]
    fn bad_logs_are_refused() {
        assert!(read_log(b"Tag=put,0.0,1.0,1.0,not-base64!\n").is_err());
        assert!(read_log(b"").unwrap().is_empty());
    }
}

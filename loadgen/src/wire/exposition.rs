//! The server's `/_azq/metrics` answer: Prometheus's text exposition format read line by line
//! (name, labels, value), and the few series a backlog run draws from it (`ServerMetrics`:
//! resident memory, message bytes and messages in memory, bytes on disk, snapshots being
//! written), each summed over its
//! labels (azq writes one sample per shard). A line that does not parse is skipped, not an
//! error: a server is free to add series this reader does not know.

/// The path of azq's metrics, on the queue port (its control plane answers there too).
pub const METRICS_PATH: &str = "/_azq/metrics";

/// The series `ServerMetrics` reads, by their exposition names.
pub const RESIDENT_MEMORY_METRIC: &str = "process_resident_memory_bytes";
pub const MESSAGE_BYTES_METRIC: &str = "azq_message_bytes";
pub const MESSAGES_METRIC: &str = "azq_messages";
pub const DISK_BYTES_METRIC: &str = "azq_disk_bytes";
pub const SNAPSHOTS_RUNNING_METRIC: &str = "azq_snapshots_running";

/// One sample line: `name{label="value",...} value [timestamp]`. Label values are as written,
/// still escaped (`\"`, `\\`, `\n`): nothing here reads inside them.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Vec<(&'a str, &'a str)>,
    pub value: f64,
}

/// The sample on `line`; `None` for a comment (`# HELP`, `# TYPE`), a blank line or a line
/// that is not a sample.
pub fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim_start_matches([' ', '\t']);
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|character: char| !is_name_character(character))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|character: char| character.is_ascii_digit()) {
        return None;
    }
    let mut rest = line[name_end..].trim_start_matches([' ', '\t']);
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = after_brace;
        loop {
            rest = rest.trim_start_matches([' ', '\t']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let label_end = rest.find(|character: char| !is_name_character(character))?;
            let label = &rest[..label_end];
            rest = rest[label_end..].trim_start_matches([' ', '\t']);
            rest = rest.strip_prefix('=')?.trim_start_matches([' ', '\t']);
            rest = rest.strip_prefix('"')?;
            let value_end = closing_quote(rest)?;
            if label.is_empty() {
                return None;
            }
            labels.push((label, &rest[..value_end]));
            rest = rest[value_end + 1..].trim_start_matches([' ', '\t']);
            if let Some(after_comma) = rest.strip_prefix(',') {
                rest = after_comma;
            } else if !rest.starts_with('}') {
                return None;
            }
        }
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = parse_value(fields.next()?)?;
    // An optional timestamp (integer milliseconds), then nothing.
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().ok()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Metric and label names: `[a-zA-Z_:][a-zA-Z0-9_:]*` (the first character is checked apart).
fn is_name_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || character == '_' || character == ':'
}

/// Where the label value that `text` starts with ends: its closing quote, past escapes.
fn closing_quote(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (index, byte) in text.bytes().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(index),
            _ => {}
        }
    }
    None
}

/// A sample value: a Go float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text.starts_with(|character: char| {
            character.is_ascii_digit() || matches!(character, '-' | '+' | '.')
        }) =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

/// Every sample of the exposition `text`, in order, the lines that are not samples left out.
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter_map(parse_sample)
}

/// The sum of metric `name` over all its labels (azq's per-shard samples); `None` when `text`
/// has no sample of it.
pub fn sum(text: &str, name: &str) -> Option<f64> {
    samples(text)
        .filter(|sample| sample.name == name)
        .fold(None, |total, sample| {
            Some(total.unwrap_or(0.0) + sample.value)
        })
}

/// What the server holds at one moment, from its metrics; each `None` when the server does not
/// expose that series (Azurite, an older azq).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerMetrics {
    /// The server process's resident memory (`process_resident_memory_bytes`).
    pub resident_memory_bytes: Option<f64>,
    /// Bytes charged for the messages in memory, every shard's (`azq_message_bytes`).
    pub message_bytes: Option<f64>,
    /// Messages stored, every shard's and every queue's (`azq_messages`).
    pub messages: Option<f64>,
    /// Bytes of the server's files on disk, every shard's (`azq_disk_bytes`).
    pub disk_bytes: Option<f64>,
    /// Shards writing a snapshot (`azq_snapshots_running`): while one runs the disk holds the
    /// log it replaces beside it, and the log's syncs slow.
    pub snapshots_running: Option<f64>,
}

impl ServerMetrics {
    /// The series of the exposition `text`, each summed over its labels (a pass each: the
    /// text is a few kilobytes, read once a second).
    pub fn from_exposition(text: &str) -> ServerMetrics {
        ServerMetrics {
            resident_memory_bytes: sum(text, RESIDENT_MEMORY_METRIC),
            message_bytes: sum(text, MESSAGE_BYTES_METRIC),
            messages: sum(text, MESSAGES_METRIC),
            disk_bytes: sum(text, DISK_BYTES_METRIC),
            snapshots_running: sum(text, SNAPSHOTS_RUNNING_METRIC),
        }
    }

    /// Whether none of the series was there: not a server to scrape again.
    pub fn is_empty(&self) -> bool {
        *self == ServerMetrics::default()
    }
}

/// The scrape: `GET /_azq/metrics`, unsigned (azq answers it to anyone, as Prometheus asks).
pub fn encode_scrape(host_header: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(METRICS_PATH.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host_header.as_bytes());
    out.extend_from_slice(b"\r\nAccept: text/plain\r\n\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An azq exposition as `governor::metrics::render` writes it, with the two series being
    /// added (resident memory, disk bytes) in the forms the Prometheus client libraries use.
    const EXPOSITION: &str = "\
# HELP azq_requests_total Requests answered, by REST operation (Azure's ApiName), and status.
# TYPE azq_requests_total counter
azq_requests_total{operation=\"PutMessage\",status=\"201\"} 20000
# HELP azq_request_duration_seconds Time to answer, by operation.
# TYPE azq_request_duration_seconds histogram
azq_request_duration_seconds_bucket{operation=\"PutMessage\",le=\"3.2e-05\"} 11
azq_request_duration_seconds_bucket{operation=\"PutMessage\",le=\"+Inf\"} 20000
azq_request_duration_seconds_sum{operation=\"PutMessage\"} 1.25
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.23456e+08
# HELP azq_messages Messages stored (approximate counts). By shard.
# TYPE azq_messages gauge
azq_messages{shard=\"0\"} 12000
azq_messages{shard=\"1\"} 8000
# HELP azq_message_bytes Bytes charged for stored messages (text plus overhead). By shard.
# TYPE azq_message_bytes gauge
azq_message_bytes{shard=\"0\"} 15000000
azq_message_bytes{shard=\"1\"} 10000000
# TYPE azq_disk_bytes gauge
azq_disk_bytes{shard=\"0\"} 4096
azq_disk_bytes{shard=\"1\",} 8192 1700000000000
# TYPE azq_snapshots_running gauge
azq_snapshots_running 1
azq_queue_depth{account=\"devstoreaccount1\",queue=\"a \\\"quoted\\\", {braced} name\"} 7
";

    #[test]
    fn an_azq_exposition_sums_each_series_over_its_shards() {
        let metrics = ServerMetrics::from_exposition(EXPOSITION);
        assert_eq!(
            metrics,
            ServerMetrics {
                resident_memory_bytes: Some(123_456_000.0),
                message_bytes: Some(25_000_000.0),
                messages: Some(20_000.0),
                disk_bytes: Some(12_288.0),
                snapshots_running: Some(1.0),
            }
        );
        assert_eq!(sum(EXPOSITION, "azq_requests_total"), Some(20_000.0));
        assert_eq!(sum(EXPOSITION, "azq_queue_depth"), Some(7.0));
        assert_eq!(sum(EXPOSITION, "azq_absent"), None);
    }

    #[test]
    fn a_server_without_the_series_gives_none_of_them() {
        // Azurite answers its 404 page; an older azq lacks the two newer series.
        assert!(ServerMetrics::from_exposition("<html>not found</html>").is_empty());
        assert!(ServerMetrics::from_exposition("").is_empty());
        let older = ServerMetrics::from_exposition("azq_messages{shard=\"0\"} 3\n");
        assert_eq!(older.messages, Some(3.0));
        assert_eq!(older.resident_memory_bytes, None);
        assert_eq!(older.disk_bytes, None);
        assert_eq!(older.snapshots_running, None);
        assert!(!older.is_empty());
    }

    #[test]
    fn sample_lines() {
        let sample = |name, labels: &[(&'static str, &'static str)], value| Sample {
            name,
            labels: labels.to_vec(),
            value,
        };
        let cases: &[(&str, Option<Sample<'static>>)] = &[
            ("up 1", Some(sample("up", &[], 1.0))),
            ("  up\t2.5e3", Some(sample("up", &[], 2500.0))),
            ("up 1 1700000000000", Some(sample("up", &[], 1.0))),
            ("up -3", Some(sample("up", &[], -3.0))),
            ("a:b_c{} 4", Some(sample("a:b_c", &[], 4.0))),
            (
                "m{shard=\"0\",kind=\"x\"} 5",
                Some(sample("m", &[("shard", "0"), ("kind", "x")], 5.0)),
            ),
            (
                "m { shard = \"0\" , } 6",
                Some(sample("m", &[("shard", "0")], 6.0)),
            ),
            (
                r#"m{q="say \"}\", ok\\"} 7"#,
                Some(sample("m", &[("q", r#"say \"}\", ok\\"#)], 7.0)),
            ),
            ("m +Inf", Some(sample("m", &[], f64::INFINITY))),
            ("m -Inf", Some(sample("m", &[], f64::NEG_INFINITY))),
            // Comments, blank lines and what is not a sample.
            ("# HELP m Some help.", None),
            ("# TYPE m gauge", None),
            ("", None),
            ("   ", None),
            ("m", None),
            ("m{shard=\"0\"}", None),
            ("m{shard=\"0\" 1", None),
            ("m{shard=\"0} 1", None),
            ("m{shard=0} 1", None),
            ("m{=\"0\"} 1", None),
            ("m{a=\"0\" b=\"1\"} 1", None),
            ("m one", None),
            ("m 1 2 3", None),
            ("m 1 later", None),
            ("9m 1", None),
            ("{a=\"b\"} 1", None),
            ("<html>", None),
        ];
        for (line, expected) in cases {
            assert_eq!(&parse_sample(line), expected, "{line:?}");
        }
        // NaN equals nothing, itself included.
        assert!(parse_sample("m NaN").is_some_and(|sample| sample.value.is_nan()));
    }

    #[test]
    fn the_scrape_is_a_plain_get_of_the_metrics_path() {
        let mut out = Vec::new();
        encode_scrape("127.0.0.1:10001", &mut out);
        assert_eq!(
            out,
            b"GET /_azq/metrics HTTP/1.1\r\nHost: 127.0.0.1:10001\r\nAccept: text/plain\r\n\r\n"
        );
    }
}

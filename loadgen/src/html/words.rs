//! Numbers as a planner reads them in the HTML report: run times and durations in seconds or
//! minutes, the start as a UTC date, shares as percentages. The tables' JSON-exact cells are
//! `details.rs`'s; these are for the sentences around them.

use azq::time::civil::civil_from_unix_s;

/// From this many seconds up, a duration reads in minutes and seconds.
const MINUTES_FROM_S: f64 = 120.0;

/// `2.5` as `2.5 s`; `754.2` as `12 min 34 s`.
pub(super) fn seconds_words(seconds: f64) -> String {
    if seconds >= MINUTES_FROM_S {
        let whole_s = seconds.round() as u64;
        format!("{} min {} s", whole_s / 60, whole_s % 60)
    } else {
        format!("{seconds:.1} s")
    }
}

/// Seconds since the Unix epoch as `2026-12-02 13:58:01 UTC`.
pub(super) fn utc_words(unix_s: f64) -> String {
    let civil = civil_from_unix_s(unix_s.max(0.0) as u64);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        civil.year, civil.month, civil.day, civil.hour, civil.minute, civil.second
    )
}

/// `0.0125` as `1.25%`, `0.01` as `1%`.
pub(super) fn percent(ratio: f64) -> String {
    let text = format!("{:.2}", ratio * 100.0);
    format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(seconds_words(2.5), "2.5 s");
        assert_eq!(seconds_words(119.94), "119.9 s");
        assert_eq!(seconds_words(754.2), "12 min 34 s");
        assert_eq!(utc_words(1_795_305_600.4), "2026-11-22 00:00:00 UTC");
        assert_eq!(utc_words(1_796_219_881.0), "2026-12-02 13:58:01 UTC");
        assert_eq!(percent(0.0125), "1.25%");
        assert_eq!(percent(0.01), "1%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.5), "50%");
    }
}

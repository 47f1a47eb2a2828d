//! Stepped load: a run made of open-loop steps at rising rates (`--rate-steps`), or a search for
//! the highest rate that keeps a latency percentile under a bound with few enough errors
//! (`--find-max p99=20ms`): double the rate until a step fails, then bisect between the last
//! rate that passed and the first that failed. Pure: `run.rs` runs the steps, this decides
//! which rate comes next (whether a step passed is its outcome's, `report::StepResult`).

use crate::units::parse_duration_ns;

/// Steps one knee search may run, whatever the precision asked for.
pub const FIND_MAX_PROBES_MAX: usize = 24;
/// The lowest rate a knee search tries (per second), the highest.
pub const FIND_MAX_RATE_MIN: f64 = 1.0;
pub const FIND_MAX_RATE_MAX: f64 = 10_000_000.0;
/// Steps one `--rate-steps` list may hold.
pub const RATE_STEPS_MAX: usize = 100;

/// A bound on one latency percentile, e.g. `p99=20ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyBound {
    /// The percentile's name as reports spell it (`p50` … `p9999`, `max`).
    pub percentile: &'static str,
    pub bound_us: u64,
}

impl LatencyBound {
    /// Parses `p99=20ms`, `p99.9=5ms`, `max=100ms`, `p50=500us`.
    pub fn parse(text: &str) -> Result<LatencyBound, String> {
        let error = || format!("--find-max {text}: expected e.g. p99=20ms (p50 .. p99.99, max)");
        let (name, bound) = text.split_once('=').ok_or_else(error)?;
        let percentile = match name {
            "p50" => "p50",
            "p90" => "p90",
            "p99" => "p99",
            "p99.9" | "p999" => "p999",
            "p99.99" | "p9999" => "p9999",
            "max" => "max",
            _ => return Err(error()),
        };
        let bound_ns = parse_duration_ns("--find-max", bound)?;
        if bound_ns < 1000 {
            return Err(format!("--find-max {text}: the bound must be at least 1us"));
        }
        Ok(LatencyBound {
            percentile,
            bound_us: bound_ns / 1000,
        })
    }
}

/// The knee search's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FindMax {
    pub bound: LatencyBound,
    /// The first rate tried.
    pub start_rate_per_s: f64,
    /// Stop bisecting when the gap between passing and failing rates is this share of the
    /// passing one.
    pub precision: f64,
}

/// What a stepped run does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepPlan {
    /// These rates, in this order.
    Rates(Vec<f64>),
    /// A knee search.
    FindMax(FindMax),
}

/// Parses `--rate-steps 100,200,500`.
pub fn parse_rate_steps(text: &str) -> Result<Vec<f64>, String> {
    let rates: Vec<f64> = text
        .split(',')
        .map(|rate| {
            rate.trim()
                .replace('_', "")
                .parse::<f64>()
                .ok()
                .filter(|rate| rate.is_finite() && *rate > 0.0)
                .ok_or_else(|| {
                    format!("--rate-steps {text}: expected positive rates, e.g. 100,200")
                })
        })
        .collect::<Result<_, _>>()?;
    if rates.len() > RATE_STEPS_MAX {
        return Err(format!("--rate-steps: at most {RATE_STEPS_MAX} steps"));
    }
    Ok(rates)
}

/// The state of a knee search: the highest rate that passed and the lowest that failed.
#[derive(Clone, Debug)]
pub struct KneeSearch {
    settings: FindMax,
    highest_pass: Option<f64>,
    lowest_fail: Option<f64>,
    probes: usize,
}

impl KneeSearch {
    /// A search with `settings`.
    pub fn new(settings: FindMax) -> KneeSearch {
        KneeSearch {
            settings,
            highest_pass: None,
            lowest_fail: None,
            probes: 0,
        }
    }

    /// The next rate to try, or `None` when the search is over: grow by doubling until a step
    /// fails (halve while the first fails), then bisect until the gap is within the precision.
    pub fn next_rate(&self) -> Option<f64> {
        if self.probes >= FIND_MAX_PROBES_MAX {
            return None;
        }
        let next = match (self.highest_pass, self.lowest_fail) {
            (None, None) => self.settings.start_rate_per_s,
            (Some(pass), None) => pass * 2.0,
            (None, Some(fail)) => fail / 2.0,
            (Some(pass), Some(fail)) => {
                if (fail - pass) <= pass * self.settings.precision {
                    return None;
                }
                (pass + fail) / 2.0
            }
        };
        (FIND_MAX_RATE_MIN..=FIND_MAX_RATE_MAX)
            .contains(&next)
            .then_some(next.round().max(FIND_MAX_RATE_MIN))
    }

    /// Takes in the outcome of the step at `rate_per_s`.
    pub fn record(&mut self, rate_per_s: f64, passed: bool) {
        self.probes += 1;
        if passed {
            self.highest_pass = Some(self.highest_pass.map_or(rate_per_s, |r| r.max(rate_per_s)));
        } else {
            self.lowest_fail = Some(self.lowest_fail.map_or(rate_per_s, |r| r.min(rate_per_s)));
        }
    }

    /// The highest rate that met the bound, once the search is over.
    pub fn knee(&self) -> Option<f64> {
        self.highest_pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse() {
        assert_eq!(
            LatencyBound::parse("p99=20ms"),
            Ok(LatencyBound {
                percentile: "p99",
                bound_us: 20_000
            })
        );
        assert_eq!(LatencyBound::parse("p99.9=5ms").unwrap().percentile, "p999");
        assert_eq!(LatencyBound::parse("max=1s").unwrap().bound_us, 1_000_000);
        assert_eq!(LatencyBound::parse("p50=500us").unwrap().bound_us, 500);
        for bad in ["p98=1ms", "p99", "p99=", "p99=fast", "p99=0ms"] {
            assert!(LatencyBound::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_rate_steps("100,2_000, 500"),
            Ok(vec![100.0, 2000.0, 500.0])
        );
        assert!(parse_rate_steps("100,-1").is_err());
        assert!(parse_rate_steps("").is_err());
    }

    /// A server whose p99 stays under the bound up to 1,300/s: the search doubles from 100 to
    /// 1,600, then bisects down to within 10%.
    #[test]
    fn the_search_grows_then_bisects_to_the_knee() {
        let mut search = KneeSearch::new(FindMax {
            bound: LatencyBound::parse("p99=20ms").unwrap(),
            start_rate_per_s: 100.0,
            precision: 0.1,
        });
        let mut tried = Vec::new();
        while let Some(rate) = search.next_rate() {
            tried.push(rate);
            search.record(rate, rate <= 1_300.0);
        }
        assert_eq!(
            tried,
            vec![100.0, 200.0, 400.0, 800.0, 1600.0, 1200.0, 1400.0, 1300.0]
        );
        assert_eq!(search.knee(), Some(1300.0));
    }

    #[test]
    fn a_first_failure_halves_and_the_search_is_bounded() {
        let mut search = KneeSearch::new(FindMax {
            bound: LatencyBound::parse("p99=20ms").unwrap(),
            start_rate_per_s: 1000.0,
            precision: 0.1,
        });
        let mut tried = Vec::new();
        while let Some(rate) = search.next_rate() {
            tried.push(rate);
            search.record(rate, false);
        }
        // 1000, 500, ... down to the lowest rate, and never a knee.
        assert_eq!(&tried[..3], &[1000.0, 500.0, 250.0]);
        assert!(tried.len() <= FIND_MAX_PROBES_MAX);
        assert!(tried.iter().all(|&rate| rate >= FIND_MAX_RATE_MIN));
        assert_eq!(search.knee(), None);

        let mut always = KneeSearch::new(FindMax {
            bound: LatencyBound::parse("p99=20ms").unwrap(),
            start_rate_per_s: 1.0,
            precision: 0.0,
        });
        let mut probes = 0;
        while let Some(rate) = always.next_rate() {
            always.record(rate, true);
            probes += 1;
        }
        assert!(probes <= FIND_MAX_PROBES_MAX);
    }
}

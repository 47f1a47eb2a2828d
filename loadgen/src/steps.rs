//! Stepped load: a run made of open-loop steps at rising rates (`--rate-steps`), or a search for
//! the highest rate that keeps a latency percentile under a bound with few enough errors
//! (`--find-max p99=20ms`): double the rate until a step fails, then bisect between the last
//! rate that passed and the first that failed. Pure: `run.rs` runs the steps, this decides
//! which rate comes next and whether a step passed.

use serde::Serialize;

use crate::metrics::{LatencySummary, Measurements};
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

    /// The bounded percentile of `latency`.
    pub fn value_of(&self, latency: &LatencySummary) -> u64 {
        latency.percentile(self.percentile).unwrap_or(u64::MAX)
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

/// One step's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepResult {
    pub target_rate_per_s: f64,
    pub achieved_rate_per_s: f64,
    /// The worst operation's corrected latency percentiles (microseconds); `None` when nothing
    /// succeeded.
    pub latency_us: Option<LatencySummary>,
    pub error_ratio: f64,
    /// Whether the step met the bound of a knee search (`None` for plain rate steps).
    pub passed: Option<bool>,
}

impl StepResult {
    /// The outcome of a step at `target_rate_per_s` that measured `total` and achieved
    /// `achieved_rate_per_s`, judged against `bound` and `max_error_ratio` when searching.
    pub fn of(
        target_rate_per_s: f64,
        achieved_rate_per_s: f64,
        total: &Measurements,
        search: Option<(&LatencyBound, f64)>,
    ) -> StepResult {
        let latency_us = worst_latency(total);
        let error_ratio = total.error_ratio();
        let passed = search.map(|(bound, max_error_ratio)| {
            latency_us.is_some_and(|latency| bound.value_of(&latency) <= bound.bound_us)
                && error_ratio <= max_error_ratio
        });
        StepResult {
            target_rate_per_s,
            achieved_rate_per_s,
            latency_us,
            error_ratio,
            passed,
        }
    }
}

/// Per percentile, the highest over the operations that succeeded at least once: a bound on
/// "p99" holds for every operation the client sends.
fn worst_latency(total: &Measurements) -> Option<LatencySummary> {
    total
        .operations
        .iter()
        .filter(|stats| !stats.latency_us.is_empty())
        .map(|stats| LatencySummary::of(&stats.latency_us))
        .reduce(|worst, next| LatencySummary {
            p50: worst.p50.max(next.p50),
            p90: worst.p90.max(next.p90),
            p99: worst.p99.max(next.p99),
            p999: worst.p999.max(next.p999),
            p9999: worst.p9999.max(next.p9999),
            max: worst.max.max(next.max),
        })
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
    use crate::scenario::Operation;

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

    #[test]
    fn a_step_passes_when_the_worst_operation_and_the_errors_are_within_bounds() {
        let bound = LatencyBound::parse("p99=1ms").unwrap();
        let mut total = Measurements::default();
        for _ in 0..100 {
            total.operation_mut(Operation::Put).record_success(500, 500);
            total.operation_mut(Operation::Get).record_success(900, 900);
        }
        let step = StepResult::of(100.0, 99.0, &total, Some((&bound, 0.01)));
        assert_eq!(step.passed, Some(true));
        assert_eq!(step.latency_us.unwrap().p99, 900);
        // One slow Get in a hundred moves the Gets' p99 over the bound.
        for _ in 0..3 {
            total
                .operation_mut(Operation::Get)
                .record_success(5_000, 5_000);
        }
        assert_eq!(
            StepResult::of(100.0, 99.0, &total, Some((&bound, 0.01))).passed,
            Some(false)
        );
        // Errors above the budget fail a step whatever its latency.
        let mut erring = Measurements::default();
        erring.operation_mut(Operation::Put).record_success(10, 10);
        erring.operation_mut(Operation::Put).record_error(503, None);
        assert_eq!(
            StepResult::of(100.0, 99.0, &erring, Some((&bound, 0.01))).passed,
            Some(false)
        );
        assert_eq!(StepResult::of(100.0, 99.0, &erring, None).passed, None);
        assert_eq!(
            StepResult::of(100.0, 0.0, &Measurements::default(), Some((&bound, 1.0))).passed,
            Some(false)
        );
    }
}

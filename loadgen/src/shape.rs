//! Load shapes (`--shape`): open-loop rates that change over time. A ramp, steps, a spike, a
//! sine (a day compressed) and a recorded per-second rate trace are all a rate that is linear
//! between points (`RateProfile`); a recorded trace of arrival timestamps replays the instants
//! themselves (`Shape::Arrivals`). Pure: parsed and validated here, turned into intended send
//! times by `schedule::Pacer`, so the rate function is tested without a clock.
//!
//! Shape time 0 is the start of the measured window; the warm-up before it runs at the shape's
//! first rate.

use std::path::Path;

use crate::units::parse_duration_ns;

/// Nanoseconds in one second (`schedule`, which paces by these shapes, has its own).
const NANOSECONDS_PER_SECOND: u64 = 1_000_000_000;

/// Points one rate profile may hold (a sine is drawn with `SINE_POINTS_PER_PERIOD` a period).
pub const PROFILE_POINTS_MAX: usize = 1_000_000;
/// Arrivals one timestamp trace may hold.
pub const TRACE_ARRIVALS_MAX: usize = 10_000_000;
/// Bytes one trace file may hold.
pub const TRACE_FILE_BYTES_MAX: u64 = 256 << 20;
/// Straight pieces a sine is drawn with, per period: the rate between them is off the true sine
/// by at most (max − min)·π²/(4·240²), under 0.005% of the swing.
pub const SINE_POINTS_PER_PERIOD: usize = 240;
/// Steps one `step:` shape may list.
pub const SHAPE_STEPS_MAX: usize = 1000;
/// The highest rate a shape may ask for, per second.
pub const SHAPE_RATE_MAX: f64 = 10_000_000.0;
/// Measured time of a shaped run without `--duration` after the shape's last change (a sine:
/// one period; a trace: its own length).
pub const SHAPE_TAIL_NS: u64 = 10 * NANOSECONDS_PER_SECOND;

/// A rate that is linear between points and constant before the first and after the last.
#[derive(Clone, Debug, PartialEq)]
pub struct RateProfile {
    /// `(seconds, rate per second)`, in non-decreasing time; two points at one time make a jump.
    points: Vec<(f64, f64)>,
    /// Expected arrivals from time 0 to each point: the running integral of the rate.
    cumulative: Vec<f64>,
}

impl RateProfile {
    /// The profile through `points`, which must start at 0 s, run forward in time and hold
    /// finite, non-negative rates.
    pub fn new(points: Vec<(f64, f64)>) -> RateProfile {
        assert!(!points.is_empty() && points.len() <= PROFILE_POINTS_MAX);
        assert!(points[0].0 == 0.0);
        assert!(points.windows(2).all(|pair| pair[0].0 <= pair[1].0));
        assert!(points
            .iter()
            .all(|&(time, rate)| time.is_finite() && rate.is_finite() && rate >= 0.0));
        let mut cumulative = Vec::with_capacity(points.len());
        let mut total = 0.0;
        cumulative.push(0.0);
        for pair in points.windows(2) {
            let ((t0, r0), (t1, r1)) = (pair[0], pair[1]);
            total += (t1 - t0) * (r0 + r1) / 2.0;
            cumulative.push(total);
        }
        RateProfile { points, cumulative }
    }

    /// The rate at `time_s` (after a jump: the rate after it).
    pub fn rate_at(&self, time_s: f64) -> f64 {
        let after = self.points.partition_point(|&(time, _)| time <= time_s);
        match after {
            0 => self.points[0].1,
            _ if after == self.points.len() => self.points[after - 1].1,
            _ => {
                let ((t0, r0), (t1, r1)) = (self.points[after - 1], self.points[after]);
                r0 + (r1 - r0) * (time_s - t0) / (t1 - t0)
            }
        }
    }

    /// Expected arrivals from 0 to `time_s` (`time_s` ≥ 0).
    pub fn arrivals_until(&self, time_s: f64) -> f64 {
        let after = self.points.partition_point(|&(time, _)| time <= time_s);
        let index = after.max(1) - 1;
        let (t0, r0) = self.points[index];
        let r = self.rate_at(time_s);
        self.cumulative[index] + (time_s - t0) * (r0 + r) / 2.0
    }

    /// The time at which `arrivals` are expected since 0: the inverse of `arrivals_until`, or
    /// `None` when the rate falls to zero for good before then.
    pub fn time_of(&self, arrivals: f64) -> Option<f64> {
        assert!(arrivals >= 0.0);
        // The last point whose cumulative count is below the target starts its piece.
        let index = self.cumulative.partition_point(|&count| count < arrivals);
        let index = index.max(1) - 1;
        let (t0, r0) = self.points[index];
        let remaining = arrivals - self.cumulative[index];
        if remaining <= 0.0 {
            return Some(t0);
        }
        let slope = match self.points.get(index + 1) {
            Some(&(t1, r1)) if t1 > t0 => (r1 - r0) / (t1 - t0),
            Some(_) => 0.0,
            // After the last point the rate stays.
            None if r0 > 0.0 => return Some(t0 + remaining / r0),
            None => return None,
        };
        // remaining = r0·d + slope·d²/2, solved for d in the form that stays accurate when
        // the slope is tiny: d = 2·remaining / (r0 + sqrt(r0² + 2·slope·remaining)).
        let root = (r0 * r0 + 2.0 * slope * remaining).max(0.0).sqrt();
        let denominator = r0 + root;
        if denominator <= 0.0 {
            return None;
        }
        Some(t0 + 2.0 * remaining / denominator)
    }

    /// The highest rate anywhere in the profile.
    pub fn peak_rate_per_s(&self) -> f64 {
        self.points
            .iter()
            .map(|&(_, rate)| rate)
            .fold(0.0, f64::max)
    }

    /// The mean rate from `from_s` to `to_s`.
    pub fn mean_rate_per_s(&self, from_s: f64, to_s: f64) -> f64 {
        if to_s <= from_s {
            return self.rate_at(from_s);
        }
        (self.arrivals_until(to_s) - self.arrivals_until(from_s)) / (to_s - from_s)
    }

    /// The same rates `offset_s` later, run at the first rate from 0 until then: the profile in
    /// run time, with a warm-up of `offset_s` before the shape.
    pub fn delayed(&self, offset_s: f64) -> RateProfile {
        let mut points = vec![(0.0, self.points[0].1)];
        points.extend(
            self.points
                .iter()
                .map(|&(time, rate)| (time + offset_s, rate)),
        );
        RateProfile::new(points)
    }
}

/// A parsed `--shape`.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A rate over time (ramp, steps, spike, sine, per-second trace); `length_s` is how long
    /// the shape means to run (the default measured time), and a shape that `repeats` (a sine)
    /// starts over after it.
    Rates {
        profile: RateProfile,
        length_s: f64,
        repeats: bool,
    },
    /// Recorded arrival instants, seconds since the trace's start, in order.
    Arrivals { times_s: Vec<f64> },
}

impl Shape {
    /// Parses the `--shape` grammar:
    ///
    /// - `step:100/s@0s,2000/s@10s,100/s@40s` (a rate from each time on; before the first, the
    ///   first rate)
    /// - `ramp:100/s..2000/s@30s` (linear from 0 s to 30 s, then held), or `ramp:A..B@10s..40s`
    /// - `spike:base=100/s,peak=2000/s,at=10s,for=20s`
    /// - `sine:min=100/s,max=2000/s,period=60s` (starts at min, peaks at half a period)
    /// - `trace:FILE` (CSV: one column of arrival timestamps in seconds, or `second,rate` rows)
    ///
    /// Rates are `N`, `N/s`, `N/m` or `N/h`; errors name the part that is wrong.
    pub fn parse(text: &str) -> Result<Shape, String> {
        let (kind, body) = text.split_once(':').ok_or_else(|| {
            format!("--shape {text}: expected KIND:..., KIND one of step, ramp, spike, sine, trace")
        })?;
        let error = |part: &str, why: &str| format!("--shape {text}: {part}: {why}");
        match kind {
            "step" => parse_steps(body, &error),
            "ramp" => parse_ramp(body, &error),
            "spike" => parse_spike(body, &error),
            "sine" => parse_sine(body, &error),
            "trace" => {
                let bytes = read_trace(Path::new(body)).map_err(|why| error(body, &why))?;
                parse_trace(&bytes).map_err(|why| error(body, &why))
            }
            other => Err(error(
                other,
                "unknown shape; expected step, ramp, spike, sine or trace",
            )),
        }
    }

    /// The measured time a run of this shape takes without `--duration`.
    pub fn default_duration_ns(&self) -> u64 {
        let length_s = match self {
            Shape::Rates { length_s, .. } => *length_s,
            Shape::Arrivals { times_s } => times_s.last().copied().unwrap_or(0.0),
        };
        ((length_s * NANOSECONDS_PER_SECOND as f64).ceil() as u64).max(NANOSECONDS_PER_SECOND)
    }

    /// The mean rate over `duration_s` from the shape's start: what the run's target rate is.
    pub fn mean_rate_per_s(&self, duration_s: f64) -> f64 {
        match self {
            Shape::Rates { profile, .. } => profile.mean_rate_per_s(0.0, duration_s),
            Shape::Arrivals { times_s } => {
                times_s.partition_point(|&time| time < duration_s) as f64 / duration_s.max(1e-9)
            }
        }
    }

    /// The target rate over `[from_s, to_s)` of shape time.
    pub fn target_rate_per_s(&self, from_s: f64, to_s: f64) -> f64 {
        match self {
            Shape::Rates { profile, .. } => profile.mean_rate_per_s(from_s.max(0.0), to_s.max(0.0)),
            Shape::Arrivals { times_s } => {
                let count = times_s.partition_point(|&time| time < to_s)
                    - times_s.partition_point(|&time| time < from_s);
                count as f64 / (to_s - from_s).max(1e-9)
            }
        }
    }
}

/// Parses a rate: `100`, `100/s`, `6000/m`, `360000/h`.
fn parse_rate_per_s(text: &str) -> Result<f64, String> {
    let (number, per_s) = if let Some(number) = text.strip_suffix("/s") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix("/m") {
        (number, 1.0 / 60.0)
    } else if let Some(number) = text.strip_suffix("/h") {
        (number, 1.0 / 3600.0)
    } else {
        (text, 1.0)
    };
    let rate = number
        .replace('_', "")
        .parse::<f64>()
        .ok()
        .filter(|rate| rate.is_finite() && *rate >= 0.0)
        .ok_or("expected a rate such as 100/s, 6000/m or 100")?
        * per_s;
    if rate > SHAPE_RATE_MAX {
        return Err(format!("at most {SHAPE_RATE_MAX}/s"));
    }
    Ok(rate)
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_duration_ns("--shape", text)
        .map(|ns| ns as f64 / NANOSECONDS_PER_SECOND as f64)
        .map_err(|_| "expected a time such as 10s, 500ms or 2m".to_string())
}

fn parse_steps(body: &str, error: &dyn Fn(&str, &str) -> String) -> Result<Shape, String> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for part in body.split(',') {
        if points.len() >= 2 * SHAPE_STEPS_MAX {
            return Err(error(part, &format!("at most {SHAPE_STEPS_MAX} steps")));
        }
        let (rate, at) = match part.split_once('@') {
            Some((rate, at)) => (rate, Some(at)),
            None if points.is_empty() => (part, None),
            None => return Err(error(part, "expected RATE@TIME, e.g. 2000/s@10s")),
        };
        let rate = parse_rate_per_s(rate).map_err(|why| error(part, &why))?;
        let at_s = at
            .map(parse_seconds)
            .transpose()
            .map_err(|why| error(part, &why))?
            .unwrap_or(0.0);
        if let Some(&(last_s, _)) = points.last() {
            if at_s <= last_s {
                return Err(error(part, "step times must increase"));
            }
            points.push((at_s, points[points.len() - 1].1));
        } else if at_s > 0.0 {
            points.push((0.0, rate));
        }
        points.push((at_s, rate));
    }
    let length_s = points.last().map_or(0.0, |&(time, _)| time) + tail_s();
    Ok(rates(points, length_s))
}

fn parse_ramp(body: &str, error: &dyn Fn(&str, &str) -> String) -> Result<Shape, String> {
    let expected = "expected FROM..TO@TIME or FROM..TO@START..END, e.g. 100/s..2000/s@30s";
    let (range, times) = body.split_once('@').ok_or_else(|| error(body, expected))?;
    let (from, to) = range
        .split_once("..")
        .ok_or_else(|| error(range, expected))?;
    let from = parse_rate_per_s(from).map_err(|why| error(from, &why))?;
    let to = parse_rate_per_s(to).map_err(|why| error(to, &why))?;
    let (start, end) = times.split_once("..").unwrap_or(("0s", times));
    let start_s = parse_seconds(start).map_err(|why| error(start, &why))?;
    let end_s = parse_seconds(end).map_err(|why| error(end, &why))?;
    if end_s <= start_s {
        return Err(error(times, "the ramp must end after it starts"));
    }
    let mut points = vec![(0.0, from)];
    if start_s > 0.0 {
        points.push((start_s, from));
    }
    points.push((end_s, to));
    Ok(rates(points, end_s + tail_s()))
}

/// Splits `key=value,...` into values for `keys`, each required once.
fn fields<'t>(
    body: &'t str,
    keys: &[&str],
    error: &dyn Fn(&str, &str) -> String,
) -> Result<Vec<&'t str>, String> {
    let mut values: Vec<Option<&str>> = vec![None; keys.len()];
    for part in body.split(',') {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            error(
                part,
                &format!("expected key=value, keys {}", keys.join(", ")),
            )
        })?;
        let index = keys
            .iter()
            .position(|&known| known == key)
            .ok_or_else(|| error(key, &format!("unknown key; expected {}", keys.join(", "))))?;
        if values[index].replace(value).is_some() {
            return Err(error(key, "given twice"));
        }
    }
    keys.iter()
        .zip(values)
        .map(|(key, value)| value.ok_or_else(|| error(key, "missing")))
        .collect()
}

fn parse_spike(body: &str, error: &dyn Fn(&str, &str) -> String) -> Result<Shape, String> {
    let values = fields(body, &["base", "peak", "at", "for"], error)?;
    let base = parse_rate_per_s(values[0]).map_err(|why| error(values[0], &why))?;
    let peak = parse_rate_per_s(values[1]).map_err(|why| error(values[1], &why))?;
    let at_s = parse_seconds(values[2]).map_err(|why| error(values[2], &why))?;
    let for_s = parse_seconds(values[3]).map_err(|why| error(values[3], &why))?;
    if for_s <= 0.0 {
        return Err(error(values[3], "the spike must last"));
    }
    let mut points = vec![(0.0, base)];
    if at_s > 0.0 {
        points.push((at_s, base));
    }
    points.extend([(at_s, peak), (at_s + for_s, peak), (at_s + for_s, base)]);
    Ok(rates(points, at_s + for_s + tail_s()))
}

fn parse_sine(body: &str, error: &dyn Fn(&str, &str) -> String) -> Result<Shape, String> {
    let values = fields(body, &["min", "max", "period"], error)?;
    let min = parse_rate_per_s(values[0]).map_err(|why| error(values[0], &why))?;
    let max = parse_rate_per_s(values[1]).map_err(|why| error(values[1], &why))?;
    let period_s = parse_seconds(values[2]).map_err(|why| error(values[2], &why))?;
    if max < min {
        return Err(error(values[1], "max must be at least min"));
    }
    if period_s < 0.001 {
        return Err(error(values[2], "the period must be at least 1ms"));
    }
    Ok(Shape::Rates {
        profile: sine_profile(min, max, period_s),
        length_s: period_s,
        repeats: true,
    })
}

/// One period of `min + (max − min)·(1 − cos(2πt/period))/2`, drawn straight between
/// `SINE_POINTS_PER_PERIOD` points; after it the profile holds `min`, so a longer run is given
/// more periods by `Shape::extended`.
fn sine_profile(min: f64, max: f64, period_s: f64) -> RateProfile {
    let points = (0..=SINE_POINTS_PER_PERIOD)
        .map(|index| {
            let phase = index as f64 / SINE_POINTS_PER_PERIOD as f64;
            let rate = min + (max - min) * (1.0 - (std::f64::consts::TAU * phase).cos()) / 2.0;
            (phase * period_s, rate)
        })
        .collect();
    RateProfile::new(points)
}

impl Shape {
    /// The shape for a run of `duration_s`: a repeating shape (a sine) repeats its period to
    /// cover the run (within `PROFILE_POINTS_MAX` points), the others are as given.
    pub fn extended(&self, duration_s: f64) -> Result<Shape, String> {
        let Shape::Rates {
            profile,
            length_s,
            repeats: true,
        } = self
        else {
            return Ok(self.clone());
        };
        let periods = (duration_s / length_s).ceil().max(1.0) as usize;
        if periods.saturating_mul(profile.points.len()) > PROFILE_POINTS_MAX {
            return Err(format!(
                "--shape: at most {} periods in one run",
                PROFILE_POINTS_MAX / profile.points.len()
            ));
        }
        let mut points = profile.points.clone();
        for period in 1..periods {
            let offset_s = period as f64 * length_s;
            points.extend(
                profile.points[1..]
                    .iter()
                    .map(|&(time, rate)| (time + offset_s, rate)),
            );
        }
        Ok(Shape::Rates {
            profile: RateProfile::new(points),
            length_s: *length_s,
            repeats: true,
        })
    }
}

fn tail_s() -> f64 {
    SHAPE_TAIL_NS as f64 / NANOSECONDS_PER_SECOND as f64
}

fn rates(points: Vec<(f64, f64)>, length_s: f64) -> Shape {
    Shape::Rates {
        profile: RateProfile::new(points),
        length_s,
        repeats: false,
    }
}

/// Reads a trace file, refusing one larger than `TRACE_FILE_BYTES_MAX`.
fn read_trace(path: &Path) -> Result<Vec<u8>, String> {
    let size = std::fs::metadata(path)
        .map_err(|error| format!("cannot read: {error}"))?
        .len();
    if size > TRACE_FILE_BYTES_MAX {
        return Err(format!("larger than {TRACE_FILE_BYTES_MAX} bytes"));
    }
    std::fs::read(path).map_err(|error| format!("cannot read: {error}"))
}

/// Parses a trace: CSV with an optional header line. One column: arrival timestamps in seconds
/// (relative, or since 1970: then shifted to start at 0), in non-decreasing order. Two columns:
/// `second,rate` rows in increasing seconds, each rate held until the next row's second (the
/// last for one second).
pub fn parse_trace(bytes: &[u8]) -> Result<Shape, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let values: Option<Vec<f64>> = cells
            .iter()
            .map(|cell| cell.parse::<f64>().ok().filter(|value| value.is_finite()))
            .collect();
        match values {
            Some(values) => rows.push((number + 1, values)),
            // A header is allowed on the first line with content.
            None if rows.is_empty() && !cells.is_empty() => continue,
            None => return Err(format!("line {}: expected numbers", number + 1)),
        }
        if rows.len() > TRACE_ARRIVALS_MAX {
            return Err(format!("more than {TRACE_ARRIVALS_MAX} rows"));
        }
    }
    let Some((_, first)) = rows.first() else {
        return Err("no rows".to_string());
    };
    match first.len() {
        1 => {
            // Timestamps since 1970 start at the first; relative ones keep their offset.
            let origin = if first[0] > 1e9 { first[0] } else { 0.0 };
            let mut times_s = Vec::with_capacity(rows.len());
            for (line, values) in &rows {
                let [time] = values[..] else {
                    return Err(format!(
                        "line {line}: expected one column, as the first row"
                    ));
                };
                let time = time - origin;
                if time < 0.0 || times_s.last().is_some_and(|&last| time < last) {
                    return Err(format!("line {line}: timestamps must not go back"));
                }
                times_s.push(time);
            }
            Ok(Shape::Arrivals { times_s })
        }
        2 => {
            let mut points: Vec<(f64, f64)> = Vec::with_capacity(2 * rows.len());
            let origin = first[0];
            for (line, values) in &rows {
                let [second, rate] = values[..] else {
                    return Err(format!(
                        "line {line}: expected second,rate, as the first row"
                    ));
                };
                let at_s = second - origin;
                if points.last().is_some_and(|&(last, _)| at_s <= last) {
                    return Err(format!("line {line}: seconds must increase"));
                }
                if !(0.0..=SHAPE_RATE_MAX).contains(&rate) {
                    return Err(format!(
                        "line {line}: rate {rate} out of 0..{SHAPE_RATE_MAX}"
                    ));
                }
                if let Some(&(_, last_rate)) = points.last() {
                    points.push((at_s, last_rate));
                }
                points.push((at_s, rate));
            }
            let end_s = points.last().map_or(0.0, |&(time, _)| time) + 1.0;
            // The last row's rate holds for one second, then the trace is over.
            points.push((end_s, points[points.len() - 1].1));
            points.push((end_s, 0.0));
            Ok(rates(points, end_s))
        }
        _ => Err("expected one column (timestamps) or two (second,rate)".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(shape: &str) -> RateProfile {
        match Shape::parse(shape).unwrap() {
            Shape::Rates { profile, .. } => profile,
            other => panic!("{other:?}"),
        }
    }

    fn near(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= 1e-6 * expected.abs().max(1.0)
    }

    #[test]
    fn steps_hold_each_rate_from_its_time() {
        let steps = profile("step:100/s@0s,2000/s@10s,100/s@40s");
        assert_eq!(steps.rate_at(0.0), 100.0);
        assert_eq!(steps.rate_at(9.999), 100.0);
        assert_eq!(steps.rate_at(10.0), 2000.0);
        assert_eq!(steps.rate_at(39.0), 2000.0);
        assert_eq!(steps.rate_at(40.0), 100.0);
        assert_eq!(steps.rate_at(1e6), 100.0);
        // By hand: 10 s at 100, then 30 s at 2,000: 1,000 + 60,000 arrivals by 40 s.
        assert!(near(steps.arrivals_until(10.0), 1000.0));
        assert!(near(steps.arrivals_until(40.0), 61_000.0));
        assert!(near(steps.arrivals_until(50.0), 62_000.0));
        assert!(near(steps.time_of(1000.0).unwrap(), 10.0));
        assert!(near(steps.time_of(3000.0).unwrap(), 11.0));
        assert!(near(steps.time_of(61_050.0).unwrap(), 40.5));
        assert!(near(steps.mean_rate_per_s(9.5, 10.5), 1050.0));
        assert_eq!(steps.peak_rate_per_s(), 2000.0);
        let Shape::Rates { length_s, .. } = Shape::parse("step:5,7@2s").unwrap() else {
            panic!()
        };
        assert_eq!(length_s, 12.0);
    }

    #[test]
    fn a_ramp_is_linear_and_its_inverse_solves_the_quadratic() {
        let ramp = profile("ramp:100/s..2000/s@30s");
        assert!(near(ramp.rate_at(15.0), 1050.0));
        assert_eq!(ramp.rate_at(100.0), 2000.0);
        // ∫0..t (100 + 63.33·s) ds = 100t + 31.67t²: 316.67 + 100 = 416.67 at 10 s... by hand
        // at 30 s: 30·(100 + 2000)/2 = 31,500.
        assert!(near(ramp.arrivals_until(30.0), 31_500.0));
        for time in [0.0, 0.5, 3.0, 17.25, 29.9, 30.0, 45.0] {
            let arrivals = ramp.arrivals_until(time);
            assert!(near(ramp.time_of(arrivals).unwrap(), time), "{time}");
        }
        let delayed = profile("ramp:0..600/m@10s..20s");
        assert_eq!(delayed.rate_at(5.0), 0.0);
        assert!(near(delayed.rate_at(15.0), 5.0));
        // Nothing arrives before 10 s: the first arrival's time solves 0.5·1·d² = 1.
        assert!(near(delayed.time_of(1.0).unwrap(), 10.0 + 2f64.sqrt()));
        // A falling ramp reaches zero and stays: arrivals beyond its total never come.
        let falling = profile("ramp:10..0@10s");
        assert!(near(falling.arrivals_until(20.0), 50.0));
        assert!(near(falling.time_of(50.0).unwrap(), 10.0));
        assert_eq!(falling.time_of(50.5), None);
    }

    #[test]
    fn a_spike_and_a_sine() {
        let spike = profile("spike:base=100/s,peak=2000/s,at=10s,for=20s");
        assert_eq!(spike.rate_at(5.0), 100.0);
        assert_eq!(spike.rate_at(10.0), 2000.0);
        assert_eq!(spike.rate_at(29.99), 2000.0);
        assert_eq!(spike.rate_at(30.0), 100.0);
        assert!(near(spike.arrivals_until(40.0), 1000.0 + 40_000.0 + 1000.0));
        let sine = profile("sine:min=100/s,max=300/s,period=1m");
        assert!(near(sine.rate_at(0.0), 100.0));
        assert!(near(sine.rate_at(30.0), 300.0));
        assert!((sine.rate_at(15.0) - 200.0).abs() < 0.01);
        // One whole period averages (min + max) / 2.
        assert!(near(sine.arrivals_until(60.0), 60.0 * 200.0));
        let Shape::Rates {
            profile: longer, ..
        } = Shape::parse("sine:min=1,max=3,period=10s")
            .unwrap()
            .extended(35.0)
            .unwrap()
        else {
            panic!()
        };
        assert!(near(longer.rate_at(35.0), 3.0));
        assert!(near(longer.arrivals_until(40.0), 80.0));
    }

    #[test]
    fn a_delayed_profile_runs_the_warmup_at_the_first_rate() {
        let delayed = profile("step:10/s,20/s@1s").delayed(2.0);
        assert_eq!(delayed.rate_at(1.0), 10.0);
        assert_eq!(delayed.rate_at(3.5), 20.0);
        assert!(near(delayed.arrivals_until(4.0), 20.0 + 10.0 + 20.0));
    }

    #[test]
    fn traces_of_rates_and_of_instants() {
        let rates = parse_trace(b"second,rate\n100,10\n101,20\n102,0\n103,5\n").unwrap();
        let Shape::Rates {
            profile, length_s, ..
        } = &rates
        else {
            panic!("{rates:?}")
        };
        assert_eq!(*length_s, 4.0);
        assert_eq!(profile.rate_at(0.5), 10.0);
        assert_eq!(profile.rate_at(1.5), 20.0);
        assert_eq!(profile.rate_at(2.5), 0.0);
        assert_eq!(profile.rate_at(3.5), 5.0);
        assert_eq!(profile.rate_at(4.5), 0.0);
        assert!(near(profile.arrivals_until(10.0), 35.0));
        assert_eq!(profile.time_of(35.5), None);
        // Between 30 and 31 arrivals the rate is zero for a second: the 31st waits for it.
        assert!(near(profile.time_of(31.0).unwrap(), 3.2));
        assert!(near(rates.target_rate_per_s(1.0, 2.0), 20.0));

        let instants =
            parse_trace(b"1795305600.0\n1795305600.25\n1795305600.25\n1795305601.5\n").unwrap();
        assert_eq!(
            instants,
            Shape::Arrivals {
                times_s: vec![0.0, 0.25, 0.25, 1.5]
            }
        );
        assert_eq!(instants.default_duration_ns(), 1_500_000_000);
        assert!(near(instants.target_rate_per_s(0.0, 1.0), 3.0));
    }

    #[test]
    fn bad_shapes_name_the_part_that_is_wrong() {
        for (shape, part) in [
            ("wave:1", "wave"),
            ("step", "expected KIND"),
            ("step:100/s@0s,fast@10s", "fast@10s"),
            ("step:100/s@5s,200/s@5s", "200/s@5s"),
            ("step:100,200", "200"),
            ("step:100/s@0s,200/s@ten", "200/s@ten"),
            ("ramp:100/s@30s", "100/s"),
            ("ramp:100/s..x@30s", "x"),
            ("ramp:1..2@30s..10s", "30s..10s"),
            ("spike:base=1,peak=2,at=1s", "for: missing"),
            ("spike:base=1,peak=2,at=1s,for=0s", "0s"),
            ("spike:base=1,peak=2,at=1s,for=1s,width=2", "width"),
            (
                "spike:base=1,base=2,peak=2,at=1s,for=1s",
                "base: given twice",
            ),
            ("sine:min=5,max=1,period=1m", "max must be"),
            ("sine:min=1,max=5,period=0s", "period"),
            ("step:20000000/s", "at most"),
            ("trace:/nonexistent/trace.csv", "cannot read"),
        ] {
            let error = Shape::parse(shape).unwrap_err();
            assert!(error.contains(part), "{shape}: {error}");
        }
        for (trace, why) in [
            (&b""[..], "no rows"),
            (b"1\n0.5\n", "line 2: timestamps must not go back"),
            (b"0,1\n0,2\n", "line 2: seconds must increase"),
            (b"0,1\n1\n", "line 2: expected second,rate"),
            (b"0,-1\n", "line 1: rate"),
            (b"1,2,3\n", "one column"),
            (b"t\n1\nx\n", "line 3: expected numbers"),
        ] {
            let error = parse_trace(trace).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }
}

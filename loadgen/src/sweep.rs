//! `--sweep NAME=V1,V2,...`: the points of a capacity question, each a simulated run of the same
//! command line with one setting (or, with several `--sweep`, one combination) changed. Pure:
//! which points there are and each point's command line; `sweep_run` runs and reports them.
//!
//! NAME is a flag without its dashes (`consumers`, `rate`, `work-time`, `poll-backoff`, ...),
//! whose every occurrence the point's value replaces, or a key of `--autoscale`
//! (`queue-length`, `max`, `cooldown`, ...), appended to the policy given (a later key wins).
//! Values are split on commas, or on semicolons when a value holds commas
//! (`work-time=lognormal:p50=20ms,p99=200ms;exp:mean=20ms`).

/// The keys of `--autoscale` a sweep may set.
const AUTOSCALE_KEYS: [&str; 14] = [
    "queue-length",
    "activation",
    "min",
    "max",
    "polling",
    "cooldown",
    "sync",
    "tolerance",
    "up-window",
    "down-window",
    "up",
    "down",
    "count",
    "cold-start",
];
/// Flags a sweep owns (its own outputs) or that make no sense per point.
const REFUSED_FLAGS: [&str; 8] = [
    "--plot",
    "--csv",
    "--hdr-log",
    "--rate-steps",
    "--find-max",
    "--start-at",
    "--endpoint",
    "--connection-string",
];
/// Flags without a value, the sweep's own outputs, the stepped runs' and the target's: nothing
/// a point may set (the target is not used by a simulation).
const UNSWEPT_FLAGS: [&str; 24] = [
    "sweep",
    "simulate",
    "refill",
    "quiet",
    "insecure",
    "help",
    "json",
    "html",
    "plot",
    "csv",
    "hdr-log",
    "rate-steps",
    "find-max",
    "find-max-start",
    "find-max-precision",
    "step-duration",
    "start-at",
    "endpoint",
    "connection-string",
    "account",
    "key",
    "sas",
    "bearer",
    "ca",
];
/// The most points one sweep may run.
pub const SWEEP_POINTS_MAX: usize = 1_000;

/// One swept setting and its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axis {
    pub name: String,
    pub values: Vec<String>,
}

/// A sweep's command line: the base arguments (without `--sweep`, `--json`, `--html` and
/// `--quiet`, which belong to the sweep), its axes and its outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepOptions {
    pub base: Vec<String>,
    pub axes: Vec<Axis>,
    pub json_path: Option<std::path::PathBuf>,
    pub html_path: Option<std::path::PathBuf>,
    pub quiet: bool,
}

/// A point: one value per axis, in the axes' order.
pub type Point = Vec<(String, String)>;

/// `point`'s settings as `name=value` words, as reports name a point.
pub fn describe(point: &Point) -> String {
    let words: Vec<String> = point
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    words.join(" ")
}

impl SweepOptions {
    /// Takes a command line apart if it holds a `--sweep`; `Ok(None)` when it does not.
    pub fn parse(arguments: &[String]) -> Result<Option<SweepOptions>, String> {
        let mut sweep = SweepOptions {
            base: Vec::new(),
            axes: Vec::new(),
            json_path: None,
            html_path: None,
            quiet: false,
        };
        let mut index = 0;
        while index < arguments.len() {
            let argument = &arguments[index];
            index += 1;
            let (flag, inline) = match argument.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_string())),
                _ => (argument.as_str(), None),
            };
            let mut value = || -> Result<String, String> {
                if let Some(value) = inline.clone() {
                    return Ok(value);
                }
                index += 1;
                arguments
                    .get(index - 1)
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag {
                "--sweep" => sweep.axes.push(Axis::parse(&value()?)?),
                "--json" => sweep.json_path = Some(value()?.into()),
                "--html" => sweep.html_path = Some(value()?.into()),
                "--quiet" => sweep.quiet = true,
                _ => sweep.base.push(argument.clone()),
            }
        }
        if sweep.axes.is_empty() {
            return Ok(None);
        }
        for refused in REFUSED_FLAGS {
            if sweep
                .base
                .iter()
                .any(|argument| argument == refused || argument.starts_with(&format!("{refused}=")))
            {
                return Err(format!(
                    "--sweep simulates each point: not with {refused} (use --json and --html)"
                ));
            }
        }
        let points = sweep
            .axes
            .iter()
            .try_fold(1usize, |points, axis| points.checked_mul(axis.values.len()));
        if points.is_none_or(|points| points > SWEEP_POINTS_MAX) {
            return Err(format!("--sweep: at most {SWEEP_POINTS_MAX} points"));
        }
        let mut names: Vec<&str> = sweep.axes.iter().map(|axis| axis.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err("--sweep: each setting once".to_string());
        }
        Ok(Some(sweep))
    }

    /// Every point, the last axis varying fastest.
    pub fn points(&self) -> Vec<Point> {
        self.axes.iter().fold(vec![Vec::new()], |points, axis| {
            points
                .iter()
                .flat_map(|point| {
                    axis.values.iter().map(move |value| {
                        let mut point = point.clone();
                        point.push((axis.name.clone(), value.clone()));
                        point
                    })
                })
                .collect()
        })
    }

    /// The command line of `point`: the base with each setting put in, simulated and quiet.
    pub fn point_arguments(&self, point: &Point) -> Result<Vec<String>, String> {
        let mut arguments = self.base.clone();
        for (name, value) in point {
            if AUTOSCALE_KEYS.contains(&name.as_str()) {
                let policy = flag_value_mut(&mut arguments, "--autoscale").ok_or_else(|| {
                    format!("--sweep {name}: an --autoscale key needs --autoscale")
                })?;
                *policy = match policy.as_str() {
                    "keda" => format!("{name}={value}"),
                    given => format!("{given},{name}={value}"),
                };
            } else {
                let flag = format!("--{name}");
                remove_flag(&mut arguments, &flag);
                arguments.push(flag);
                arguments.push(value.clone());
            }
        }
        if !arguments.iter().any(|argument| argument == "--simulate") {
            arguments.push("--simulate".to_string());
        }
        arguments.push("--quiet".to_string());
        Ok(arguments)
    }
}

impl Axis {
    /// Parses `NAME=V1,V2,...` (or `NAME=V1;V2;...`).
    fn parse(text: &str) -> Result<Axis, String> {
        let (name, values) = text
            .split_once('=')
            .filter(|(name, values)| !name.is_empty() && !values.is_empty())
            .ok_or_else(|| format!("--sweep {text}: expected NAME=V1,V2,..."))?;
        let name = name.trim_start_matches("--");
        if UNSWEPT_FLAGS.contains(&name) {
            return Err(format!("--sweep {text}: {name} cannot be swept"));
        }
        let separator = if values.contains(';') { ';' } else { ',' };
        let values: Vec<String> = values.split(separator).map(str::to_string).collect();
        if values.iter().any(String::is_empty) {
            return Err(format!("--sweep {text}: an empty value"));
        }
        Ok(Axis {
            name: name.to_string(),
            values,
        })
    }
}

/// The value of the last `flag` in `arguments` (`--flag V` or `--flag=V`), to change in place.
fn flag_value_mut<'a>(arguments: &'a mut Vec<String>, flag: &str) -> Option<&'a mut String> {
    let position = arguments.iter().rposition(|argument| {
        argument == flag
            || argument
                .strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })?;
    if arguments[position] != flag {
        // `--flag=V`: made two arguments, so the value stands alone.
        let value = arguments[position][flag.len() + 1..].to_string();
        arguments[position] = flag.to_string();
        arguments.insert(position + 1, value);
    }
    arguments.get_mut(position + 1)
}

/// Removes every `flag V` and `flag=V` from `arguments`.
fn remove_flag(arguments: &mut Vec<String>, flag: &str) {
    let mut kept = Vec::with_capacity(arguments.len());
    let mut index = 0;
    while index < arguments.len() {
        let argument = &arguments[index];
        if argument == flag {
            index += 2;
            continue;
        }
        if argument
            .strip_prefix(flag)
            .is_some_and(|rest| rest.starts_with('='))
        {
            index += 1;
            continue;
        }
        kept.push(argument.clone());
        index += 1;
    }
    *arguments = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_command_line_without_sweep_is_not_a_sweep() {
        assert_eq!(
            SweepOptions::parse(&arguments("--rate 10 --json a.json")),
            Ok(None)
        );
    }

    #[test]
    fn points_cross_every_axis_and_replace_or_extend_settings() {
        let sweep = SweepOptions::parse(&arguments(
            "--scenario workers --consumers 4 --autoscale=max=8,cooldown=60s --json s.json \
             --sweep consumers=2,3 --sweep=queue-length=5,10 --html s.html --quiet",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            sweep.json_path.as_deref(),
            Some(std::path::Path::new("s.json"))
        );
        assert_eq!(
            sweep.html_path.as_deref(),
            Some(std::path::Path::new("s.html"))
        );
        assert!(sweep.quiet);
        let points = sweep.points();
        assert_eq!(points.len(), 4);
        assert_eq!(
            points[1],
            vec![
                ("consumers".to_string(), "2".to_string()),
                ("queue-length".to_string(), "10".to_string())
            ]
        );
        assert_eq!(
            sweep.point_arguments(&points[1]).unwrap(),
            arguments(
                "--scenario workers --autoscale max=8,cooldown=60s,queue-length=10 \
                 --consumers 2 --simulate --quiet"
            )
        );
        // `keda` alone is replaced by the key; a flag given inline is replaced too.
        let sweep = SweepOptions::parse(&arguments(
            "--autoscale keda --rate=50 --simulate --sweep rate=10 --sweep cooldown=1s",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            sweep.point_arguments(&sweep.points()[0]).unwrap(),
            arguments("--autoscale cooldown=1s --simulate --rate 10 --quiet")
        );
    }

    #[test]
    fn values_with_commas_split_on_semicolons() {
        let sweep = SweepOptions::parse(&arguments(
            "--sweep work-time=lognormal:p50=20ms,p99=200ms;exp:mean=20ms",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            sweep.axes[0].values,
            vec!["lognormal:p50=20ms,p99=200ms", "exp:mean=20ms"]
        );
    }

    #[test]
    fn bad_sweeps_are_refused() {
        for bad in [
            "--sweep rate",
            "--sweep =1,2",
            "--sweep rate=",
            "--sweep rate=1,,2",
            "--sweep refill=1",
            "--sweep rate=1 --sweep rate=2",
            "--sweep rate=1 --plot x.svg",
            "--sweep rate=1 --rate-steps 1,2",
            "--sweep rate=1 --endpoint=http://127.0.0.1:10001/devstoreaccount1",
            "--sweep plot=a.svg,b.svg",
            "--sweep rate-steps=100,200;300",
            "--sweep find-max=p99=1ms",
            "--sweep hdr-log=a,b",
            "--sweep",
        ] {
            assert!(SweepOptions::parse(&arguments(bad)).is_err(), "{bad}");
        }
        let too_many: String = (0..1001).map(|rate| format!("{},", rate + 1)).collect();
        let text = format!("--sweep rate={}", too_many.trim_end_matches(','));
        assert!(SweepOptions::parse(&arguments(&text)).is_err());
        // An autoscale key without --autoscale is refused when the point is made.
        let sweep = SweepOptions::parse(&arguments("--sweep cooldown=1s"))
            .unwrap()
            .unwrap();
        assert!(sweep.point_arguments(&sweep.points()[0]).is_err());
    }
}

//! How the command line spells numbers: times (`10s`, `500ms`), ratios (`1%`, `0.01`), rates
//! and counts, each refused with a message naming the flag. The ground floor of the loadgen: the
//! plan types that parse their own flags (`--retry`, `--work-time`, `--find-max`…) use these
//! too.

/// Parses a positive rate per second.
pub fn parse_rate(flag: &str, text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{flag} {text}: not a number"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("{flag} {text}: must be positive"));
    }
    Ok(rate)
}

/// Parses an integer in `minimum..=maximum`.
pub fn number(flag: &str, text: &str, minimum: usize, maximum: usize) -> Result<usize, String> {
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
    let (number, unit_ns) = if let Some(number) = text.strip_suffix("us") {
        (number, 1e3)
    } else if let Some(number) = text.strip_suffix("ms") {
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

/// Parses `1%` or `0.01` for `flag`.
pub fn parse_ratio(flag: &str, text: &str) -> Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number, 0.01),
        None => (text, 1.0),
    };
    let ratio = number
        .parse::<f64>()
        .map(|value| value * scale)
        .map_err(|_| format!("{flag} {text}: expected e.g. 1% or 0.01"))?;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(format!("{flag} {text}: must be between 0 and 100%"));
    }
    Ok(ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("-", "250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("-", "10s"), Ok(10_000_000_000));
        assert_eq!(parse_duration_ns("-", "500ms"), Ok(500_000_000));
        assert_eq!(parse_duration_ns("-", "2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("-", "3"), Ok(3_000_000_000));
        assert_eq!(parse_duration_ns("-", "0s"), Ok(0));
        assert!(parse_duration_ns("-", "1y").is_err());
    }
}

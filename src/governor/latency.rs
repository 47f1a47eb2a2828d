//! `--latency SPEC`: service time added before a request is answered, drawn per request. The
//! runtime waits for it on a timer, so the shard serves other connections meanwhile.
//!
//! SPEC is one of: a fixed time (`20ms`, `1s`), a uniform range (`5ms-50ms`), or a log-normal
//! given by two quantiles (`p50=20ms,p99=200ms`). Times take `us`, `ms` or `s`.

use crate::limits::LATENCY_US_MAX;
use crate::random::SplitMix64;

/// A distribution of added service time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Latency {
    /// Always this many µs.
    Fixed(u64),
    /// Uniform between the two bounds, µs, low first.
    Uniform(u64, u64),
    /// Log-normal: `exp(mu + sigma × z)` µs with z standard normal.
    LogNormal {
        /// ln of the median, µs.
        mu: f64,
        /// Spread: (ln p99 − ln p50) / z(0.99).
        sigma: f64,
    },
}

/// The standard normal's 0.99 quantile.
const Z_99: f64 = 2.326_347_874_040_841;

impl Latency {
    /// Parses SPEC; the error says what is wrong.
    pub fn parse(spec: &str) -> Result<Latency, String> {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix("p50=") {
            let (p50, p99) = rest
                .split_once(",p99=")
                .ok_or("a log-normal is p50=TIME,p99=TIME")?;
            let (p50, p99) = (duration_us(p50)?, duration_us(p99)?);
            if p50 == 0 || p99 < p50 {
                return Err("a log-normal needs 0 < p50 <= p99".to_string());
            }
            let mu = (p50 as f64).ln();
            return Ok(Latency::LogNormal {
                mu,
                sigma: ((p99 as f64).ln() - mu) / Z_99,
            });
        }
        if let Some((low, high)) = spec.split_once('-') {
            let (low, high) = (duration_us(low)?, duration_us(high)?);
            if high < low {
                return Err("a range is LOW-HIGH with LOW <= HIGH".to_string());
            }
            return Ok(Latency::Uniform(low, high));
        }
        Ok(Latency::Fixed(duration_us(spec)?))
    }

    /// Draws one service time, µs, at most `LATENCY_US_MAX`.
    pub fn sample_us(&self, random: &mut SplitMix64) -> u64 {
        let us = match *self {
            Latency::Fixed(us) => us,
            Latency::Uniform(low, high) => low + random.next_u64() % (high - low + 1),
            Latency::LogNormal { mu, sigma } => {
                // Box-Muller: two uniforms in (0, 1] give one standard normal.
                let u1 = ((random.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
                let u2 = (random.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mu + sigma * z).exp() as u64
            }
        };
        us.min(LATENCY_US_MAX)
    }
}

/// `20ms`, `500us`, `1s` (also `1.5s`) in µs, at most `LATENCY_US_MAX`.
pub fn duration_us(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit_us) = if let Some(number) = text.strip_suffix("us") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix("ms") {
        (number, 1_000.0)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1_000_000.0)
    } else {
        return Err(format!("{text:?} needs a unit: us, ms or s"));
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a time such as 20ms"))?;
    let us = value * unit_us;
    if !(0.0..=LATENCY_US_MAX as f64).contains(&us) {
        return Err(format!(
            "{text:?} is outside 0 to {} s",
            LATENCY_US_MAX / 1_000_000
        ));
    }
    Ok(us as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        let cases = [
            ("20ms", Ok(Latency::Fixed(20_000))),
            ("500us", Ok(Latency::Fixed(500))),
            ("1.5s", Ok(Latency::Fixed(1_500_000))),
            ("5ms-50ms", Ok(Latency::Uniform(5_000, 50_000))),
            ("20", Err("needs a unit")),
            ("50ms-5ms", Err("LOW <= HIGH")),
            ("p50=20ms", Err("p50=TIME,p99=TIME")),
            ("p50=20ms,p99=10ms", Err("0 < p50 <= p99")),
            ("1000s", Err("outside")),
            ("xms", Err("not a time")),
        ];
        for (spec, expected) in cases {
            match (Latency::parse(spec), expected) {
                (Ok(parsed), Ok(wanted)) => assert_eq!(parsed, wanted, "{spec}"),
                (Err(error), Err(wanted)) => assert!(error.contains(wanted), "{spec}: {error}"),
                (parsed, wanted) => panic!("{spec}: {parsed:?}, wanted {wanted:?}"),
            }
        }
    }

    #[test]
    fn samples_follow_the_distribution() {
        let mut random = SplitMix64::new(1);
        assert_eq!(Latency::Fixed(7).sample_us(&mut random), 7);
        let uniform = Latency::parse("1ms-3ms").unwrap();
        assert!((0..1000)
            .map(|_| uniform.sample_us(&mut random))
            .all(|us| (1_000..=3_000).contains(&us)));
        let log_normal = Latency::parse("p50=20ms,p99=200ms").unwrap();
        let mut samples: Vec<u64> = (0..100_000)
            .map(|_| log_normal.sample_us(&mut random))
            .collect();
        samples.sort_unstable();
        let (p50, p99) = (samples[50_000], samples[99_000]);
        assert!((18_000..22_000).contains(&p50), "p50 {p50}");
        assert!((170_000..230_000).contains(&p99), "p99 {p99}");
    }
}

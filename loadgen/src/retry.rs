//! Retries as the Azure SDKs make them (`--retry exponential[:max=N,base=TIME]`): a request
//! answered 408 or 5xx (but 501 and 505, which another try will not change), or lost with its
//! connection, goes out again after an exponentially growing, jittered delay, up to a number of
//! retries. The delay follows azure-core's exponential strategy: `base × 2^(retry - 1)`, capped,
//! then drawn uniformly from its upper half so that clients do not retry in lockstep.
//!
//! Pure: the accounting asks whether an answer is retried and when.

use azq::random::SplitMix64;

use crate::schedule::unit;
use crate::units::parse_duration_ns;

/// Retries per request by default (azure-core's JavaScript and Java clients: 3).
pub const RETRIES_DEFAULT: u32 = 3;
/// Delay before the first retry by default (azure-core's JavaScript client: 1 s).
pub const BASE_DELAY_NS_DEFAULT: u64 = 1_000_000_000;
/// The longest delay between two tries (azure-core's JavaScript client: 64 s).
pub const DELAY_NS_MAX: u64 = 64_000_000_000;
/// The most retries one request may be given.
pub const RETRIES_MAX: u32 = 100;

/// How failed requests are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries after the first.
    pub retries_max: u32,
    /// The delay before the first retry, before jitter.
    pub base_delay_ns: u64,
}

impl RetryPolicy {
    /// Parses `exponential`, `exponential:max=5`, `exponential:max=5,base=100ms`; `none` is no
    /// policy.
    pub fn parse(text: &str) -> Result<Option<RetryPolicy>, String> {
        let error = || format!("--retry {text}: expected none or exponential[:max=N,base=TIME]");
        if text == "none" {
            return Ok(None);
        }
        let (kind, parameters) = text.split_once(':').unwrap_or((text, ""));
        if kind != "exponential" {
            return Err(error());
        }
        let mut policy = RetryPolicy {
            retries_max: RETRIES_DEFAULT,
            base_delay_ns: BASE_DELAY_NS_DEFAULT,
        };
        for parameter in parameters.split(',').filter(|part| !part.is_empty()) {
            match parameter.split_once('=').ok_or_else(error)? {
                ("max", value) => {
                    policy.retries_max = value
                        .parse()
                        .ok()
                        .filter(|&retries| retries <= RETRIES_MAX)
                        .ok_or_else(|| format!("--retry: max must be 0..={RETRIES_MAX}"))?;
                }
                ("base", value) => {
                    policy.base_delay_ns = parse_duration_ns("--retry base", value)?;
                    if policy.base_delay_ns > DELAY_NS_MAX {
                        return Err(format!("--retry base={value}: at most 64s"));
                    }
                }
                _ => return Err(error()),
            }
        }
        Ok(Some(policy))
    }

    /// The delay before retry number `retry` (1 for the first), jittered with `random`.
    pub fn delay_ns(&self, retry: u32, random: &mut SplitMix64) -> u64 {
        assert!(retry >= 1, "retry numbers start at 1");
        let doublings = (retry - 1).min(63);
        let capped = self
            .base_delay_ns
            .saturating_mul(1u64 << doublings)
            .min(DELAY_NS_MAX);
        let half = capped / 2;
        half + (unit(random) * (capped - half) as f64) as u64
    }
}

/// Whether an answer with `status` is worth another try: request timeouts and server errors,
/// except "not implemented" and "HTTP version not supported".
pub fn is_retriable(status: u16) -> bool {
    status == 408 || ((500..600).contains(&status) && status != 501 && status != 505)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        assert_eq!(RetryPolicy::parse("none"), Ok(None));
        assert_eq!(
            RetryPolicy::parse("exponential"),
            Ok(Some(RetryPolicy {
                retries_max: 3,
                base_delay_ns: 1_000_000_000
            }))
        );
        assert_eq!(
            RetryPolicy::parse("exponential:max=5,base=20ms"),
            Ok(Some(RetryPolicy {
                retries_max: 5,
                base_delay_ns: 20_000_000
            }))
        );
        for bad in [
            "linear",
            "exponential:max=x",
            "exponential:max=101",
            "exponential:base=2m",
            "exponential:tries=2",
            "exponential:max",
        ] {
            assert!(RetryPolicy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn delays_double_within_the_upper_half_and_are_capped() {
        let policy = RetryPolicy {
            retries_max: 10,
            base_delay_ns: 100,
        };
        let mut random = SplitMix64::new(7);
        for retry in 1..=5u32 {
            let full = 100u64 << (retry - 1);
            for _ in 0..100 {
                let delay = policy.delay_ns(retry, &mut random);
                assert!((full / 2..=full).contains(&delay), "{retry}: {delay}");
            }
        }
        let slow = RetryPolicy {
            retries_max: 100,
            base_delay_ns: 1_000_000_000,
        };
        let delay = slow.delay_ns(100, &mut random);
        assert!((DELAY_NS_MAX / 2..=DELAY_NS_MAX).contains(&delay));
    }

    #[test]
    fn retriable_statuses() {
        for status in [408, 500, 502, 503, 504, 599] {
            assert!(is_retriable(status), "{status}");
        }
        for status in [200, 400, 403, 404, 409, 429, 501, 505] {
            assert!(!is_retriable(status), "{status}");
        }
    }
}

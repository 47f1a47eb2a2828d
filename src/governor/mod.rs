//! Behaving like Azure under load: rate limits (`--profile azure`, `--queue-rate-limit`,
//! `--account-rate-limit`), added service time (`--latency`), fault injection (`--faults-api`,
//! `--faults`, `--seed`) and the counters behind `/_azq/metrics`.
//!
//! Everything here is synchronous and takes time as an argument; the runtime
//! (`runtime::control`) moves control messages between shards and waits on timers. A shard's
//! `Governor` answers "is anything configured?" with one flag, so a server started without
//! these options pays one branch per request (and one on the owner per queue command).
//!
//! - `bucket`: the token bucket; `throttle`: per-queue buckets on the owner, per-account shares.
//! - `latency`: the `--latency` distributions; `faults`: rules, matching and firing.
//! - `metrics`: per-shard counters and the Prometheus text rendering.

pub mod bucket;
pub mod faults;
pub mod latency;
pub mod metrics;
pub mod throttle;

use std::cell::{Cell, RefCell};

use crate::console::history::History;
use crate::limits::{
    AZURE_ACCOUNT_REQUESTS_PER_S, AZURE_QUEUE_MESSAGES_PER_S, RATE_BURST_MS_MAX,
    TOKEN_BUCKET_BURST_MS,
};
use crate::random::{mix64, SplitMix64};

use faults::{Faults, Rule};
use latency::Latency;
use metrics::{Exposure, Settings, ShardMetrics};
use throttle::{AccountThrottle, QueueThrottle, ShareTable};

/// The command-line options of this module, checked at start-up.
#[derive(Clone, Debug, Default)]
pub struct GovernorConfig {
    /// `--profile azure`: Azure's targets where no explicit limit is given.
    pub profile_azure: bool,
    /// `--queue-rate-limit N`: message operations per second per queue.
    pub queue_rate_limit: Option<u64>,
    /// `--account-rate-limit N`: requests per second per account.
    pub account_rate_limit: Option<u64>,
    /// `--rate-burst TIME`: what a full bucket of either limit holds, as time at its rate, ms.
    pub rate_burst_ms: Option<u64>,
    /// `--latency SPEC`.
    pub latency: Option<Latency>,
    /// `--admin` (or its alias `--faults-api`): the `/_azq/faults` and `/_azq/reset`
    /// endpoints and the console's actions answer.
    pub admin: bool,
    /// `--faults FILE`: rules in force from the start.
    pub faults: Vec<Rule>,
    /// `--seed N`: every random choice (fault rolls, latency draws) is repeatable.
    pub seed: Option<u64>,
    /// `--metrics off|on|queues`: what `/_azq/metrics` shows.
    pub metrics: Exposure,
}

/// The flags `GovernorConfig::parse_flag` takes, for the command line's dispatch.
pub const FLAGS: [&str; 10] = [
    "--admin",
    "--profile",
    "--queue-rate-limit",
    "--account-rate-limit",
    "--rate-burst",
    "--latency",
    "--faults-api",
    "--faults",
    "--seed",
    "--metrics",
];

impl GovernorConfig {
    /// Takes one of `FLAGS`; `value` reads the flag's value.
    pub fn parse_flag(
        &mut self,
        flag: &str,
        value: impl FnOnce() -> Result<String, String>,
    ) -> Result<(), String> {
        let rate = |text: String| {
            text.trim()
                .parse::<u64>()
                .ok()
                .filter(|&rate| rate > 0)
                .ok_or_else(|| format!("{flag} must be a positive number per second"))
        };
        match flag {
            "--profile" => match value()?.as_str() {
                "azure" => self.profile_azure = true,
                other => return Err(format!("unknown profile {other:?} (azure)")),
            },
            "--queue-rate-limit" => self.queue_rate_limit = Some(rate(value()?)?),
            "--account-rate-limit" => self.account_rate_limit = Some(rate(value()?)?),
            "--rate-burst" => {
                let us = latency::duration_us(&value()?)
                    .ok()
                    .filter(|&us| (1000..=RATE_BURST_MS_MAX * 1000).contains(&us))
                    .ok_or_else(|| {
                        format!(
                            "--rate-burst must be a time from 1ms to {} s, e.g. 100ms",
                            RATE_BURST_MS_MAX / 1000
                        )
                    })?;
                self.rate_burst_ms = Some(us / 1000);
            }
            "--latency" => {
                self.latency =
                    Some(Latency::parse(&value()?).map_err(|why| format!("--latency: {why}"))?)
            }
            "--admin" | "--faults-api" => self.admin = true,
            "--faults" => {
                let path = value()?;
                let text = std::fs::read(&path)
                    .map_err(|error| format!("--faults: cannot read {path}: {error}"))?;
                self.faults = faults::parse_rules_file(&text)
                    .map_err(|why| format!("--faults {path}: {why}"))?;
            }
            "--metrics" => {
                self.metrics = Exposure::parse(value()?.trim())
                    .ok_or_else(|| "--metrics must be off, on or queues".to_string())?
            }
            "--seed" => {
                self.seed = Some(
                    value()?
                        .trim()
                        .parse()
                        .map_err(|_| "--seed must be a number".to_string())?,
                )
            }
            other => return Err(format!("unknown option {other}")),
        }
        Ok(())
    }

    /// Message operations per second per queue, if limited.
    pub fn queue_rate(&self) -> Option<u64> {
        self.queue_rate_limit
            .or(self.profile_azure.then_some(AZURE_QUEUE_MESSAGES_PER_S))
    }

    /// Requests per second per account, if limited.
    pub fn account_rate(&self) -> Option<u64> {
        self.account_rate_limit
            .or(self.profile_azure.then_some(AZURE_ACCOUNT_REQUESTS_PER_S))
    }

    /// What a full bucket of either limit holds, as time at its rate, ms.
    pub fn rate_burst_ms(&self) -> u64 {
        self.rate_burst_ms.unwrap_or(TOKEN_BUCKET_BURST_MS)
    }
}

/// One shard's part of all this; lives on the shard's thread.
#[derive(Debug)]
pub struct Governor {
    /// The shard's index.
    pub index: usize,
    /// The shard count.
    pub shards: usize,
    /// The shard's counters.
    pub metrics: ShardMetrics,
    /// Per-queue buckets of the queues this shard owns, when limited.
    pub queue_throttle: Option<RefCell<QueueThrottle>>,
    /// This shard's share of each account's limit, when limited.
    pub account_throttle: Option<RefCell<AccountThrottle>>,
    /// On shard 0 with an account limit: every shard's demand, to compute shares.
    pub share_table: Option<RefCell<ShareTable>>,
    /// `--latency`.
    pub latency: Option<Latency>,
    /// The fault rules, when fault injection is on (`--faults-api` or `--faults`).
    pub faults: Option<RefCell<Faults>>,
    /// Draws for `--latency`.
    random: RefCell<SplitMix64>,
    /// Nothing to do for a request beyond counting it: no account limit, no latency, no rule.
    idle: Cell<bool>,
    /// Limits shown in the metrics.
    pub settings: Settings,
    /// On shard 0: the console's history of server-wide samples.
    pub history: Option<RefCell<History>>,
}

impl Governor {
    /// Shard `index`'s governor of a server of `shards` shards.
    pub fn new(config: &GovernorConfig, index: usize, shards: usize) -> Governor {
        let seed = config
            .seed
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        let faults = (config.admin || !config.faults.is_empty())
            .then(|| RefCell::new(Faults::new(config.faults.clone(), mix64(seed))));
        let governor = Governor {
            index,
            shards,
            metrics: ShardMetrics::default(),
            queue_throttle: config
                .queue_rate()
                .map(|rate| RefCell::new(QueueThrottle::new(rate, config.rate_burst_ms()))),
            account_throttle: config.account_rate().map(|rate| {
                RefCell::new(AccountThrottle::new(rate, shards, config.rate_burst_ms()))
            }),
            share_table: config
                .account_rate()
                .filter(|_| index == 0)
                .map(|rate| RefCell::new(ShareTable::new(rate, shards))),
            latency: config.latency,
            faults,
            random: RefCell::new(SplitMix64::new(mix64(seed ^ (index as u64 + 1)))),
            idle: Cell::new(true),
            settings: Settings {
                exposure: config.metrics,
                queue_rate_limit: config.queue_rate().unwrap_or(0),
                account_rate_limit: config.account_rate().unwrap_or(0),
            },
            history: (index == 0).then(|| RefCell::new(History::default())),
        };
        governor.update_idle();
        governor
    }

    /// Whether a request needs nothing but counting (the hot path's one check).
    pub fn is_idle(&self) -> bool {
        self.idle.get()
    }

    /// Recomputes `is_idle` after the rules changed.
    pub fn update_idle(&self) {
        let rules = self
            .faults
            .as_ref()
            .is_some_and(|faults| !faults.borrow().is_empty());
        self.idle
            .set(self.account_throttle.is_none() && self.latency.is_none() && !rules);
    }

    /// Draws one `--latency` service time, µs (0 without `--latency`).
    pub fn latency_us(&self) -> u64 {
        self.latency.map_or(0, |latency| {
            latency.sample_us(&mut self.random.borrow_mut())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(arguments: &[(&str, &str)]) -> Result<GovernorConfig, String> {
        let mut config = GovernorConfig::default();
        for (flag, value) in arguments {
            let value = value.to_string();
            config.parse_flag(flag, || Ok(value))?;
        }
        Ok(config)
    }

    #[test]
    fn the_profile_gives_azure_targets_unless_a_limit_is_explicit() {
        let config = parse(&[("--profile", "azure")]).unwrap();
        assert_eq!(config.queue_rate(), Some(AZURE_QUEUE_MESSAGES_PER_S));
        assert_eq!(config.account_rate(), Some(AZURE_ACCOUNT_REQUESTS_PER_S));
        let config = parse(&[("--queue-rate-limit", "5"), ("--profile", "azure")]).unwrap();
        assert_eq!(config.queue_rate(), Some(5));
        assert_eq!(config.rate_burst_ms(), TOKEN_BUCKET_BURST_MS);
        let config = parse(&[("--rate-burst", "50ms")]).unwrap();
        assert_eq!(config.rate_burst_ms(), 50);
        let config = parse(&[("--rate-burst", "1ms")]).unwrap();
        assert_eq!(config.rate_burst_ms(), 1);
        let config = parse(&[("--account-rate-limit", "7")]).unwrap();
        assert_eq!(
            (config.queue_rate(), config.account_rate()),
            (None, Some(7))
        );
        for refused in [
            ("--profile", "aws"),
            ("--queue-rate-limit", "0"),
            ("--account-rate-limit", "-1"),
            ("--latency", "fast"),
            ("--seed", "x"),
            ("--faults", "/nonexistent/rules.json"),
            ("--rate-burst", "100"),
            ("--rate-burst", "0ms"),
            ("--rate-burst", "999us"),
            ("--rate-burst", "-1ms"),
            ("--rate-burst", "61s"),
        ] {
            assert!(parse(&[refused]).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn nothing_configured_is_idle() {
        let idle = Governor::new(&GovernorConfig::default(), 0, 2);
        assert!(idle.is_idle() && idle.queue_throttle.is_none() && idle.faults.is_none());
        assert_eq!(idle.latency_us(), 0);
        // A queue limit is decided on the owner, not on the request path.
        let queue_only = parse(&[("--queue-rate-limit", "5")]).unwrap();
        assert!(Governor::new(&queue_only, 0, 2).is_idle());
        let api = parse(&[("--faults-api", "")]).unwrap();
        assert!(api.admin && parse(&[("--admin", "")]).unwrap().admin);
        let governor = Governor::new(&api, 1, 2);
        assert!(governor.is_idle() && governor.faults.is_some());
        let account = parse(&[("--account-rate-limit", "5")]).unwrap();
        assert!(!Governor::new(&account, 1, 2).is_idle());
        assert!(Governor::new(&account, 1, 2).share_table.is_none());
        assert!(Governor::new(&account, 0, 2).share_table.is_some());
    }
}

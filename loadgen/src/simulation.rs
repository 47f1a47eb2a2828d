//! `--simulate`: what a run in virtual time assumes about the service it replaces. The queue
//! semantics are azq's own (the engine runs azq's request path in-process, see
//! `engine::service_model`); what is modelled here is only what a real run measures instead:
//! each request's round trip at no load (`--sim-latency`: one distribution for every operation,
//! or one per operation fitted from a real run's JSON report), the shard's capacity
//! (`--sim-server-rate`: requests arriving faster wait for it), and the limits the service enforces
//! (`--sim-profile azure`: Azure's scalability targets, answered with 503 as azq's
//! `--profile azure` answers them). Pure.

use azq::governor::latency::Latency;

use crate::scenario::Operation;

/// The round trip of every operation when `--sim-latency` is not given: azq on loopback, as
/// docs/BENCHMARKS.md measures a light load (a median of about 100 us, a p99 a few times it).
pub const SIM_LATENCY_DEFAULT: &str = "p50=100us,p99=400us";

/// The requests a second the simulated shard serves when `--sim-server-rate` is not given:
/// about what one azq shard serves on one core of the machines of docs/BENCHMARKS.md.
pub const SIM_SERVER_RATE_DEFAULT: f64 = 50_000.0;

/// What a simulated run assumes about the service.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulationPlan {
    /// The round trip of each operation, in `Operation::ALL`'s order.
    pub latency: [Latency; Operation::ALL.len()],
    /// How `latency` was given: the spec, or the report it was fitted from.
    pub latency_source: String,
    /// `--sim-profile azure`: Azure's per-queue and per-account targets, with 503s beyond.
    pub profile_azure: bool,
    /// `--sim-server-rate`: the requests a second the one simulated shard serves; requests
    /// arriving faster wait for it, in order.
    pub server_rate_per_s: f64,
}

impl Default for SimulationPlan {
    fn default() -> Self {
        SimulationPlan::uniform(SIM_LATENCY_DEFAULT).expect("the default spec parses")
    }
}

impl SimulationPlan {
    /// Every operation's round trip drawn from SPEC (azq's `--latency` syntax: `200us`,
    /// `100us-300us`, `p50=100us,p99=400us`).
    pub fn uniform(spec: &str) -> Result<SimulationPlan, String> {
        let latency = Latency::parse(spec).map_err(|why| format!("--sim-latency {spec}: {why}"))?;
        Ok(SimulationPlan {
            latency: [latency; Operation::ALL.len()],
            latency_source: spec.to_string(),
            profile_azure: false,
            server_rate_per_s: SIM_SERVER_RATE_DEFAULT,
        })
    }

    /// Each operation's round trip fitted from a JSON report of a real run (`--json`): a
    /// log-normal through the p50 and p99 of its latency from the actual send
    /// (`ops.NAME.latency_uncorrected_us`), so that the client's own lag is not counted twice.
    /// Operations the report did not measure keep the default.
    pub fn fitted(report: &serde_json::Value, source: &str) -> Result<SimulationPlan, String> {
        let mut plan = SimulationPlan {
            latency_source: format!("fitted from {source}"),
            ..SimulationPlan::default()
        };
        let ops = report
            .get("ops")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| format!("--sim-latency {source}: no \"ops\" in the report"))?;
        let mut fitted = 0;
        for operation in Operation::ALL {
            let Some(latency) = ops
                .get(operation.name())
                .and_then(|stats| stats.get("latency_uncorrected_us"))
            else {
                continue;
            };
            let quantile = |name: &str| latency.get(name).and_then(serde_json::Value::as_u64);
            if let (Some(p50), Some(p99)) = (quantile("p50"), quantile("p99")) {
                let spec = format!("p50={}us,p99={}us", p50.max(1), p99.max(p50.max(1)));
                plan.latency[operation.index()] = Latency::parse(&spec)
                    .map_err(|why| format!("--sim-latency {source}: {why}"))?;
                fitted += 1;
            }
        }
        if fitted == 0 {
            return Err(format!(
                "--sim-latency {source}: the report has no operation latencies to fit"
            ));
        }
        Ok(plan)
    }

    /// Parses `--sim-latency`: a JSON report's path (ending in `.json`) or a spec.
    pub fn parse_latency(text: &str) -> Result<SimulationPlan, String> {
        if !text.ends_with(".json") {
            return SimulationPlan::uniform(text);
        }
        let bytes = std::fs::read(text)
            .map_err(|error| format!("--sim-latency {text}: cannot read it: {error}"))?;
        let report: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|error| format!("--sim-latency {text}: not JSON: {error}"))?;
        SimulationPlan::fitted(&report, text)
    }

    /// One line for the report: the latency model and the limits.
    pub fn describe(&self) -> String {
        let limits = if self.profile_azure {
            "Azure's targets (503 beyond)"
        } else {
            "no rate limit"
        };
        format!(
            "round trips {}; one shard serving {}/s; {limits}",
            self.latency_source, self.server_rate_per_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_applies_to_every_operation() {
        let plan = SimulationPlan::uniform("250us").unwrap();
        assert!(plan
            .latency
            .iter()
            .all(|&latency| latency == Latency::Fixed(250)));
        assert_eq!(
            plan.describe(),
            "round trips 250us; one shard serving 50000/s; no rate limit"
        );
        assert!(SimulationPlan::uniform("fast").is_err());
        assert!(SimulationPlan::parse_latency("/nonexistent/run.json").is_err());
        let default = SimulationPlan::default();
        assert_eq!(default.latency_source, SIM_LATENCY_DEFAULT);
    }

    #[test]
    fn a_report_fits_each_measured_operation() {
        let report = serde_json::json!({
            "ops": {
                "put": {"latency_uncorrected_us": {"p50": 200, "p99": 2000}},
                "get": {"latency_uncorrected_us": {"p50": 0, "p99": 0}},
            }
        });
        let plan = SimulationPlan::fitted(&report, "run.json").unwrap();
        assert_eq!(
            plan.latency[Operation::Put.index()],
            Latency::parse("p50=200us,p99=2000us").unwrap()
        );
        // A zero median is kept at a microsecond, so the log-normal exists.
        assert_eq!(
            plan.latency[Operation::Get.index()],
            Latency::parse("p50=1us,p99=1us").unwrap()
        );
        assert_eq!(
            plan.latency[Operation::Delete.index()],
            SimulationPlan::default().latency[0]
        );
        assert_eq!(plan.latency_source, "fitted from run.json");
        assert!(SimulationPlan::fitted(&serde_json::json!({}), "x.json").is_err());
        assert!(SimulationPlan::fitted(&serde_json::json!({"ops": {}}), "x.json").is_err());
    }
}

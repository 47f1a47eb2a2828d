//! Queueing theory's answers for the one case it solves exactly, M/M/c: Poisson arrivals at
//! rate λ, c servers, exponential service times of mean S. A workers run of that shape
//! (`--arrival poisson`, `--work-time exp:mean=T`) is checked against them in the report, so a
//! plan made with the worker model rests on something that can be checked. Pure.
//!
//! Erlang C, the chance that an arrival has to wait, comes from the Erlang B recursion
//! B(0) = 1, B(k) = a·B(k−1) / (k + a·B(k−1)), which stays finite where the textbook sum of
//! a^k / k! overflows, then C = B / (1 − ρ(1 − B)) with a = λ·S and ρ = a / c; the mean wait in
//! the queue is Wq = C·S / (c − a).

/// What M/M/c predicts for a fleet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// ρ = λ·S / c: the share of the servers' time spent serving.
    pub utilisation: f64,
    /// Erlang C: the chance that an arrival finds every server busy and waits.
    pub wait_probability: f64,
    /// Wq: the mean time an arrival waits before a server takes it, in seconds.
    pub wait_mean_s: f64,
}

/// Erlang C for `servers` servers and an offered load of `offered_load` erlangs (a = λ·S);
/// `None` when the queue is unstable (a ≥ c: it grows without bound) or the input is not a
/// load (negative, not finite, or no servers).
pub fn erlang_c(servers: u32, offered_load: f64) -> Option<f64> {
    let c = f64::from(servers);
    if servers == 0 || !offered_load.is_finite() || offered_load < 0.0 || offered_load >= c {
        return None;
    }
    let erlang_b = (1..=servers).fold(1.0, |b, k| {
        offered_load * b / (f64::from(k) + offered_load * b)
    });
    let utilisation = offered_load / c;
    Some(erlang_b / (1.0 - utilisation * (1.0 - erlang_b)))
}

/// M/M/c's prediction for arrivals at `arrival_rate_per_s` to `servers` servers of mean service
/// time `service_mean_s`; `None` when the queue is unstable or the input is not a fleet.
pub fn predict(servers: u32, arrival_rate_per_s: f64, service_mean_s: f64) -> Option<Prediction> {
    let positive = |value: f64| value.is_finite() && value > 0.0;
    if !positive(service_mean_s) || !(positive(arrival_rate_per_s) || arrival_rate_per_s == 0.0) {
        return None;
    }
    let offered_load = arrival_rate_per_s * service_mean_s;
    let wait_probability = erlang_c(servers, offered_load)?;
    Some(Prediction {
        utilisation: offered_load / f64::from(servers),
        wait_probability,
        wait_mean_s: wait_probability * service_mean_s / (f64::from(servers) - offered_load),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Erlang C from its textbook definition: the sum of a^k / k! (fine for small c).
    fn erlang_c_by_definition(servers: u32, offered_load: f64) -> f64 {
        let c = f64::from(servers);
        let factorial = |n: u32| (1..=n).map(f64::from).product::<f64>();
        let below: f64 = (0..servers)
            .map(|k| offered_load.powi(k as i32) / factorial(k))
            .sum();
        let top = offered_load.powi(servers as i32) / factorial(servers) * c / (c - offered_load);
        top / (below + top)
    }

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= 1e-12 * expected.abs().max(1.0)
    }

    #[test]
    fn erlang_c_matches_textbook_values() {
        // (c, a, C): one server waits with probability ρ (M/M/1); c = 2, a = 1 gives 1/3;
        // c = 3, a = 2 gives 4/9; c = 4, a = 2.8 is the integration test's fleet.
        let table = [
            (1, 0.5, 0.5),
            (1, 0.9, 0.9),
            (2, 1.0, 1.0 / 3.0),
            (3, 2.0, 4.0 / 9.0),
            (4, 2.8, erlang_c_by_definition(4, 2.8)),
            (10, 8.0, erlang_c_by_definition(10, 8.0)),
        ];
        for (servers, offered_load, expected) in table {
            let actual = erlang_c(servers, offered_load).unwrap();
            assert!(
                close(actual, expected),
                "c={servers} a={offered_load}: {actual} != {expected}"
            );
        }
    }

    #[test]
    fn erlang_c_agrees_with_the_definition_over_a_grid() {
        for servers in 1..=12 {
            for tenth in 0..(servers * 10) {
                let offered_load = f64::from(tenth) / 10.0;
                let actual = erlang_c(servers, offered_load).unwrap();
                let expected = erlang_c_by_definition(servers, offered_load);
                assert!(
                    (actual - expected).abs() < 1e-9,
                    "c={servers} a={offered_load}"
                );
                assert!((0.0..=1.0).contains(&actual));
            }
        }
    }

    #[test]
    fn erlang_c_stays_finite_for_large_fleets() {
        // a^k / k! overflows f64 beyond k = 170; the recursion does not.
        let actual = erlang_c(1_000, 950.0).unwrap();
        assert!(
            actual.is_finite() && actual > 0.0 && actual < 1.0,
            "{actual}"
        );
    }

    #[test]
    fn erlang_c_refuses_unstable_and_invalid_loads() {
        assert_eq!(erlang_c(2, 2.0), None);
        assert_eq!(erlang_c(2, 3.0), None);
        assert_eq!(erlang_c(0, 0.0), None);
        assert_eq!(erlang_c(2, -1.0), None);
        assert_eq!(erlang_c(2, f64::NAN), None);
        assert_eq!(erlang_c(2, 0.0), Some(0.0));
    }

    #[test]
    fn predict_gives_the_mm1_mean_wait() {
        // M/M/1: Wq = ρ·S / (1 − ρ); λ = 40/s, S = 20 ms: ρ = 0.8, Wq = 80 ms.
        let prediction = predict(1, 40.0, 0.020).unwrap();
        assert!(close(prediction.utilisation, 0.8));
        assert!(close(prediction.wait_probability, 0.8));
        assert!(close(prediction.wait_mean_s, 0.080));
        // c = 2, a = 1 (λ = 50/s, S = 20 ms): Wq = (1/3)·20 ms / 1.
        let prediction = predict(2, 50.0, 0.020).unwrap();
        assert!(close(prediction.wait_mean_s, 0.020 / 3.0));
        assert_eq!(predict(2, 100.0, 0.020), None);
        assert_eq!(predict(2, 10.0, 0.0), None);
    }
}

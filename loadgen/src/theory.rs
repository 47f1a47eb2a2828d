//! Queueing theory's answers for a fleet of workers, and the statistics a run is set beside
//! them with. Pure: the report calls these on a run's measurements, a virtual-time simulator on
//! its own.
//!
//! - M/M/c (Poisson arrivals at rate λ, c servers, exponential service of mean S) is solved
//!   exactly by Erlang C. The chance that an arrival has to wait comes from the Erlang B
//!   recursion B(0) = 1, B(k) = a·B(k−1) / (k + a·B(k−1)), which stays finite where the textbook
//!   sum of a^k / k! overflows, then C = B / (1 − ρ(1 − B)) with a = λ·S and ρ = a / c; the mean
//!   wait in the queue is Wq = C·S / (c − a).
//! - M/D/c (constant service) by Cosmetatos's approximation, exact for c = 1 (half of M/M/1's
//!   wait) and within a few per cent of Crommelin's exact result above it.
//! - G/G/c by Allen–Cunneen, Wq ≈ Wq(M/M/c)·(ca² + cs²)/2, with ca² and cs² the squared
//!   coefficients of variation (variance over mean squared) of the gaps between arrivals and of
//!   the service times: exact for M/G/1 (Pollaczek–Khinchine). Below cs² = 1 with Poisson
//!   arrivals, `predict_general` interpolates between M/D/c and M/M/c instead, which holds at
//!   small c where Allen–Cunneen's M/D/c is too low.
//! - Polling (`polling_wait_s`): a worker that finds the queue empty looks again after a pause,
//!   so an arrival waits for the next look where M/M/c's idle server would take it at once.
//! - The estimators: `Moments` (count, sum and sum of squares of integer samples, merged
//!   exactly) and `batch_means`, a mean with its 95% confidence interval from samples that are
//!   correlated in time, as waits in a queue are.

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

/// M/M/c's prediction with its mean wait scaled by `factor` (the wait probability is kept).
fn scaled(prediction: Prediction, factor: f64) -> Prediction {
    Prediction {
        wait_mean_s: prediction.wait_mean_s * factor,
        ..prediction
    }
}

/// Allen–Cunneen's approximation for G/G/c: M/M/c's mean wait times (ca² + cs²)/2, where
/// `arrival_scv` (ca²) and `service_scv` (cs²) are the squared coefficients of variation of the
/// gaps between arrivals and of the service times. Exact for M/M/c (both 1) and for M/G/1.
/// `None` as `predict`, or for a negative or non-finite SCV.
pub fn allen_cunneen(
    servers: u32,
    arrival_rate_per_s: f64,
    service_mean_s: f64,
    arrival_scv: f64,
    service_scv: f64,
) -> Option<Prediction> {
    let valid = |scv: f64| scv.is_finite() && scv >= 0.0;
    if !valid(arrival_scv) || !valid(service_scv) {
        return None;
    }
    let prediction = predict(servers, arrival_rate_per_s, service_mean_s)?;
    Some(scaled(prediction, (arrival_scv + service_scv) / 2.0))
}

/// M/D/c (Poisson arrivals, every service exactly `service_mean_s`) by Cosmetatos's
/// approximation: half of M/M/c's wait, corrected upwards for c > 1 by
/// 1 + (1 − ρ)(c − 1)(√(4 + 5c) − 2) / (16·ρ·c). Exact for c = 1.
pub fn cosmetatos(
    servers: u32,
    arrival_rate_per_s: f64,
    service_mean_s: f64,
) -> Option<Prediction> {
    let prediction = predict(servers, arrival_rate_per_s, service_mean_s)?;
    let c = f64::from(servers);
    let rho = prediction.utilisation;
    let correction = if rho > 0.0 {
        1.0 + (1.0 - rho) * (c - 1.0) * ((4.0 + 5.0 * c).sqrt() - 2.0) / (16.0 * rho * c)
    } else {
        1.0
    };
    Some(scaled(prediction, correction / 2.0))
}

/// The best of these for a fleet whose arrivals and services have the given SCVs: for
/// `service_scv` below 1, M/D/c's wait (Cosmetatos) and M/M/c's interpolated by cs² (Page's
/// rule), then Allen–Cunneen's factor for the arrivals, (ca² + cs²)/(1 + cs²); from 1 up,
/// Allen–Cunneen. Both are exact for M/M/c and M/G/1.
pub fn predict_general(
    servers: u32,
    arrival_rate_per_s: f64,
    service_mean_s: f64,
    arrival_scv: f64,
    service_scv: f64,
) -> Option<Prediction> {
    if service_scv >= 1.0 || !service_scv.is_finite() {
        return allen_cunneen(
            servers,
            arrival_rate_per_s,
            service_mean_s,
            arrival_scv,
            service_scv,
        );
    }
    let valid = |scv: f64| scv.is_finite() && scv >= 0.0;
    if !valid(arrival_scv) || !valid(service_scv) {
        return None;
    }
    let exponential = predict(servers, arrival_rate_per_s, service_mean_s)?;
    let deterministic = cosmetatos(servers, arrival_rate_per_s, service_mean_s)?;
    let poisson_wait_s =
        service_scv * exponential.wait_mean_s + (1.0 - service_scv) * deterministic.wait_mean_s;
    let arrivals = (arrival_scv + service_scv) / (1.0 + service_scv);
    Some(Prediction {
        wait_mean_s: poisson_wait_s * arrivals,
        ..exponential
    })
}

/// What polling adds to the mean wait, in seconds: a worker that found the queue empty looks
/// again `poll_gap_mean_s` later on average (its pause plus a Get's round trip), with gaps of
/// SCV `poll_gap_scv`. With one worker that is exact (M/G/1 with multiple vacations: the
/// residual gap, E[V²]/(2·E[V]), added to every wait); with c workers looking independently an
/// arrival often finds one about to look, and the addition shrinks to about (c + 1)/(2c) of it:
/// a rule fitted to a simulation of polling servers with exponential services (see the tests).
/// With constant services it is low (at c = 2 polling adds nearly the whole residual).
pub fn polling_wait_s(servers: u32, poll_gap_mean_s: f64, poll_gap_scv: f64) -> f64 {
    let no_gap = poll_gap_mean_s.is_nan() || poll_gap_mean_s <= 0.0;
    if servers == 0 || no_gap || !poll_gap_scv.is_finite() {
        return 0.0;
    }
    let c = f64::from(servers);
    let residual_s = poll_gap_mean_s * (1.0 + poll_gap_scv.max(0.0)) / 2.0;
    residual_s * (c + 1.0) / (2.0 * c)
}

/// Count, sum and sum of squares of integer samples (nanoseconds, say): the mean and the SCV
/// of a distribution, merged across cores and intervals exactly (integers add associatively).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moments {
    pub count: u64,
    pub sum: i128,
    pub sum_squares: u128,
}

impl Moments {
    /// Takes in one sample.
    pub fn add(&mut self, value: i64) {
        self.count += 1;
        self.sum += i128::from(value);
        self.sum_squares += u128::from(value.unsigned_abs()).pow(2);
    }

    /// Adds `other`'s samples into `self`.
    pub fn merge(&mut self, other: &Moments) {
        self.count += other.count;
        self.sum += other.sum;
        self.sum_squares += other.sum_squares;
    }

    /// The samples' mean; `None` without samples.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The samples' variance (over n − 1); `None` with fewer than two.
    pub fn variance(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let count = self.count as f64;
        let mean = self.sum as f64 / count;
        Some(((self.sum_squares as f64 - mean * self.sum as f64) / (count - 1.0)).max(0.0))
    }

    /// The squared coefficient of variation, variance over mean squared: 1 for exponential
    /// samples, 0 for constant ones. `None` with fewer than two samples or a mean of 0.
    pub fn scv(&self) -> Option<f64> {
        let mean = self.mean()?;
        (mean != 0.0).then_some(self.variance()? / (mean * mean))
    }
}

/// A mean with its 95% confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanEstimate {
    pub mean: f64,
    /// The interval is `mean ± half_width_95`.
    pub half_width_95: f64,
    /// Batches the interval was estimated from.
    pub batches: usize,
}

/// The batch-means estimator: `samples` in time order are cut into `batches` consecutive
/// batches of equal size (the first `len % batches` samples, the oldest, are left out); the
/// batches' means are nearly independent when a batch is much longer than the samples'
/// correlation, so the interval is Student's t for `batches − 1` degrees of freedom times their
/// standard error. `None` with fewer than two batches or fewer samples than batches.
pub fn batch_means(samples: &[f64], batches: usize) -> Option<MeanEstimate> {
    if batches < 2 || samples.len() < batches {
        return None;
    }
    let size = samples.len() / batches;
    let skipped = samples.len() - size * batches;
    let means: Vec<f64> = samples[skipped..]
        .chunks_exact(size)
        .map(|batch| batch.iter().sum::<f64>() / size as f64)
        .collect();
    let centre = means.iter().sum::<f64>() / batches as f64;
    let variance = means
        .iter()
        .map(|value| (value - centre).powi(2))
        .sum::<f64>()
        / (batches - 1) as f64;
    Some(MeanEstimate {
        mean: centre,
        half_width_95: student_t_975(batches - 1) * (variance / batches as f64).sqrt(),
        batches,
    })
}

/// Batch means over intervals that each hold the sum and count of their samples (a second of a
/// run): the intervals are cut into `batches` consecutive batches of equal numbers of intervals
/// (the oldest left over), the mean is the samples' (all sums over all counts), and the interval
/// is `batch_means`'s over the batches' own means. `None` as `batch_means`, or when a batch
/// holds no sample.
pub fn batch_means_of_sums(intervals: &[(f64, u64)], batches: usize) -> Option<MeanEstimate> {
    if batches < 2 || intervals.len() < batches {
        return None;
    }
    let size = intervals.len() / batches;
    let skipped = intervals.len() - size * batches;
    let mut means = Vec::with_capacity(batches);
    let (mut sum, mut count) = (0.0, 0u64);
    for batch in intervals[skipped..].chunks_exact(size) {
        let batch_sum: f64 = batch.iter().map(|&(sum, _)| sum).sum();
        let batch_count: u64 = batch.iter().map(|&(_, count)| count).sum();
        if batch_count == 0 {
            return None;
        }
        means.push(batch_sum / batch_count as f64);
        sum += batch_sum;
        count += batch_count;
    }
    Some(MeanEstimate {
        mean: sum / count as f64,
        ..batch_means(&means, batches)?
    })
}

/// Student's t distribution's 97.5% quantile for `degrees_of_freedom` (≥ 1): the factor of a
/// two-sided 95% interval. Tabulated to 30 degrees, then the Cornish–Fisher expansion about the
/// normal quantile, which is within 1e-6 of it from there on.
pub fn student_t_975(degrees_of_freedom: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706_204_7,
        4.302_652_7,
        3.182_446_3,
        2.776_445_1,
        2.570_581_8,
        2.446_911_9,
        2.364_624_3,
        2.306_004_1,
        2.262_157_2,
        2.228_138_9,
        2.200_985_2,
        2.178_812_8,
        2.160_368_7,
        2.144_786_7,
        2.131_449_5,
        2.119_905_3,
        2.109_815_6,
        2.100_922_0,
        2.093_024_1,
        2.085_963_4,
        2.079_613_8,
        2.073_873_1,
        2.068_657_6,
        2.063_898_6,
        2.059_538_6,
        2.055_529_4,
        2.051_830_5,
        2.048_407_1,
        2.045_229_6,
        2.042_272_5,
    ];
    assert!(degrees_of_freedom >= 1, "t needs a degree of freedom");
    if let Some(&quantile) = TABLE.get(degrees_of_freedom - 1) {
        return quantile;
    }
    let z: f64 = 1.959_963_984_540_054;
    let nu = degrees_of_freedom as f64;
    let g1 = (z.powi(3) + z) / 4.0;
    let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
    let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
    let g4 = (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5)
        - 1920.0 * z.powi(3)
        - 945.0 * z)
        / 92_160.0;
    z + g1 / nu + g2 / nu.powi(2) + g3 / nu.powi(3) + g4 / nu.powi(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::unit;
    use azq::random::SplitMix64;

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

    /// The naive oracle: c servers taking Poisson arrivals first come, first served, each free
    /// server found by a heap of the times they come free; idle servers that poll look every
    /// `poll_gap` (from a random phase) instead of taking an arrival at once. Returns the mean
    /// wait of `customers` arrivals after a twentieth left out as warm-up.
    fn simulate(
        servers: usize,
        arrival_rate: f64,
        service: &dyn Fn(&mut SplitMix64) -> f64,
        poll_gap: Option<f64>,
        customers: usize,
        seed: u64,
    ) -> f64 {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut random = SplitMix64::new(seed);
        let exponential = |random: &mut SplitMix64, mean: f64| -(1.0 - unit(random)).ln() * mean;
        // Times as integer picoseconds of a unit time, so that the heap orders them exactly.
        let scale = 1e12;
        let mut looks: BinaryHeap<Reverse<u64>> = (0..servers)
            .map(|_| Reverse((poll_gap.unwrap_or(0.0) * unit(&mut random) * scale) as u64))
            .collect();
        let (mut arrival, mut total, mut counted) = (0.0, 0.0, 0);
        for index in 0..customers {
            arrival += exponential(&mut random, 1.0 / arrival_rate);
            // A polling server that looked before the arrival found the queue empty: it looks
            // again a gap later, until it looks after the arrival.
            let start = loop {
                let Reverse(look) = looks.pop().unwrap_or(Reverse(0));
                let look = look as f64 / scale;
                match poll_gap {
                    Some(gap) if look < arrival => {
                        let missed = ((arrival - look) / gap).ceil();
                        looks.push(Reverse(((look + missed * gap) * scale) as u64));
                    }
                    _ => break look.max(arrival),
                }
            };
            looks.push(Reverse(((start + service(&mut random)) * scale) as u64));
            if index >= customers / 20 {
                total += start - arrival;
                counted += 1;
            }
        }
        total / f64::from(counted)
    }

    fn exponential_service(random: &mut SplitMix64) -> f64 {
        -(1.0 - unit(random)).ln()
    }

    /// A log-normal service of mean 1 and SCV e^(σ²) − 1.
    fn log_normal_service(sigma: f64) -> impl Fn(&mut SplitMix64) -> f64 {
        move |random: &mut SplitMix64| {
            let first = 1.0 - unit(random);
            let second = unit(random);
            let normal = (-2.0 * first.ln()).sqrt() * (std::f64::consts::TAU * second).cos();
            (sigma * normal - sigma * sigma / 2.0).exp()
        }
    }

    #[test]
    fn allen_cunneen_is_erlang_c_for_mmc_and_pollaczek_khinchine_for_mg1() {
        let mmc = predict(3, 100.0, 0.02).unwrap();
        assert_eq!(allen_cunneen(3, 100.0, 0.02, 1.0, 1.0), Some(mmc));
        // M/G/1: Wq = ρ·S·(1 + cs²) / (2(1 − ρ)); ρ = 0.6, S = 10 ms, cs² = 3.
        let mg1 = allen_cunneen(1, 60.0, 0.010, 1.0, 3.0).unwrap();
        assert!(close(mg1.wait_mean_s, 0.6 * 0.010 * 4.0 / (2.0 * 0.4)));
        assert_eq!(allen_cunneen(2, 10.0, 0.01, -1.0, 1.0), None);
        assert_eq!(allen_cunneen(2, 10.0, 0.01, 1.0, f64::NAN), None);
        assert_eq!(allen_cunneen(2, 200.0, 0.01, 1.0, 1.0), None);
        // With cs² = 1 the general rule is Allen–Cunneen; with cs² = 0 and c = 1, M/D/1.
        assert_eq!(predict_general(3, 100.0, 0.02, 1.0, 1.0), Some(mmc));
        let md1 = predict_general(1, 60.0, 0.010, 1.0, 0.0).unwrap();
        assert!(close(md1.wait_mean_s, 0.6 * 0.010 / (2.0 * 0.4)));
        assert_eq!(cosmetatos(1, 60.0, 0.010), Some(md1));
    }

    /// The approximations against the oracle at the utilisations the integration tests run:
    /// Cosmetatos for M/D/c, and Allen–Cunneen for log-normal service with p99 = 5 × p50
    /// (cs² ≈ 0.6), within 5%. (With a heavier tail, p99 = 10 × p50 and cs² ≈ 1.7, Allen–Cunneen
    /// is ~5% high at ρ = 0.7 and ~15% at 0.3 with c = 2: no test compares it there.)
    #[test]
    fn approximations_agree_with_a_simulation() {
        let sigma = 5.0f64.ln() / 2.326_347_874_040_841;
        let log_normal = log_normal_service(sigma);
        let log_normal_scv = (sigma * sigma).exp() - 1.0;
        let cases: [(u32, f64, &str); 6] = [
            (2, 0.3, "M/D/c"),
            (2, 0.7, "M/D/c"),
            (2, 0.85, "M/D/c"),
            (4, 0.7, "M/D/c"),
            (2, 0.7, "M/G/c"),
            (2, 0.85, "M/G/c"),
        ];
        for (servers, rho, model) in cases {
            let rate = rho * f64::from(servers);
            let (simulated, predicted) = if model == "M/D/c" {
                let simulated = simulate(servers as usize, rate, &|_| 1.0, None, 400_000, 5);
                (simulated, cosmetatos(servers, rate, 1.0).unwrap())
            } else {
                let simulated = simulate(servers as usize, rate, &log_normal, None, 400_000, 5);
                (
                    simulated,
                    allen_cunneen(servers, rate, 1.0, 1.0, log_normal_scv).unwrap(),
                )
            };
            let error = predicted.wait_mean_s / simulated - 1.0;
            assert!(
                error.abs() < 0.05,
                "{model} c={servers} ρ={rho}: {} against {simulated}",
                predicted.wait_mean_s
            );
        }
        let mmc = simulate(2, 1.4, &exponential_service, None, 400_000, 6);
        let erlang = predict(2, 1.4, 1.0).unwrap().wait_mean_s;
        assert!((mmc / erlang - 1.0).abs() < 0.05, "{mmc} against {erlang}");
    }

    /// The polling rule against the oracle with and without polling, on the same arrivals and
    /// exponential services: the difference is what polling added, within a fifth of the rule's
    /// figure. (With constant services and c = 2 it adds nearly the whole residual gap, a
    /// quarter more than the rule: keep the gap small beside the wait where that matters.)
    #[test]
    fn polling_adds_what_the_rule_says() {
        let gap = 0.1;
        for servers in [1u32, 2, 4] {
            for rho in [0.3, 0.7] {
                let rate = rho * f64::from(servers);
                let run = |poll| {
                    simulate(
                        servers as usize,
                        rate,
                        &exponential_service,
                        poll,
                        300_000,
                        8,
                    )
                };
                let added = run(Some(gap)) - run(None);
                let rule = polling_wait_s(servers, gap, 0.0);
                assert!(
                    (added / rule - 1.0).abs() < 0.2,
                    "c={servers} ρ={rho}: added {added}, rule {rule}"
                );
            }
        }
        assert!(close(polling_wait_s(1, 0.002, 1.0), 0.002));
        assert_eq!(polling_wait_s(0, 0.002, 0.0), 0.0);
        assert_eq!(polling_wait_s(2, 0.0, 0.0), 0.0);
    }

    #[test]
    fn moments_merge_exactly_and_give_the_scv() {
        let mut all = Moments::default();
        let mut halves = [Moments::default(); 2];
        for value in [-5i64, 0, 7, 1_000_000_000_000, 3] {
            all.add(value);
            halves[usize::from(value > 0)].add(value);
        }
        let mut merged = halves[0];
        merged.merge(&halves[1]);
        assert_eq!(merged, all);
        let mut constant = Moments::default();
        assert_eq!(constant.scv(), None);
        for _ in 0..10 {
            constant.add(42);
        }
        assert_eq!(constant.mean(), Some(42.0));
        assert_eq!(constant.scv(), Some(0.0));
        let mut random = SplitMix64::new(3);
        let mut exponential = Moments::default();
        for _ in 0..100_000 {
            exponential.add((exponential_service(&mut random) * 1e6) as i64);
        }
        let scv = exponential.scv().unwrap();
        assert!((scv - 1.0).abs() < 0.03, "{scv}");
        // By hand: 1, 2, 3, 4 has mean 2.5 and variance 5/3.
        let mut small = Moments::default();
        (1..=4).for_each(|value| small.add(value));
        assert!(close(small.variance().unwrap(), 5.0 / 3.0));
    }

    #[test]
    fn student_t_quantiles() {
        assert!(close(student_t_975(1), 12.706_204_7));
        assert!(close(student_t_975(19), 2.093_024_1));
        // The expansion takes over from the table without a step, and tends to the normal.
        assert!((student_t_975(31) - 2.039_513_4).abs() < 1e-6);
        assert!((student_t_975(60) - 2.000_297_8).abs() < 1e-6);
        assert!((student_t_975(1_000_000) - 1.959_966).abs() < 1e-5);
        assert!(student_t_975(30) > student_t_975(31));
    }

    #[test]
    fn batch_means_by_hand() {
        // Six samples in two batches (the oldest sample left over): means 2 and 5.
        let estimate = batch_means(&[100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2).unwrap();
        assert_eq!(estimate.batches, 2);
        assert!(close(estimate.mean, 3.5));
        // Standard deviation of (2, 5) is 3/√2; over √2 batches: 1.5; times t(1).
        assert!(close(estimate.half_width_95, 12.706_204_7 * 1.5));
        let intervals = [(100.0, 1), (2.0, 2), (4.0, 2), (9.0, 3), (0.0, 0)];
        let sums = batch_means_of_sums(&intervals, 2).unwrap();
        // Batches (2 + 4)/4 = 1.5 and 9/3 = 3 after the first interval: 15 over 7 samples.
        assert!(close(sums.mean, 15.0 / 7.0));
        assert!(close(sums.half_width_95, 12.706_204_7 * 0.75));
        assert_eq!(batch_means(&[1.0, 2.0], 1), None);
        assert_eq!(batch_means(&[1.0], 2), None);
        assert_eq!(batch_means_of_sums(&[(1.0, 0), (1.0, 1)], 2), None);
    }

    /// The interval covers the true mean of correlated samples (an AR(1) series, whose batch
    /// means are nearly independent when batches are long) about 95% of the time.
    #[test]
    fn batch_means_intervals_cover_the_mean() {
        let mut random = SplitMix64::new(11);
        let mut covered = 0;
        let trials = 400;
        for _ in 0..trials {
            let mut value = 0.0;
            let samples: Vec<f64> = (0..4_000)
                .map(|_| {
                    value = 0.9 * value + (unit(&mut random) - 0.5);
                    10.0 + value
                })
                .collect();
            let estimate = batch_means(&samples, 20).unwrap();
            covered += usize::from((estimate.mean - 10.0).abs() <= estimate.half_width_95);
        }
        assert!((360..=395).contains(&covered), "{covered} of {trials}");
    }
}

//! The verdict both kinds of theory check give a workers report's `workers.theory` (a real
//! fleet in `against_azq.rs`, a simulated one in `simulate.rs`): the measured mean wait's 95%
//! interval must be within ±`HALF_WIDTH_MAX` of the mean (the run was long enough to tell; a
//! shorter one would pass a biased fleet by chance), and the mean within `ERROR_MAX` of the
//! prediction. With the interval at ±7% (a standard error of 3.6%), a fleet 15% off the theory
//! fails nine runs in ten. Included by path, as `tests/common` is.

/// The widest 95% interval of a theory check's mean wait, as a share of the mean.
pub const HALF_WIDTH_MAX: f64 = 0.07;
/// How far a theory check's mean wait may be from the prediction, as a share of it.
pub const ERROR_MAX: f64 = 0.10;

/// Checks `theory` (a report's `workers.theory`); `label` names the run in a failure.
pub fn assert_wait_agrees(label: &str, theory: &serde_json::Value) {
    let number = |field: &str| {
        theory[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{label}: workers.theory.{field} in {theory}"))
    };
    let predicted = number("wait_mean_s_predicted");
    let measured = number("wait_mean_s_measured");
    let half_width = number("wait_mean_s_half_width_95");
    assert!(
        half_width <= HALF_WIDTH_MAX * measured,
        "{label}: the interval ±{half_width} s is too wide to judge {measured} s: {theory}"
    );
    assert!(
        (measured - predicted).abs() <= ERROR_MAX * predicted,
        "{label}: mean wait {measured} ± {half_width} s against {predicted} s predicted: \
         {theory}"
    );
}

//! `--simulate` and `--sweep` end to end, with the real `azq-loadgen` binary: a simulated run is
//! repeatable under its seed; a sweep reports every point and marks the cheapest one that meets
//! the SLO; and a simulated fleet agrees with a real one, against the real `azq` server on a
//! loopback port, on the numbers a planner reads (mean and p99 end-to-end latency,
//! worker-seconds), with and without the autoscaler. The simulation's latency model is fitted
//! from the real run's JSON, as a planner would fit it.
//!
//! The server is started with the root crate's test helpers (`tests/common`, included by path),
//! found as `against_azq.rs` finds it. The comparisons with real runs are `#[ignore]`d by
//! `cargo test` and run by scripts/test.sh against the release builds.

#[path = "../../tests/common/mod.rs"]
mod common;
mod theory_verdict;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

use common::Server;

/// A file path in the system temporary directory, unique to this process and `name`.
fn scratch_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "azq-loadgen-simulate-{}-{name}",
        std::process::id()
    ))
}

/// The load generator: `AZQ_LOADGEN_BIN` (scripts/test.sh gives the release build to the
/// ignored tests, which compare with real runs), else this package's fresh build.
fn loadgen() -> Command {
    Command::new(
        std::env::var_os("AZQ_LOADGEN_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_azq-loadgen").into()),
    )
}

/// Runs azq-loadgen with `arguments` and `--json`; returns its output and report.
fn run(name: &str, arguments: &[&str]) -> (Output, serde_json::Value) {
    let json_path = scratch_path(&format!("{name}.json"));
    let output = loadgen()
        .args(arguments)
        .args(["--quiet", "--json"])
        .arg(&json_path)
        .output()
        .expect("azq-loadgen runs");
    assert!(output.status.success(), "{name}: {output:?}");
    let text = std::fs::read_to_string(&json_path).expect("a JSON report");
    let _ = std::fs::remove_file(&json_path);
    let _ = std::fs::remove_file(json_path.with_extension("svg"));
    (output, serde_json::from_str(&text).expect("valid JSON"))
}

/// A workers run of a few simulated minutes, with crashes (redelivery after the lease) and
/// Azure's limits, so that every part of the model is in the numbers compared.
const REPEATABLE: [&str; 22] = [
    "--simulate",
    "--sim-profile",
    "azure",
    "--scenario",
    "workers",
    "--consumers",
    "3",
    "--rate",
    "40",
    "--arrival",
    "poisson",
    "--work-time",
    "exp:mean=50ms",
    "--crash-rate",
    "5%",
    "--visibility-timeout",
    "2",
    "--duration",
    "120s",
    "--warmup",
    "5s",
    "--seed",
];

#[test]
fn a_simulated_run_is_repeatable_under_its_seed() {
    let with_seed = |seed: &str| {
        let mut arguments = REPEATABLE.to_vec();
        arguments.push(seed);
        let (output, mut report) = run(&format!("repeatable-{seed}"), &arguments);
        let table = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(table.contains("simulated in virtual time"), "{table}");
        // The wall clock's start is the only thing allowed to differ.
        report["start_unix_s"] = serde_json::Value::Null;
        report
    };
    let first = with_seed("7");
    assert_eq!(first["runtime"], "simulated");
    assert!(first["simulation"]
        .as_str()
        .is_some_and(|text| text.contains("Azure's targets")));
    let workers = &first["workers"];
    // Crashed deliveries came back after their lease and were worked on again.
    assert!(workers["crashed"].as_u64().unwrap() > 0, "{workers}");
    assert!(
        workers["redelivered_after_crash"].as_u64().unwrap() > 0,
        "{workers}"
    );
    assert_eq!(first, with_seed("7"));
    assert_ne!(first, with_seed("8"));
}

/// The simulated shard serves `--sim-server-rate` requests a second: a closed loop with no
/// round trip at all runs at that rate, its latency that of the queue at the shard, rather
/// than spinning at one virtual instant.
#[test]
fn a_closed_loop_runs_at_the_simulated_shards_rate() {
    let (_, report) = run(
        "closed-loop",
        &[
            "--simulate",
            "--sim-latency",
            "0us",
            "--sim-server-rate",
            "5000",
            "--scenario",
            "put",
            "--connections",
            "8",
            "--duration",
            "2s",
            "--warmup",
            "0s",
        ],
    );
    let rate = report["ops"]["put"]["throughput_per_s"].as_f64().unwrap();
    assert!((4_900.0..=5_050.0).contains(&rate), "{rate} puts/s");
    // Eight requests always waiting: each waits for the seven before it, 1.4 ms.
    let p50 = report["ops"]["put"]["latency_us"]["p50"].as_u64().unwrap();
    assert!((1_350..=1_650).contains(&p50), "p50 {p50} us");
}

/// An open loop four times faster than the simulated shard falls behind; it sends late until
/// `--grace` has passed after the window, then stops, and every start the window scheduled is
/// either answered or reported unsent: in virtual time the shard's rate decides the split.
#[test]
fn an_open_loop_behind_its_schedule_stops_when_the_grace_runs_out() {
    let answered_and_unsent = |grace: &str| {
        let (output, report) = run(
            &format!("grace-{grace}"),
            &[
                "--simulate",
                "--sim-latency",
                "0us",
                "--sim-server-rate",
                "1000",
                "--scenario",
                "put",
                "--rate",
                "4000",
                "--connections",
                "8",
                "--duration",
                "2s",
                "--warmup",
                "0s",
                "--grace",
                grace,
            ],
        );
        let puts = &report["ops"]["put"];
        let (count, unsent) = (
            puts["count"].as_u64().unwrap(),
            puts["unsent"].as_u64().unwrap(),
        );
        assert_eq!(report["unsent"], unsent);
        assert_eq!(count + unsent, 8_000, "{grace}: {puts}");
        let table = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            table.contains("operations the schedule started in the measured window"),
            "{table}"
        );
        count
    };
    // The shard answers 1,000 a second: by the window's end, or a second after it.
    let without = answered_and_unsent("0s");
    assert!((1_990..=2_010).contains(&without), "{without}");
    let with = answered_and_unsent("1s");
    assert!((2_990..=3_010).contains(&with), "{with}");
}

#[test]
fn a_sweep_marks_the_cheapest_point_that_meets_the_slo() {
    let json_path = scratch_path("sweep.json");
    let html_path = scratch_path("sweep.html");
    let output = loadgen()
        .args([
            "--scenario",
            "workers",
            "--rate",
            "60",
            "--arrival",
            "poisson",
            "--work-time",
            "exp:mean=40ms",
            "--duration",
            "60s",
            "--warmup",
            "5s",
            "--slo",
            "e2e-p99=400ms",
            "--sweep",
            "consumers=2,3,4,6",
            "--sweep",
            "poll-backoff=50ms..50ms;100ms..1s",
            "--json",
        ])
        .arg(&json_path)
        .arg("--html")
        .arg(&html_path)
        .output()
        .expect("azq-loadgen runs");
    assert!(output.status.success(), "{output:?}");
    let sweep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let html = std::fs::read_to_string(&html_path).unwrap();
    let _ = std::fs::remove_file(&json_path);
    let _ = std::fs::remove_file(&html_path);
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 8);
    assert_eq!(points[1]["settings"]["consumers"], "2");
    assert_eq!(points[1]["settings"]["poll-backoff"], "100ms..1s");
    // Two workers at 60/s of 40 ms are 120% busy: the queue grows and the SLO is missed.
    assert_eq!(points[0]["slo_met"], false, "{}", points[0]);
    // The cheapest point is one that met the SLO, and none that met it costs less.
    let cheapest = sweep["cheapest"].as_u64().expect("a point met the SLO") as usize;
    let cost = |point: &serde_json::Value| point["worker_seconds"].as_f64().unwrap();
    assert_eq!(points[cheapest]["slo_met"], true);
    for point in points.iter().filter(|point| point["slo_met"] == true) {
        assert!(cost(point) >= cost(&points[cheapest]), "{point}");
    }
    let answer = sweep["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("cheapest point meeting end-to-end p99 <= 400ms"),
        "{answer}"
    );
    // The page leads with the answer and the table, then a chart per measure.
    let answer_at = html.find("id=\"answer\"").expect("the answer");
    let table_at = html.find("id=\"points\"").expect("the table");
    assert!(answer_at < table_at && html.contains("class=\"cheapest\""));
    for chart in ["end-to-end", "worker-seconds", "backlog-peak", "drain-time"] {
        let at = html.find(&format!("id=\"{chart}\"")).expect(chart);
        assert!(at > table_at, "{chart}");
    }
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains(answer), "{table}");
}

/// The settings of the real-versus-simulated comparison: a fleet well below the server's
/// limits, so that the server is not the bottleneck, met by a step in the arrivals that builds
/// a backlog, so that the tail is the backlog's (the same arrivals in both runs) rather than a
/// few unlucky draws.
const FLEET: [&str; 18] = [
    "--scenario",
    "workers",
    "--producers",
    "1",
    "--arrival",
    "poisson",
    "--work-time",
    "lognormal:p50=20ms,p99=80ms",
    "--poll-backoff",
    "5ms..20ms",
    "--message-bytes",
    "256",
    "--duration",
    "40s",
    "--warmup",
    "2s",
    "--seed",
    "3",
];

/// The real runs take the machine's two cores' time, and the theory checks' hours of simulated
/// traffic take one core for half a minute: one at a time, so that no real run shares the
/// machine with another test (the theory checks once ran beside the autoscaled fleet's real run
/// on a 2-core CI machine, and the simulated mean fitted from it came out 25% under the real).
static MACHINE: Mutex<()> = Mutex::new(());

/// Takes the machine for one real run or one theory check.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MACHINE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the fleet (with `extra` settings) against a real azq, then simulated with the latency
/// fitted from the real run, and checks the two agree within 10%.
fn real_and_simulated_agree(name: &str, extra: &[&str]) {
    let _machine = one_at_a_time();
    let server = Server::start(&["--shards", "1", "--inMemoryPersistence"]);
    let endpoint = format!("http://127.0.0.1:{}/devstoreaccount1", server.port);
    let mut real_arguments = vec!["--endpoint", &endpoint, "--queue-prefix", name];
    real_arguments.extend(FLEET);
    real_arguments.extend(extra);
    let real_json = scratch_path(&format!("{name}-real.json"));
    let output = loadgen()
        .args(&real_arguments)
        .args(["--quiet", "--json"])
        .arg(&real_json)
        .output()
        .expect("azq-loadgen runs");
    assert!(output.status.success(), "{output:?}");
    let real: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&real_json).unwrap()).unwrap();
    let fitted = real_json.to_string_lossy().to_string();
    let mut simulated_arguments = vec!["--simulate", "--sim-latency", &fitted];
    simulated_arguments.extend(FLEET);
    simulated_arguments.extend(extra);
    let (_, simulated) = run(&format!("{name}-simulated"), &simulated_arguments);
    let _ = std::fs::remove_file(&real_json);
    let _ = std::fs::remove_file(real_json.with_extension("svg"));
    assert_eq!(real["errors"], 0, "{real}");
    let number = |report: &serde_json::Value, pointer: &str| {
        report
            .pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{pointer} in {report}"))
    };
    // What the simulation was fitted from, for a failure to show: each operation's uncorrected
    // p50 and p99 in the real run.
    let fitted_from = real["ops"].as_object().map_or(String::new(), |ops| {
        ops.iter()
            .map(|(operation, stats)| {
                let latency = &stats["latency_uncorrected_us"];
                format!(
                    "{operation} p50 {} p99 {} us",
                    latency["p50"], latency["p99"]
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    });
    let mut pointers = vec!["/end_to_end_mean_us", "/end_to_end_us/p99"];
    if extra.contains(&"--autoscale") {
        pointers.push("/workers/autoscale/worker_seconds");
        // Both runs scaled to the fleet's maximum and back to one: a comparison in which the
        // autoscaler never acted would agree without testing it.
        for report in [&real, &simulated] {
            let scale = &report["workers"]["autoscale"];
            let last = scale["replicas"]
                .as_array()
                .and_then(|events| events.last());
            assert_eq!(scale["replicas_max"], 10, "{name}: {scale}");
            assert_eq!(
                last.map(|event| &event["desired"]),
                Some(&1.into()),
                "{name}: {scale}"
            );
        }
    }
    for pointer in pointers {
        let (real, simulated) = (number(&real, pointer), number(&simulated, pointer));
        assert!(
            (simulated - real).abs() <= 0.1 * real,
            "{name}: {pointer}: simulated {simulated} against real {real} (fitted from {fitted_from})"
        );
    }
}

/// Ignored by `cargo test`: the real run must not be slowed by a debug build or by the other
/// tests. scripts/test.sh runs it with the release builds (`AZQ_BIN`, `AZQ_LOADGEN_BIN`) on a
/// quiet machine, after `cargo test`.
#[test]
#[ignore]
fn a_simulated_fleet_agrees_with_a_real_one() {
    real_and_simulated_agree(
        "fleet",
        &[
            "--consumers",
            "5",
            "--shape",
            "step:30/s@0s,260/s@10s,30/s@20s",
        ],
    );
}

/// Ignored by `cargo test`, as the one above.
///
/// The policy keeps every decision off a knife-edge, so that one run of each is a fair
/// comparison: with `queue-length=20` one replica at 30/s does not read 21 before the step, the
/// step's readings (about 110 and 200) are far from any threshold, and the 15 s down window
/// holds the ten replicas until the step is over. The policy this test had before
/// (`queue-length=10`, a 5 s down window) turned on readings of 10 against 11: ten replicas
/// read 3-10 inside the step, so the fleet dropped to one and scaled up again, and one reading
/// of 11 before the step started a second replica early. Simulated seeds 1 to 12 gave
/// 304-346 ms in ten runs and 160 and 262 ms in the two with an early replica, and the gate
/// failed twice on one run of 234-236 ms against the other's 305-313 ms. A decision on one
/// noisy sample is a coin toss in production too (docs/CAPACITY.md, "Real and simulated
/// agree"); comparing one run of each across it tests nothing.
#[test]
#[ignore]
fn a_simulated_autoscaled_fleet_agrees_with_a_real_one() {
    real_and_simulated_agree(
        "autoscaled",
        &[
            "--consumers",
            "10",
            "--shape",
            "step:30/s@0s,150/s@10s,30/s@25s",
            "--autoscale",
            "min=1,max=10,queue-length=20,polling=1s,sync=1s,cooldown=10s,down-window=15s,\
             up=100%/1s+4/1s,down=100%/1s,cold-start=1s",
        ],
    );
}

/// Simulates a fleet of two workers, Poisson arrivals at `rate` and the work time `work`, and
/// checks the report's theory as the real checks do (`theory_verdict`: the interval within
/// ±7%, the mean within 10% of Erlang C, Cosmetatos or Allen–Cunneen with the polling term).
/// No retry: one deterministic run per case, which a 15% bias would fail.
fn agrees_with_theory(name: &str, rate: &str, work: &str, duration: &str) {
    let (_, report) = run(
        name,
        &[
            "--simulate",
            "--scenario",
            "workers",
            "--producers",
            "1",
            "--consumers",
            "2",
            "--rate",
            rate,
            "--arrival",
            "poisson",
            "--work-time",
            work,
            "--batch",
            "1",
            "--poll-backoff",
            "1ms..1ms",
            "--message-bytes",
            "64",
            "--duration",
            duration,
            "--warmup",
            "30s",
        ],
    );
    theory_verdict::assert_wait_agrees(name, &report["workers"]["theory"]);
}

/// M/M/2 at utilisations 0.3, 0.7 and 0.85, M/D/2 and a log-normal M/G/2, simulated. Ignored
/// by `cargo test` (hours of simulated traffic want the release build); scripts/test.sh runs
/// it with `AZQ_LOADGEN_BIN`.
#[test]
#[ignore]
fn simulated_fleets_agree_with_queueing_theory() {
    let _machine = one_at_a_time();
    agrees_with_theory("mm2-0.3", "30", "exp:mean=20ms", "1800s");
    agrees_with_theory("mm2-0.7", "70", "exp:mean=20ms", "1800s");
    agrees_with_theory("mm2-0.85", "85", "exp:mean=20ms", "3600s");
    agrees_with_theory("md2-0.7", "70", "20ms", "1800s");
    agrees_with_theory("mg2-0.7", "70", "lognormal:p50=15ms,p99=60ms", "1800s");
}

//! azq-loadgen end to end: the real `azq-loadgen` binary against the real `azq` server binary on
//! a free loopback port, checking what the load generator reports against what the server holds.
//!
//! The server is started with the root crate's test helpers (`tests/common`, included by path).
//! Cargo gives an integration test only its own package's binaries (`CARGO_BIN_EXE_azq-loadgen`),
//! so the server is found next to it in the same target directory (`target/<profile>/azq`), or at
//! `AZQ_BIN` (`common::azq_binary`). `cargo test --workspace` (what scripts/test.sh runs) builds
//! it before any test runs, because the root package's own integration tests need it; the code
//! under test here, the load generator, is always the fresh build.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use azq::config::DEVELOPMENT_ACCOUNT_NAME;
use common::{exchange, signed_request, Server};

/// A one-shard server: the load generator's counts are checked against it.
fn start_server() -> Server {
    Server::start(&["--shards", "1", "--inMemoryPersistence"])
}

fn endpoint(server: &Server) -> String {
    format!(
        "http://127.0.0.1:{}/{DEVELOPMENT_ACCOUNT_NAME}",
        server.port
    )
}

/// The approximate message count of `queue`, from Get Queue Metadata.
fn depth(server: &Server, queue: &str) -> u64 {
    let target = format!("/{DEVELOPMENT_ACCOUNT_NAME}/{queue}?comp=metadata");
    let response = exchange(server, &signed_request("GET", &target, &[], b""));
    assert_eq!(response.status, 200, "{}", response.text());
    response
        .header("x-ms-approximate-messages-count")
        .and_then(|count| count.trim().parse().ok())
        .expect("a message count")
}

/// A file path in the system temporary directory, unique to this process and `name`.
fn scratch_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("azq-loadgen-test-{}-{name}", std::process::id()))
}

/// Runs azq-loadgen with `arguments` against `server`, bounded in time, and returns its output
/// and JSON report.
fn run_loadgen(server: &Server, name: &str, arguments: &[&str]) -> (Output, serde_json::Value) {
    let json_path = scratch_path(&format!("{name}.json"));
    let output = Command::new(env!("CARGO_BIN_EXE_azq-loadgen"))
        .args(["--endpoint", &endpoint(server), "--quiet", "--json"])
        .arg(&json_path)
        .args(arguments)
        .output()
        .expect("azq-loadgen runs");
    let text = std::fs::read_to_string(&json_path).unwrap_or_else(|error| {
        panic!(
            "no JSON ({error}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let _ = std::fs::remove_file(&json_path);
    let report = serde_json::from_str(&text).expect("valid JSON");
    (output, report)
}

fn count(report: &serde_json::Value, operation: &str, field: &str) -> u64 {
    report["ops"][operation][field]
        .as_u64()
        .unwrap_or_else(|| panic!("ops.{operation}.{field} in {report}"))
}

#[test]
fn a_two_second_put_reports_exactly_the_messages_the_server_holds() {
    let server = start_server();
    // No warm-up: every Put the server stored must be in the count.
    let (output, report) = run_loadgen(
        &server,
        "put",
        &[
            "--scenario",
            "put",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--connections",
            "4",
            "--queue-prefix",
            "counted",
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("operation"), "the table:\n{stdout}");
    assert_eq!(report["scenario"], "put");
    assert_eq!(report["duration_s"], 2.0);
    assert_eq!(report["connection_errors"], 0);
    let puts = count(&report, "put", "count");
    assert_eq!(count(&report, "put", "errors"), 0);
    assert!(puts > 0);
    assert_eq!(puts, depth(&server, "counted-0"));
    let latency = &report["ops"]["put"]["latency_us"];
    for key in ["p50", "p90", "p99", "p999", "p9999", "max"] {
        assert!(latency[key].as_u64().is_some(), "latency_us.{key}");
    }
    assert!(latency["p50"].as_u64() <= latency["max"].as_u64());
}

#[test]
fn a_mixed_run_never_consumes_more_than_it_produced() {
    let server = start_server();
    let (output, report) = run_loadgen(
        &server,
        "mixed",
        &[
            "--scenario",
            "mixed",
            "--producers",
            "2",
            "--consumers",
            "3",
            "--queues",
            "2",
            "--batch",
            "4",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--queue-prefix",
            "mixed",
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let produced = count(&report, "put", "count") - count(&report, "put", "errors");
    let consumed = count(&report, "delete", "count") - count(&report, "delete", "errors");
    let received = count(&report, "get", "messages");
    assert!(produced > 0);
    assert!(
        consumed <= produced,
        "consumed {consumed} > produced {produced}"
    );
    assert!(
        received <= produced,
        "received {received} > produced {produced}"
    );
    // Every received message carried the producer's timestamp.
    assert!(report["end_to_end_us"]["max"].as_u64().is_some() || received == 0);
    let left = depth(&server, "mixed-0") + depth(&server, "mixed-1");
    assert!(
        left <= produced,
        "{left} messages left of {produced} produced"
    );
    assert!(report["depth"]
        .as_array()
        .is_some_and(|samples| !samples.is_empty()));
}

#[test]
fn an_unreachable_endpoint_fails_fast_with_a_message() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = Command::new(env!("CARGO_BIN_EXE_azq-loadgen"))
        .args([
            "--endpoint",
            &format!("http://127.0.0.1:{port}/devstoreaccount1"),
            "--duration",
            "1s",
        ])
        .output()
        .expect("azq-loadgen runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot connect"));
}

//! azq-loadgen end to end: the real `azq-loadgen` binary against the real `azq` server binary on
//! a free loopback port, checking what the load generator reports against what the server holds.
//!
//! Cargo gives an integration test only its own package's binaries (`CARGO_BIN_EXE_azq-loadgen`),
//! so the server is found next to it in the same target directory (`target/<profile>/azq`), or at
//! `AZQ_BIN`. `cargo test --workspace` (what scripts/test.sh runs) builds it before any test runs,
//! because the root package's own integration tests need it; the code under test here, the load
//! generator, is always the fresh build.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use azq::auth::{sign_shared_key, SigningKey};
use azq::config::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

/// The `azq` binary built beside this test's package.
fn azq_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("AZQ_BIN") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/against_azq-<hash> → target/<profile>/azq
    let test_executable = std::env::current_exe().expect("the test knows its path");
    let profile_directory = test_executable
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let azq = profile_directory.join("azq");
    assert!(
        azq.exists(),
        "{} is missing: run `cargo build --bin azq` (cargo test --workspace builds it)",
        azq.display()
    );
    azq
}

/// A running `azq --shards 1`, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(azq_binary())
            .args([
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                "0",
                "--shards",
                "1",
                "--silent",
            ])
            .env_remove("AZURITE_ACCOUNTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("azq starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .next()
            .expect("azq printed its ready line")
            .expect("stdout is text");
        let port = ready
            .strip_prefix("azq listening on http://127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("unexpected ready line: {ready}"));
        std::thread::spawn(move || for _ in lines {});
        Server { child, port }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{DEVELOPMENT_ACCOUNT_NAME}", self.port)
    }

    /// The approximate message count of `queue`, from Get Queue Metadata.
    fn depth(&self, queue: &str) -> u64 {
        let target = format!("/{DEVELOPMENT_ACCOUNT_NAME}/{queue}?comp=metadata");
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let date = String::from_utf8(azq::api::date::rfc1123(now_ms).to_vec()).unwrap();
        let headers = [("x-ms-date", date.as_str()), ("x-ms-version", "2026-04-06")];
        let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
        let signature =
            sign_shared_key("GET", &target, &headers, 0, DEVELOPMENT_ACCOUNT_NAME, &key).unwrap();
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-date: {date}\r\n\
             x-ms-version: 2026-04-06\r\nAuthorization: SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{signature}\r\n\
             Connection: close\r\n\r\n"
        );
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("x-ms-approximate-messages-count")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a message count")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a child pid we own; failure (already exited) is harmless.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        .args(["--endpoint", &server.endpoint(), "--quiet", "--json"])
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
    let server = Server::start();
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
    assert_eq!(puts, server.depth("counted-0"));
    let latency = &report["ops"]["put"]["latency_us"];
    for key in ["p50", "p90", "p99", "p999", "p9999", "max"] {
        assert!(latency[key].as_u64().is_some(), "latency_us.{key}");
    }
    assert!(latency["p50"].as_u64() <= latency["max"].as_u64());
}

#[test]
fn a_mixed_run_never_consumes_more_than_it_produced() {
    let server = Server::start();
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
    let left = server.depth("mixed-0") + server.depth("mixed-1");
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

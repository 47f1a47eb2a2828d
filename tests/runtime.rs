//! The two backends and the process around them, over real processes: azq serves on either
//! backend; where io_uring is blocked (the `no-io-uring` helper installs the seccomp rules of
//! Docker's default profile, and a locked-memory limit below glommio's minimum is the other
//! common refusal) `--runtime auto` says why in one line and serves on the portable backend,
//! while `--runtime io_uring` ends the process with a non-zero status and its cause instead of
//! hanging half started; `/_azq/health` and `azq healthcheck` tell whether it serves.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_seccomp_fallback_line, azq_binary, exchange as send, io_uring_where_allowed, put_body,
    signed_request, wait_for_exit, workspace_binary, Server, TempDir,
};

/// How long a process that cannot start may take to exit: "within a second", with room for a
/// loaded CI machine.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// azq under the `no-io-uring` helper: io_uring's system calls fail with EPERM.
fn without_io_uring() -> Command {
    let mut command = Command::new(workspace_binary("no-io-uring"));
    command.arg(azq_binary());
    command
}

/// azq with a locked-memory limit of `bytes` (set in the child before it runs azq).
fn with_memlock_limit(bytes: u64) -> Command {
    let mut command = Command::new(azq_binary());
    // SAFETY: setrlimit is async-signal-safe; the closure only fills a struct on its stack.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes as libc::rlim_t,
                rlim_max: bytes as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command
}

/// Creates a queue, puts a message and reads it back: the shard's whole request path.
fn serves_a_message(server: &Server) {
    let created = send(
        server,
        &signed_request("PUT", "/devstoreaccount1/runtime-q", &[], b""),
    );
    assert_eq!(created.status, 201, "{created:?}");
    let put = send(
        server,
        &signed_request(
            "POST",
            "/devstoreaccount1/runtime-q/messages",
            &[],
            &put_body("on either backend"),
        ),
    );
    assert_eq!(put.status, 201, "{put:?}");
    let got = send(
        server,
        &signed_request("GET", "/devstoreaccount1/runtime-q/messages", &[], b""),
    );
    assert_eq!(got.status, 200, "{got:?}");
    assert!(String::from_utf8_lossy(&got.body).contains("on either backend"));
}

/// `GET /_azq/health` without credentials.
fn health(server: &Server) -> (u16, String) {
    let response = send(server, b"GET /_azq/health HTTP/1.1\r\nHost: x\r\n\r\n");
    (
        response.status,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

/// Runs `command` (a start that must fail) with azq's usual test arguments; its exit status,
/// its stderr and how long it took. Panics if it is still running after `EXIT_WAIT`.
fn failed_start(mut command: Command, arguments: &[&str]) -> (ExitStatus, String, Duration) {
    let started = Instant::now();
    let child = command
        .args(["--queueHost", "127.0.0.1", "--queuePort", "0", "--silent"])
        .arg("--inMemoryPersistence")
        .args(arguments)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("azq starts");
    let (status, stderr) = wait_for_exit(child, EXIT_WAIT);
    (status, stderr, started.elapsed())
}

#[test]
fn both_backends_serve() {
    let io_uring = io_uring_where_allowed();
    for (runtime, expected) in [
        ("portable", "portable"),
        ("auto", "portable"),
        (io_uring, io_uring),
    ] {
        let server = Server::start(&["--shards", "2", "--runtime", runtime]);
        assert_eq!(server.backend, expected, "--runtime {runtime}");
        serves_a_message(&server);
        let (status, body) = health(&server);
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(&format!("\"backend\":\"{expected}\""))
                && body.contains("\"shards\":2")
                && body.contains("\"status\":\"serving\""),
            "{body}"
        );
        assert!(server.stop().success());
    }
}

#[test]
fn auto_says_why_io_uring_is_refused_and_serves_where_seccomp_denies_it() {
    // The helper's stderr would hold the refusal line; `Server` passes it through, so check it
    // on a run of its own below, and here that the server serves on the portable backend.
    let server = Server::start_command(without_io_uring(), &["--shards", "2"]);
    assert_eq!(server.backend, "portable");
    serves_a_message(&server);
    assert_eq!(health(&server).0, 200);
    assert!(server.stop().success());

    let mut command = without_io_uring();
    let mut child = command
        .args(["--queueHost", "127.0.0.1", "--queuePort", "0", "--silent"])
        .arg("--inMemoryPersistence")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("azq starts");
    let mut ready = [0u8; 64];
    let _ = child.stdout.take().unwrap().read(&mut ready);
    // SAFETY: kill(2) with a child pid we own.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    assert!(status.success(), "{stderr}");
    assert_seccomp_fallback_line("azq", &stderr);
}

#[test]
fn forced_io_uring_where_it_is_denied_ends_the_process() {
    // glommio panics inside a shard thread when io_uring is denied, blaming the kernel's age:
    // the probe refuses first, and the process exits at once with one line naming the cause.
    let (status, stderr, took) = failed_start(
        without_io_uring(),
        &["--shards", "2", "--runtime", "io_uring"],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(
            "azq: --runtime io_uring: io_uring cannot serve here: io_uring_setup failed"
        ) && stderr.contains("seccomp")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
    eprintln!("forced io_uring under seccomp exited in {took:?}");
}

/// A free loopback port, picked by binding port 0 once.
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
    probe.local_addr().expect("bound").port()
}

/// A restart right after `kill -9` gets its port back. On the io_uring backend the killed
/// server's listening socket outlives the process by a few milliseconds (the kernel tears its
/// rings down after it), and such a start failed with "Address already in use" (17 of 20 here).
/// Five kills, each with a connection open, and restarts on one port; on both backends.
#[test]
fn a_restart_right_after_kill_9_gets_its_port_back() {
    for backend in common::backends() {
        let port = free_port().to_string();
        let arguments = ["--queuePort", port.as_str()];
        let mut server = Server::start_on(backend, &arguments);
        for _ in 0..5 {
            assert_eq!(server.port.to_string(), port, "{backend:?}");
            let open = server.connect();
            server.kill();
            drop(open);
            server = Server::start_on(backend, &arguments);
            assert_eq!(health(&server).0, 200, "{backend:?}");
        }
        serves_a_message(&server);
        assert!(server.stop().success(), "{backend:?}");
    }
}

/// A port another program listens on ends the start with one line naming it, once the wait
/// for a port just freed (`LISTEN_ADDRESS_WAIT_MS`) has passed.
#[test]
fn a_port_another_program_holds_ends_the_start() {
    let holder = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a port");
    let port = holder.local_addr().expect("bound").port().to_string();
    let arguments = ["--queuePort", port.as_str()];
    let (status, stderr, _) = failed_start(Command::new(azq_binary()), &arguments);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("azq: cannot listen on 127.0.0.1:{port}: Address already in use (os error 98)")
    );
}

#[test]
fn a_locked_memory_limit_below_glommio_minimum() {
    let server = Server::start_command(with_memlock_limit(64 * 1024), &["--shards", "2"]);
    assert_eq!(server.backend, "portable");
    serves_a_message(&server);
    assert!(server.stop().success());

    let (status, stderr, _took) = failed_start(
        with_memlock_limit(64 * 1024),
        &["--shards", "2", "--runtime", "io_uring"],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("azq: --runtime io_uring: ") && stderr.contains("ulimit -l"),
        "one line naming the cause: {stderr}"
    );
}

/// The container image's command line (`--queueHost 0.0.0.0 --queuePort 10001 --location /data`,
/// here with a free port and a temporary directory): every address, reachable on loopback,
/// healthy by `azq healthcheck`'s defaults.
/// The one test that binds beyond loopback, because the image relies on it (briefly, on a free
/// port, on a machine whose tests reach no network).
#[test]
fn the_image_command_line_listens_on_every_address() {
    let data = TempDir::new("image");
    let mut child = Command::new(azq_binary())
        .args([
            "--queueHost",
            "0.0.0.0",
            "--queuePort",
            "0",
            "--shards",
            "1",
            "--location",
            data.arg(),
        ])
        .env_remove("AZURITE_ACCOUNTS")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("azq starts");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let ready = std::io::BufRead::lines(&mut stdout)
        .map(|line| line.expect("text"))
        .find(|line| line.starts_with("azq listening on "))
        .expect("a ready line");
    let port = ready
        .strip_prefix("azq listening on http://0.0.0.0:")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{ready}"))
        .to_string();
    let healthy = Command::new(azq_binary())
        .args([
            "healthcheck",
            "--queueHost",
            "0.0.0.0",
            "--queuePort",
            &port,
        ])
        .output()
        .expect("azq healthcheck runs");
    // SAFETY: kill(2) with a child pid we own.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.wait().expect("azq exits").success());
    assert!(healthy.status.success(), "{healthy:?}");
}

#[test]
fn healthcheck_command() {
    let server = Server::start(&["--shards", "1"]);
    let port = server.port.to_string();
    let healthy = Command::new(azq_binary())
        .args(["healthcheck", "--queuePort", &port])
        .output()
        .expect("azq healthcheck runs");
    assert!(healthy.status.success(), "{healthy:?}");
    assert!(String::from_utf8_lossy(&healthy.stdout).contains("\"status\":\"serving\""));
    // A server listening on every address is asked on loopback.
    let wildcard = Command::new(azq_binary())
        .args([
            "healthcheck",
            "--queueHost",
            "0.0.0.0",
            "--queuePort",
            &port,
        ])
        .output()
        .expect("azq healthcheck runs");
    assert!(wildcard.status.success(), "{wildcard:?}");
    assert!(server.stop().success());
    // A server that answers 503 (starting or draining) is not healthy.
    let starting = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let starting_port = starting.local_addr().unwrap().port().to_string();
    let answering = std::thread::spawn(move || {
        let (mut connection, _) = starting.accept().unwrap();
        let mut request = [0u8; 1024];
        let _ = connection.read(&mut request);
        let body = "{\"status\":\"starting\"}";
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        std::io::Write::write_all(&mut connection, answer.as_bytes()).unwrap();
    });
    let unhealthy = Command::new(azq_binary())
        .args(["healthcheck", "--queuePort", &starting_port])
        .output()
        .expect("azq healthcheck runs");
    answering.join().unwrap();
    assert_eq!(unhealthy.status.code(), Some(1), "{unhealthy:?}");
    assert!(String::from_utf8_lossy(&unhealthy.stderr).contains("answered HTTP/1.1 503"));
    // Nothing listens on port 1.
    let gone = Command::new(azq_binary())
        .args(["healthcheck", "--queuePort", "1"])
        .output()
        .expect("azq healthcheck runs");
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    assert!(String::from_utf8_lossy(&gone.stderr).starts_with("azq healthcheck: cannot connect"));
}

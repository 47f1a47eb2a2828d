//! Shared pieces of the integration tests: start the real `azq` binary on a free loopback port,
//! speak raw HTTP/1.1 to it over TCP, and sign requests with SharedKey like the SDKs do.
//! azq-loadgen's integration tests include this file by path (`loadgen/tests/against_azq.rs`).

#![allow(dead_code)] // Each test binary uses a different subset of these helpers.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use azq::auth::shared_key::{write_string_to_sign, SharedKeyScheme};
use azq::auth::SigningKey;
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

/// The `azq` binary. Cargo names it to the root package's tests (`CARGO_BIN_EXE_azq`); another
/// package's tests (azq-loadgen's) take `AZQ_BIN`, or find it beside themselves in
/// `target/<profile>/`, where `cargo test --workspace` has built it before any test runs.
pub fn azq_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_azq") {
        return PathBuf::from(path);
    }
    if let Some(path) = std::env::var_os("AZQ_BIN") {
        return PathBuf::from(path);
    }
    workspace_binary("azq")
}

/// A binary of another package of the workspace (the `no-io-uring` test helper, azq-loadgen),
/// beside the test in `target/<profile>/`. `cargo test --workspace` builds the binaries of the
/// packages that have integration tests (azq, azq-loadgen) but not the others (no-io-uring):
/// `cargo build --workspace --bins` first, as scripts/test.sh does.
pub fn workspace_binary(name: &str) -> PathBuf {
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<name>
    let test_executable = std::env::current_exe().expect("the test knows its path");
    let binary = test_executable
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        binary.display()
    );
    binary
}

/// The io_uring backend where the kernel allows it here, else the portable one: as a
/// `--runtime` value, and as the name a ready line gives it (`--runtime auto` is the portable
/// backend everywhere: `runtime::select`'s rule).
pub fn io_uring_where_allowed() -> &'static str {
    if azq::runtime::select::io_uring_refusal().is_none() {
        "io_uring"
    } else {
        "portable"
    }
}

/// Checks that `stderr` is the one line `program` (azq, azq-loadgen) prints when `--runtime
/// auto` falls back because a seccomp filter (the `no-io-uring` helper's) denies io_uring.
pub fn assert_seccomp_fallback_line(program: &str, stderr: &str) {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line names the reason: {stderr}");
    let expected = format!("{program}: io_uring unavailable, using the portable backend: ");
    assert!(
        lines[0].starts_with(&expected)
            && lines[0].contains("io_uring_setup failed")
            && lines[0].contains("seccomp"),
        "{stderr}"
    );
}

/// Waits for `child` (started with its stderr piped) to exit: its status and its stderr. Kills
/// it and panics if it is still running after `limit`: it hangs instead of ending.
pub fn wait_for_exit(mut child: Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("a waitable child") {
            let mut stderr = String::new();
            let _ = std::io::Read::read_to_string(
                &mut child.stderr.take().expect("piped stderr"),
                &mut stderr,
            );
            return (status, stderr);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fresh directory under the system's temporary directory, removed with its content when
/// dropped: where a test's server keeps its data.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `azq-test-<name>-<pid>-<n>` in the temporary directory.
    pub fn new(name: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("azq-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary directory");
        TempDir(path)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Its path, as a command-line argument.
    pub fn arg(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `azq` process, stopped with SIGTERM when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    /// The backend its ready line names (`io_uring` or `portable`).
    pub backend: String,
    /// Everything it has written to stderr so far (also passed on to the test's stderr).
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

/// Both backends, as the flags that choose them: io_uring (where the kernel allows it; else the
/// portable one twice) and the portable one.
pub fn backends() -> [&'static [&'static str]; 2] {
    let io_uring: &'static [&'static str] = match io_uring_where_allowed() {
        "io_uring" => &["--runtime", "io_uring"],
        _ => &["--runtime", "portable"],
    };
    [io_uring, &["--runtime", "portable"]]
}

impl Server {
    /// `start` on `backend` (one of `backends()`) with `arguments`.
    pub fn start_on(backend: &[&str], arguments: &[&str]) -> Server {
        Server::start(&[backend, arguments].concat())
    }

    /// Starts `azq --queuePort 0` plus `arguments` and waits for its ready line.
    pub fn start(arguments: &[&str]) -> Server {
        Server::start_with_env(arguments, &[])
    }

    /// Like `start`, with extra environment variables.
    pub fn start_with_env(arguments: &[&str], environment: &[(&str, &str)]) -> Server {
        let mut command = Command::new(azq_binary());
        command.envs(environment.iter().copied());
        Server::start_command(command, arguments)
    }

    /// Starts `command` (azq, or a wrapper that runs azq) with `--queuePort 0` plus `arguments`
    /// and waits for its ready line; its stderr goes to the test's. Without `--location` in
    /// `arguments` the server keeps nothing on disk (`--inMemoryPersistence`), so no test
    /// writes data into the working directory.
    pub fn start_command(mut command: Command, arguments: &[&str]) -> Server {
        if !arguments
            .iter()
            .any(|argument| ["-l", "--location"].contains(argument))
        {
            command.arg("--inMemoryPersistence");
        }
        // The caller's environment decides the accounts, never the one the tests run in.
        if !command
            .get_envs()
            .any(|(name, _)| name == "AZURITE_ACCOUNTS")
        {
            command.env_remove("AZURITE_ACCOUNTS");
        }
        let mut child = command
            .args(["--queueHost", "127.0.0.1", "--queuePort", "0", "--silent"])
            .args(arguments)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("azq starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let collected = stderr.clone();
        let stderr_reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("{line}");
                let mut collected = collected.lock().unwrap();
                collected.push_str(&line);
                collected.push('\n');
            }
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let Some(ready) = lines.next() else {
            let status = child.wait().expect("azq exits");
            let _ = stderr_reader.join();
            panic!(
                "azq exited ({status}) without its ready line: {}",
                stderr.lock().unwrap()
            );
        };
        let ready = ready.expect("stdout is text");
        let (port, backend) =
            parse_ready_line(&ready).unwrap_or_else(|| panic!("unexpected ready line: {ready}"));
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            port,
            backend,
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// What the server has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (at most 20 s) until the server's stderr holds `said`, and answers it: a thread
    /// reads the pipe, so a line the server wrote before an answer may reach `stderr` after it.
    pub fn await_stderr(&self, said: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let stderr = self.stderr();
            if stderr.contains(said) {
                return stderr;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {said:?} on stderr: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A new connection with a read timeout, so a broken server fails the test instead of hanging
    /// it.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// The process's ID (for its `/proc/PID/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.terminate();
        self.child.wait().expect("azq exits")
    }

    /// Kills the process (SIGKILL, as a crash or `kill -9`) and waits until it is gone; returns
    /// what it wrote to stderr.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        self.stderr()
    }

    fn terminate(&mut self) {
        // SAFETY: kill(2) with a child pid we own; failure (already exited) is harmless.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
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
}

/// The port and backend of `azq listening on http[s]://127.0.0.1:PORT (N shards, BACKEND,
/// data DIR|in memory)`, whatever follows (where the defaults came from).
pub fn parse_ready_line(line: &str) -> Option<(u16, String)> {
    let rest = line.strip_prefix("azq listening on ")?;
    let rest = rest
        .strip_prefix("http://")
        .or_else(|| rest.strip_prefix("https://"))?
        .strip_prefix("127.0.0.1:")?;
    let (port, rest) = rest.split_once(" (")?;
    let backend = rest.split_once(')')?.0.split(", ").nth(1)?;
    Some((port.parse().ok()?, backend.to_string()))
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The status line's reason phrase.
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `x-ms-error-code` header, if any.
    pub fn error_code(&self) -> Option<&str> {
        self.header("x-ms-error-code")
    }
}

/// Reads one response from `reader`; `head_only` for answers to HEAD (no body follows).
/// `None` when the connection closed before a status line; a response cut off after its status
/// line is a test failure (the server must never send a truncated response).
pub fn read_response(reader: &mut impl BufRead, head_only: bool) -> Option<Response> {
    let mut status_line = String::new();
    if reader.read_line(&mut status_line).ok()? == 0 {
        return None;
    }
    let mut status_parts = status_line
        .trim_end_matches(['\r', '\n'])
        .splitn(3, ' ')
        .skip(1);
    let status: u16 = status_parts
        .next()
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let reason = status_parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line).expect("headers arrive");
        assert!(read > 0, "response truncated in its headers");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header line");
        headers.push((name.to_string(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .map(|(_, value)| value.parse().expect("a numeric Content-Length"))
        .unwrap_or(0);
    let mut body = vec![
        0;
        if head_only || status == 100 {
            0
        } else {
            length
        }
    ];
    reader
        .read_exact(&mut body)
        .expect("the whole body arrives");
    Some(Response {
        status,
        reason,
        headers,
        body,
    })
}

/// Sends `raw` on a new connection and reads one response.
pub fn exchange(server: &Server, raw: &[u8]) -> Response {
    let mut stream = server.connect();
    stream.write_all(raw).expect("request sent");
    let mut reader = BufReader::new(stream);
    read_response(&mut reader, raw.starts_with(b"HEAD ")).expect("a response")
}

/// Sends `raw` on a new connection and reads one response (`exchange` for an owned request).
pub fn send(server: &Server, raw: Vec<u8>) -> Response {
    exchange(server, &raw)
}

/// Asserts a response's status and `x-ms-error-code`, showing its body when they differ.
pub fn assert_status(response: &Response, status: u16, code: Option<&str>) {
    assert_eq!(
        (response.status, response.error_code()),
        (status, code),
        "{}",
        response.text()
    );
}

/// Creates queue `name` of the development account, which must be new (201).
pub fn create_queue(server: &Server, name: &str) {
    let response = send(
        server,
        signed_request("PUT", &format!("/devstoreaccount1/{name}"), &[], b""),
    );
    assert_status(&response, 201, None);
}

/// The development account's path prefix.
pub fn account_path() -> String {
    format!("/{DEVELOPMENT_ACCOUNT_NAME}")
}

/// A request signed with the development account's key, as the SDKs sign it.
/// `target` is the path and query as sent; `headers` are extra headers.
pub fn signed_request(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    signed_request_with_key(method, target, headers, body, DEVELOPMENT_ACCOUNT_KEY)
}

/// Like `signed_request`, signed with `key` (base64).
pub fn signed_request_with_key(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    key: &str,
) -> Vec<u8> {
    build_signed(method, target, headers, body, key, "2026-04-06")
}

/// A body-less request sending `x-ms-version: version`.
pub fn signed_request_with_version(method: &str, target: &str, version: &str) -> Vec<u8> {
    build_signed(method, target, &[], b"", DEVELOPMENT_ACCOUNT_KEY, version)
}

fn build_signed(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    key: &str,
    version: &str,
) -> Vec<u8> {
    let signer = Signer {
        key,
        version,
        ..Signer::development()
    };
    signer.request(method, target, headers, body)
}

/// Who signs a request, how, and where it is sent.
#[derive(Clone, Copy, Debug)]
pub struct Signer<'a> {
    /// The account named in `Authorization` and signed in the canonicalised resource.
    pub account: &'a str,
    /// The account key, base64.
    pub key: &'a str,
    pub scheme: SharedKeyScheme,
    /// The `Host` header.
    pub host: &'a str,
    /// The `x-ms-version` header.
    pub version: &'a str,
    /// The `x-ms-date` header: `None` for now, as a client sends it; `Some("")` for none.
    pub date: Option<&'a str>,
}

impl Signer<'static> {
    /// SharedKey with the development account's key, to 127.0.0.1.
    pub fn development() -> Signer<'static> {
        Signer {
            account: DEVELOPMENT_ACCOUNT_NAME,
            key: DEVELOPMENT_ACCOUNT_KEY,
            scheme: SharedKeyScheme::SharedKey,
            host: "127.0.0.1",
            version: "2026-04-06",
            date: None,
        }
    }
}

impl Signer<'_> {
    /// A request signed as the SDKs sign it: `target` is the path and query as sent, `headers`
    /// extra headers.
    pub fn request(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<u8> {
        let date = self.date.map_or_else(httpdate_now, str::to_string);
        let mut all_headers: Vec<(String, String)> = vec![
            ("x-ms-date".to_string(), date),
            ("x-ms-version".to_string(), self.version.to_string()),
        ];
        all_headers.retain(|(_, value)| !value.is_empty());
        all_headers.extend(
            headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string())),
        );
        let content_length = body.len().to_string();
        let signed_headers = all_headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
            .chain(
                (!body.is_empty()).then_some((&b"content-length"[..], content_length.as_bytes())),
            );
        let mut string_to_sign = Vec::new();
        write_string_to_sign(
            self.scheme,
            method,
            target.as_bytes(),
            signed_headers,
            self.account,
            &mut string_to_sign,
        )
        .expect("a signable request");
        let signing_key = SigningKey::from_base64(self.key).expect("a base64 key");
        let signature = signing_key.sign_base64(&string_to_sign);
        let scheme = match self.scheme {
            SharedKeyScheme::SharedKey => "SharedKey",
            SharedKeyScheme::SharedKeyLite => "SharedKeyLite",
        };
        let mut raw = format!("{method} {target} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (name, value) in &all_headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str(&format!(
            "Content-Length: {}\r\nAuthorization: {scheme} {}:{signature}\r\n\r\n",
            body.len(),
            self.account
        ));
        let mut raw = raw.into_bytes();
        raw.extend_from_slice(body);
        raw
    }
}

fn httpdate_now() -> String {
    String::from_utf8(azq::time::rfc1123(azq::time::unix_ms()).to_vec()).unwrap()
}

/// Two queue names beginning with `prefix`, the first owned by shard 0 of two shards, the
/// second by shard 1: whichever shard a connection lands on, one is its own and the other
/// another shard's.
pub fn one_queue_a_shard(prefix: &str) -> [String; 2] {
    let on_shard = |shard| {
        (0..)
            .map(|index| format!("{prefix}-{index}"))
            .find(|name| {
                let key = azq::queue::QueueKey {
                    account: "devstoreaccount1".to_string(),
                    name: name.clone(),
                };
                azq::queue::shard_for(&key, 2) == shard
            })
            .expect("names hash onto both shards")
    };
    [on_shard(0), on_shard(1)]
}

/// A Put Message body for `text` (already XML-escaped by the caller where needed).
pub fn put_body(text: &str) -> Vec<u8> {
    format!("<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{text}</MessageText></QueueMessage>").into_bytes()
}

/// The text between `<tag>` and `</tag>` at each occurrence.
pub fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split_once(&close).map(|(inside, _)| inside))
        .collect()
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A service SAS for `queue` of the development account with `fields` (name, value), signed with
/// the account key through the server's own string-to-sign.
pub fn service_sas(queue: &str, fields: &[(&str, &str)]) -> String {
    let unsigned = fields
        .iter()
        .map(|(name, value)| format!("{name}={}", encode(value)))
        .collect::<Vec<_>>()
        .join("&");
    // Parsing needs some well-formed signature; the real one replaces it.
    let placeholder = format!("{unsigned}&sig={}=", "A".repeat(43));
    let query = azq::http::Query::parse(placeholder.as_bytes()).expect("a well-formed query");
    let token = azq::auth::sas::parse(&query)
        .expect("well-formed SAS fields")
        .expect("a SAS");
    let mut string_to_sign = Vec::new();
    azq::auth::sas::write_string_to_sign(
        &token,
        DEVELOPMENT_ACCOUNT_NAME,
        Some(queue),
        &mut string_to_sign,
    )
    .expect("a service SAS signs its queue");
    let signature = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY)
        .expect("the development key")
        .sign_base64(&string_to_sign);
    format!("{unsigned}&sig={}", encode(&signature))
}

/// A request with no `Authorization`, authorized only by the SAS in `target`.
pub fn unsigned_request(method: &str, target: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2026-10-06\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// The server's metrics (`/_azq/metrics`), which must be served.
pub fn metrics(server: &Server) -> String {
    let response = exchange(
        server,
        b"GET /_azq/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(response.status, 200);
    response.text()
}

/// The samples of `series` (one per shard) in `server`'s metrics, added up.
pub fn metric_total(server: &Server, series: &str) -> u64 {
    let metrics = metrics(server);
    let samples: Vec<u64> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix("{shard=\""))
        .map(|rest| rest.split_once(' ').expect("a sample").1.parse().unwrap())
        .collect();
    assert!(!samples.is_empty(), "no {series} in\n{metrics}");
    samples.iter().sum()
}

/// The value of the sample `series` in a Prometheus exposition (`/_azq/metrics`), its name and
/// labels exactly as rendered.
pub fn metric_sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .expect("an integer sample")
}

//! HTTPS over raw TLS (rustls as the client), against the real `azq` binary on both backends:
//! SharedKey requests pipelined on one session, and the cap on handshakes in flight per shard —
//! a connection beyond it is closed without a ServerHello, and once the idle ones are gone a new
//! client is served again; `azq healthcheck` finds an HTTPS server healthy. (The Python SDK
//! suite covers the rest: PEM, PFX, `auto`, tokens, plain HTTP to the TLS port, the handshake
//! timeout.)

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use azq::limits::TLS_HANDSHAKES_IN_FLIGHT_PER_SHARD_MAX;
use common::{azq_binary, read_response, signed_request, Server, TempDir};

/// A server with `--cert auto` kept in `data`, on `runtime`.
fn start(data: &TempDir, runtime: &str) -> Server {
    start_with(data, runtime, &[])
}

/// `start`'s server with `extra` flags as well.
fn start_with(data: &TempDir, runtime: &str, extra: &[&str]) -> Server {
    let base = [
        "--shards",
        "1",
        "--cert",
        "auto",
        "--location",
        data.arg(),
        "--runtime",
        runtime,
    ];
    Server::start(&[&base[..], extra].concat())
}

/// The backends this machine can run.
fn runtimes() -> Vec<&'static str> {
    let mut runtimes = vec!["portable"];
    if azq::runtime::select::io_uring_refusal().is_none() {
        runtimes.push("io_uring");
    }
    runtimes
}

/// A client configuration trusting the certificate the server keeps in `data`.
fn client_config(data: &TempDir) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in
        rustls::pki_types::CertificateDer::pem_file_iter(data.path().join("__azq__/cert.pem"))
            .unwrap()
    {
        roots.add(certificate.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// A TLS session to the server, handshake not yet done (rustls does it on first use).
fn session(
    server: &Server,
    config: &Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(config.clone(), name).unwrap();
    rustls::StreamOwned::new(connection, server.connect())
}

#[test]
fn pipelined_shared_key_requests_on_one_session() {
    for runtime in runtimes() {
        let data = TempDir::new(&format!("tls-pipelined-{runtime}"));
        let server = start(&data, runtime);
        let config = client_config(&data);
        let mut stream = session(&server, &config);
        // Three requests in one write: create, put, then list; each answered in order.
        let mut requests = signed_request("PUT", "/devstoreaccount1/tls-queue", &[], b"");
        let body = b"<QueueMessage><MessageText>over TLS</MessageText></QueueMessage>";
        requests.extend(signed_request(
            "POST",
            "/devstoreaccount1/tls-queue/messages",
            &[],
            body,
        ));
        requests.extend(signed_request(
            "GET",
            "/devstoreaccount1/tls-queue/messages?peekonly=true",
            &[],
            b"",
        ));
        stream.write_all(&requests).unwrap();
        let mut reader = BufReader::new(stream);
        let statuses: Vec<u16> = (0..3)
            .map(|_| read_response(&mut reader, false).expect("an answer").status)
            .collect();
        assert_eq!(statuses, [201, 201, 200], "{runtime}");
    }
}

#[test]
fn handshakes_beyond_the_cap_are_closed_without_an_answer() {
    azq::runtime::raise_open_files_limit();
    for runtime in runtimes() {
        let data = TempDir::new(&format!("tls-cap-{runtime}"));
        let server = start(&data, runtime);
        let config = client_config(&data);
        // Connections that never send their ClientHello hold every handshake slot of the one
        // shard (well within the handshake timeout: opening them takes a fraction of it).
        let idle: Vec<TcpStream> = (0..TLS_HANDSHAKES_IN_FLIGHT_PER_SHARD_MAX)
            .map(|_| server.connect())
            .collect();
        // The shard accepts in order, so when it takes this one every slot is held: it is
        // closed at once, its ClientHello unanswered.
        let mut extra = server.connect();
        let mut hello = Vec::new();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        rustls::ClientConnection::new(config.clone(), name)
            .unwrap()
            .write_tls(&mut hello)
            .unwrap();
        // The write may fail if the close came first; either way nothing must come back.
        let _ = extra.write_all(&hello);
        let mut answer = Vec::new();
        let _ = extra.read_to_end(&mut answer);
        assert!(
            answer.is_empty(),
            "{runtime}: a connection over the cap got {} bytes",
            answer.len()
        );
        // Once the idle connections close, their handshakes end and a new client is served.
        drop(idle);
        let mut served = false;
        for _ in 0..50 {
            let mut stream = session(&server, &config);
            let request = b"GET /_azq/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            if stream.write_all(request).is_ok() {
                let mut reader = BufReader::new(stream);
                if let Some(response) = read_response(&mut reader, false) {
                    assert_eq!(response.status, 200, "{runtime}");
                    served = true;
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            served,
            "{runtime}: no handshake completed after the idle clients left"
        );
    }
}

/// `azq healthcheck` with no option but the port: it asks in plain HTTP, hears the TLS alert an
/// HTTPS port answers with, and asks again over TLS (any certificate), so the image's
/// `HEALTHCHECK` works with `--cert` too.
#[test]
fn healthcheck_finds_an_https_server_serving() {
    for runtime in runtimes() {
        let data = TempDir::new("tls-healthcheck");
        let server = start(&data, runtime);
        let healthy = Command::new(azq_binary())
            .args(["healthcheck", "--queuePort", &server.port.to_string()])
            .output()
            .expect("azq healthcheck runs");
        assert!(healthy.status.success(), "{runtime}: {healthy:?}");
        let stdout = String::from_utf8_lossy(&healthy.stdout);
        assert!(
            stdout.contains("\"status\":\"serving\"")
                && stdout.contains(&format!("\"backend\":\"{runtime}\"")),
            "{runtime}: {stdout}"
        );
        assert!(server.stop().success());
    }
}

/// An X.509 v1 certificate: what `openssl x509 -req -signkey` makes, as older recipes and
/// Azurite's own test certificate do. `tests/data/v1-cert.pem` and `v1-key.pem` were made with
/// `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout v1-key.pem
/// -subj /CN=localhost -out v1.csr && openssl x509 -req -in v1.csr -signkey v1-key.pem
/// -days 36500 -sha256 -out v1-cert.pem`.
fn v1_certificate() -> (String, String) {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let path = |name: &str| data.join(name).to_string_lossy().into_owned();
    (path("v1-cert.pem"), path("v1-key.pem"))
}

#[test]
fn a_v1_certificate_is_served() {
    let (certificate, key) = v1_certificate();
    for runtime in runtimes() {
        let server = Server::start(&[
            "--shards",
            "1",
            "--cert",
            &certificate,
            "--key",
            &key,
            "--runtime",
            runtime,
        ]);
        // `azq healthcheck` completes a TLS 1.3 handshake with it (webpki, which checks the
        // handshake's signature, cannot read a v1 certificate: the key is read another way).
        let healthy = Command::new(azq_binary())
            .args(["healthcheck", "--queuePort", &server.port.to_string()])
            .output()
            .expect("azq healthcheck runs");
        assert!(healthy.status.success(), "{runtime}: {healthy:?}");
        assert!(server.stop().success());
    }
    // A key that is not the certificate's is still refused at start, naming the problem.
    let other_key = TempDir::new("tls-v1-other-key");
    let other_key_path = other_key.path().join("key.pem");
    std::fs::write(
        &other_key_path,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let refused = Command::new(azq_binary())
        .args([
            "--queuePort",
            "0",
            "--inMemoryPersistence",
            "--cert",
            &certificate,
            "--key",
            other_key_path.to_str().unwrap(),
        ])
        .output()
        .expect("azq runs");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("the private key is not the certificate's"),
        "{stderr}"
    );
}

/// A TCP stream whose first write is preceded, in the same write, by `prefix`: a PROXY header
/// that arrives together with the ClientHello, as a proxy's first segment may carry both.
struct Prefixed {
    stream: TcpStream,
    prefix: Option<Vec<u8>>,
}

impl Read for Prefixed {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        self.stream.read(buffer)
    }
}

impl Write for Prefixed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.prefix.take() {
            Some(mut prefix) => {
                prefix.extend_from_slice(bytes);
                self.stream.write_all(&prefix)?;
                Ok(bytes.len())
            }
            None => self.stream.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// With `--proxyProtocol` over HTTPS the PROXY header comes first, in the clear, and the TLS
/// session follows, even in the same segment: the client address of the header is what a SAS
/// `sip` sees.
#[test]
fn a_proxy_header_precedes_the_tls_session() {
    for runtime in runtimes() {
        let data = TempDir::new(&format!("tls-proxy-{runtime}"));
        let server = start_with(&data, runtime, &["--proxyProtocol"]);
        let config = client_config(&data);
        let exchange = |request: Vec<u8>| {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let connection = rustls::ClientConnection::new(config.clone(), name).unwrap();
            let stream = Prefixed {
                stream: server.connect(),
                prefix: Some(b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 10001\r\n".to_vec()),
            };
            let mut session = rustls::StreamOwned::new(connection, stream);
            session.write_all(&request).unwrap();
            read_response(&mut BufReader::new(session), false).expect("an answer")
        };
        let created = exchange(signed_request("PUT", "/devstoreaccount1/proxied", &[], b""));
        assert_eq!(created.status, 201, "{runtime}");
        let peek = |sip: &str| {
            let token = common::service_sas(
                "proxied",
                &[
                    ("sv", "2026-10-06"),
                    ("sp", "r"),
                    ("se", "2099-01-01T00:00:00Z"),
                    ("sip", sip),
                    ("spr", "https"),
                ],
            );
            common::unsigned_request(
                "GET",
                &format!("/devstoreaccount1/proxied/messages?peekonly=true&{token}"),
                b"",
            )
        };
        assert_eq!(exchange(peek("203.0.113.9")).status, 200, "{runtime}");
        let refused = exchange(peek("127.0.0.1"));
        assert_eq!(
            refused.error_code(),
            Some("AuthorizationSourceIPMismatch"),
            "{runtime}"
        );
        // Without a header, the connection is closed before any TLS.
        let mut plain = session(&server, &config);
        assert!(
            plain
                .write_all(b"GET /_azq/health HTTP/1.1\r\n\r\n")
                .is_err()
                || read_response(&mut BufReader::new(plain), false).is_none()
        );
    }
}

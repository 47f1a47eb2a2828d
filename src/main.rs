//! The `azq` binary: parses the Azurite-compatible command line, starts the shards, prints the
//! ready line, and waits for SIGINT/SIGTERM; any panic, or a shard that stops on its own, ends
//! the process with a non-zero status. `azq healthcheck` asks a running server whether it
//! serves, for container images without curl.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use azq::auth::Accounts;
use azq::config::{
    Config, Durability, OAuthLevel, Persistence, RuntimeChoice, HEALTHCHECK_TIMEOUT_MS, SHARDS_MAX,
};
use azq::lifecycle::Lifecycle;
use azq::runtime;
use azq::storage::files::{data_directory, lock_data_directory, StdFiles};
use azq::storage::recovery::{recover, RecoveryOptions, ShardStart};
use azq::tls::{AnyCertificate, CertificateSource, ServerCertificate};

const USAGE: &str = "\
azq: a thread-per-core Azure Queue Storage emulator (drop-in for azurite-queue)

Usage: azq [options]

  --queueHost HOST           address to listen on (default 127.0.0.1)
  --queuePort PORT           port to listen on (default 10001; 0 picks a free port)
  --shards N                 shards, one pinned core each (default: available CPUs)
  --cpus LIST                CPUs to pin shards to, e.g. 0,1 (default: the first N allowed)
  --max-connections N        open connections per shard before new ones get 503
  --max-memory SIZE          bytes of stored messages (e.g. 512M, 4G; default: half the RAM)
                             before Put answers 503 ServerBusy
  --extentMemoryLimit MB     Azurite's name for the same limit, in megabytes (-1: default)
  --runtime auto|io_uring|portable
                             the event loop: io_uring (glommio) where the kernel allows it,
                             else the portable one (tokio/epoll); default auto
  -s, --silent               no start-up banner beyond the ready line
  -d, --debug FILE           write a request log to FILE
  --disableProductStyleUrl   only path-style URLs (account in the path)
  -l, --location DIR         keep the queues in DIR/__azq__ (default: the current directory)
  --inMemoryPersistence      keep nothing on disk: a restart starts empty
  --durability fsync|write   acknowledge a change once synced to the device (fsync, the
                             default) or once written to the OS, synced every 200 ms (write:
                             survives a crash of azq, not a power cut)
  --truncateCorruptLog       start even when a log is damaged mid-way, dropping what follows
                             the damage (default: refuse to start, naming the file)
  --cert FILE --key FILE     serve HTTPS with a PEM certificate (chain) and its private key
  --cert FILE --pwd PASS     serve HTTPS with a PKCS#12 (.pfx) archive and its password
  --cert auto                serve HTTPS with a self-signed certificate for localhost,
                             127.0.0.1 and ::1, kept as DIR/__azq__/cert.pem (made anew
                             each start with --inMemoryPersistence); also served at
                             https://HOST:PORT/_azq/cert.pem
  --oauth basic              accept OAuth bearer tokens (JWT audience, issuer and lifetime
                             are checked, the signature is not) over HTTPS (--cert); without
                             --cert every bearer token is refused
  --profile azure            Azure's scalability targets: 2,000 message operations/s per
                             queue, 20,000 requests/s per account (503 ServerBusy beyond)
  --queue-rate-limit N       message operations per second per queue (with or without the
                             profile)
  --account-rate-limit N     requests per second per account
  --rate-burst TIME          what either limit lets through at once, as time at its rate
                             (default 1s; 1ms to 60s, e.g. 100ms for a stricter limit)
  --latency SPEC             service time added to every answer: 20ms, 5ms-50ms (uniform) or
                             p50=20ms,p99=200ms (log-normal)
  --faults-api               answer POST/GET/DELETE /_azq/faults (fault injection rules)
  --faults FILE              fault rules in force from the start (a JSON array)
  --seed N                   make every random choice (faults, latency) repeatable
  -L, --loose, --skipApiVersionCheck, --disableTelemetry
                             accepted for compatibility (azq is always lenient about versions)
  -h, --help, help           this text
  -v, -V, --version, version the version

Usage: azq healthcheck [--queueHost HOST] [--queuePort PORT]

  Exits 0 when the server on HOST:PORT (default 127.0.0.1:10001) answers GET /_azq/health
  with 200 (every shard serves), 1 otherwise. HTTP or HTTPS (any certificate), as it serves.

Environment: AZURITE_ACCOUNTS=\"acct1:key1[:key2];acct2:key\" replaces the development account.
";

fn main() {
    // A panic anywhere (a shard's thread, the signal thread) ends the process at once: a shard
    // that died would otherwise leave the others serving part of the queues, or a start-up that
    // never finishes. The release build also aborts on panic; this covers every build.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        default_hook(panic);
        eprintln!("azq: a thread panicked; the server stops");
        std::process::exit(101);
    }));
    let mut arguments = std::env::args().skip(1).peekable();
    if arguments.peek().map(String::as_str) == Some("healthcheck") {
        arguments.next();
        std::process::exit(match healthcheck(arguments) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(why) => {
                eprintln!("azq healthcheck: {why}");
                1
            }
        });
    }
    if let Err(error) = run(arguments) {
        eprintln!("azq: {error}");
        std::process::exit(2);
    }
}

fn run(arguments: impl Iterator<Item = String>) -> Result<(), String> {
    let Some(config) = parse_arguments(arguments)? else {
        return Ok(());
    };
    let accounts = match std::env::var("AZURITE_ACCOUNTS") {
        Ok(value) if !value.trim().is_empty() => Accounts::from_env_value(&value)?,
        _ => Accounts::new(&config.accounts)?,
    };
    // Each connection is a descriptor, and many systems start processes with a soft limit of
    // 1024, far below `--max-connections`; failure leaves the old limit, which still works for
    // fewer connections.
    let _ = runtime::raise_open_files_limit();
    let lifecycle = Arc::new(Lifecycle::new(azq::time::unix_ms()));
    runtime::handle_signals(lifecycle.clone())?;
    let storage = open_storage(&config)?;
    let certificate = match &config.certificate {
        Some(source) => {
            let kept_in = match &config.persistence {
                Persistence::Disk { location, .. } => Some(data_directory(location)),
                Persistence::Memory => None,
            };
            Some(ServerCertificate::load(source, kept_in.as_deref())?)
        }
        None => None,
    };
    let https = match &certificate {
        Some(certificate) => Some(runtime::Https {
            server_config: certificate.server_config()?,
            certificate_pem: certificate.chain_pem().into(),
        }),
        None => None,
    };
    if config.oauth.is_some() && https.is_none() {
        // Azurite starts so too; every bearer token is then refused, as Azure refuses one
        // over HTTP, while the account key and SAS work as usual.
        eprintln!(
            "azq: --oauth basic without --cert: bearer tokens are refused over plain HTTP \
             (add --cert, e.g. --cert auto, to accept them)"
        );
    }
    let server = runtime::start(&config, accounts, lifecycle, storage.stores, https)?;
    if let Some(reason) = &server.fallback_reason {
        eprintln!("azq: io_uring unavailable, using the portable backend: {reason}");
    }
    if !config.silent {
        println!(
            "azq {} (shards pinned to CPUs {:?})",
            env!("CARGO_PKG_VERSION"),
            config.cpus
        );
    }
    println!(
        "azq listening on {}://{} ({} shards, {}, {})",
        if certificate.is_some() {
            "https"
        } else {
            "http"
        },
        server.address,
        server.shards,
        server.backend.name(),
        storage.shown
    );
    // After the ready line, which tools read as the first line of a silent start.
    if let Some(certificate) = &certificate {
        let kept = match (&certificate.kept_at, &config.certificate) {
            (Some(path), _) => format!("kept in {}", path.display()),
            (None, Some(CertificateSource::Auto)) => "made for this run only".to_string(),
            _ => "from --cert".to_string(),
        };
        println!(
            "azq: HTTPS certificate {kept}, SHA-256 {}; also at https://{}/_azq/cert.pem",
            certificate.fingerprint_sha256(),
            server.address
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    server.join()
}

/// The storage a server starts with.
struct Storage {
    /// Every shard's recovered state; `None` in memory-only mode.
    stores: Option<Vec<ShardStart>>,
    /// Keeps other servers out of the data directory while this one runs.
    _lock: Option<std::fs::File>,
    /// Where the data lives, for the ready line.
    shown: String,
}

/// Opens the data directory and brings back every shard's state, before any shard serves.
fn open_storage(config: &Config) -> Result<Storage, String> {
    let Persistence::Disk {
        location,
        truncate_corrupt,
        ..
    } = &config.persistence
    else {
        return Ok(Storage {
            stores: None,
            _lock: None,
            shown: "in memory".to_string(),
        });
    };
    let root = data_directory(location);
    let lock = lock_data_directory(&root)?;
    let recovered = recover(
        &StdFiles,
        &root,
        config.cpus.len(),
        azq::time::unix_ms(),
        &mut runtime::shard::shard_seed,
        RecoveryOptions {
            truncate_corrupt: *truncate_corrupt,
        },
    )
    .map_err(|why| format!("cannot recover the data in {}: {why}", root.display()))?;
    for note in &recovered.notes {
        eprintln!("azq: {note}");
    }
    if !config.silent {
        println!("azq: {}", recovered.summary);
    }
    let shown = std::fs::canonicalize(&root).unwrap_or(root);
    Ok(Storage {
        stores: Some(recovered.shards),
        _lock: Some(lock),
        shown: format!("data {}", shown.display()),
    })
}

/// Parses the command line; `None` when it asked for help or the version (already printed).
fn parse_arguments(arguments: impl Iterator<Item = String>) -> Result<Option<Config>, String> {
    let mut config = Config::default();
    let mut shards: Option<usize> = None;
    let mut cpus: Option<Vec<usize>> = None;
    let (mut location, mut in_memory) = (None, false);
    let (mut durability, mut truncate_corrupt) = (Durability::Fsync, false);
    let (mut certificate, mut key, mut password) = (None, None, None);
    let mut arguments = arguments.peekable();
    while let Some(argument) = arguments.next() {
        let (flag, inline_value) = match argument.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (argument.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline_value
                .clone()
                .or_else(|| arguments.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--queueHost" => {
                config.host = value(&flag)?
                    .parse()
                    .map_err(|_| "--queueHost must be an IP address".to_string())?
            }
            "--queuePort" => {
                config.port = value(&flag)?
                    .parse()
                    .map_err(|_| "--queuePort must be a port number".to_string())?
            }
            "--shards" => {
                let count: usize = value(&flag)?
                    .parse()
                    .map_err(|_| "--shards must be a number".to_string())?;
                if !(1..=SHARDS_MAX).contains(&count) {
                    return Err(format!("--shards must be between 1 and {SHARDS_MAX}"));
                }
                shards = Some(count);
            }
            "--cpus" => {
                let list = value(&flag)?
                    .split(',')
                    .map(|cpu| cpu.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        "--cpus must be a comma-separated list of CPU numbers".to_string()
                    })?;
                if list.is_empty() || list.len() > SHARDS_MAX {
                    return Err(format!("--cpus must list 1 to {SHARDS_MAX} CPUs"));
                }
                cpus = Some(list);
            }
            "--max-connections" => {
                config.connections_per_shard_max = value(&flag)?
                    .parse()
                    .ok()
                    .filter(|&count: &usize| count > 0)
                    .ok_or_else(|| "--max-connections must be a positive number".to_string())?
            }
            "--max-memory" => {
                config.message_bytes_max = parse_size(&value(&flag)?)
                    .filter(|&bytes| bytes > 0)
                    .ok_or_else(|| "--max-memory must be a size such as 512M or 4G".to_string())?
            }
            // Azurite's limit on in-memory message storage, in megabytes; -1 keeps the default.
            "--extentMemoryLimit" => {
                let megabytes: i64 = value(&flag)?
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&megabytes| megabytes > 0 || megabytes == -1)
                    .ok_or_else(|| {
                        "--extentMemoryLimit must be a number of megabytes (or -1)".to_string()
                    })?;
                if megabytes > 0 {
                    config.message_bytes_max = (megabytes as u64).saturating_mul(1 << 20);
                }
            }
            "--runtime" => {
                config.runtime = RuntimeChoice::parse(&value(&flag)?)
                    .ok_or_else(|| "--runtime must be auto, io_uring or portable".to_string())?
            }
            "-s" | "--silent" => config.silent = true,
            "-d" | "--debug" => config.debug_log_path = Some(value(&flag)?.into()),
            "--disableProductStyleUrl" => config.product_style_url_disabled = true,
            "-l" | "--location" => location = Some(std::path::PathBuf::from(value(&flag)?)),
            "--inMemoryPersistence" => in_memory = true,
            "--durability" => {
                durability = Durability::parse(&value(&flag)?)
                    .ok_or_else(|| "--durability must be fsync or write".to_string())?
            }
            "--truncateCorruptLog" => truncate_corrupt = true,
            flag if azq::governor::FLAGS.contains(&flag) => {
                config.governor.parse_flag(flag, || value(flag))?
            }
            "-L" | "--loose" | "--skipApiVersionCheck" | "--disableTelemetry" => {}
            "--cert" => certificate = Some(value(&flag)?),
            "--key" => key = Some(value(&flag)?),
            "--pwd" => password = Some(value(&flag)?),
            "--oauth" => {
                config.oauth = Some(
                    OAuthLevel::parse(&value(&flag)?)
                        .ok_or_else(|| "--oauth must be basic".to_string())?,
                )
            }
            // `help` and `version` are azurite-queue's commands.
            "-h" | "--help" | "help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            "-V" | "-v" | "--version" | "version" => {
                println!("azq {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            other => return Err(format!("unknown option {other} (see --help)")),
        }
    }
    config.certificate = CertificateSource::from_flags(certificate, key, password)?;
    config.persistence = if in_memory {
        // As with Azurite, --inMemoryPersistence wins over --location.
        Persistence::Memory
    } else {
        Persistence::Disk {
            location: location.unwrap_or_else(|| std::path::PathBuf::from(".")),
            durability,
            truncate_corrupt,
        }
    };
    config.cpus = match (cpus, shards) {
        (Some(cpus), Some(count)) if cpus.len() != count => {
            return Err(format!(
                "--cpus lists {} CPUs but --shards is {count}",
                cpus.len()
            ))
        }
        (Some(cpus), _) => cpus,
        (None, count) => {
            let allowed = runtime::allowed_cpus();
            let count = count.unwrap_or(allowed.len());
            if count > allowed.len() {
                return Err(format!(
                    "--shards {count} needs {count} CPUs but this process may use {}",
                    allowed.len()
                ));
            }
            allowed[..count].to_vec()
        }
    };
    Ok(Some(config))
}

/// Parses a byte count with an optional binary suffix: `1048576`, `512K`, `64M`, `4G`.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (at, 'k' | 'K') => (&text[..at], 10),
        (at, 'm' | 'M') => (&text[..at], 20),
        (at, 'g' | 'G') => (&text[..at], 30),
        (at, 't' | 'T') => (&text[..at], 40),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Asks the server named by `arguments` (`--queueHost`, `--queuePort`) for `/_azq/health`, in
/// plain HTTP or, when the port answers with a TLS alert, over TLS: its status line when it
/// answers 200, else why not.
fn healthcheck(mut arguments: impl Iterator<Item = String>) -> Result<String, String> {
    let defaults = Config::default();
    let (mut host, mut port) = (defaults.host, defaults.port);
    while let Some(argument) = arguments.next() {
        let (flag, inline_value) = match argument.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (argument, None),
        };
        let value = inline_value
            .or_else(|| arguments.next())
            .ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--queueHost" => {
                host = value
                    .parse()
                    .map_err(|_| "--queueHost must be an IP address".to_string())?
            }
            "--queuePort" => {
                port = value
                    .parse()
                    .map_err(|_| "--queuePort must be a port number".to_string())?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    // A server listening on every address is asked on loopback.
    if host.is_unspecified() {
        host = match host {
            IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        };
    }
    let address = SocketAddr::new(host, port);
    // One deadline for both attempts, so a container's health check timeout holds.
    let deadline = Instant::now() + Duration::from_millis(HEALTHCHECK_TIMEOUT_MS);
    let mut answer = ask_health(address, None, deadline)?;
    if answer.first() == Some(&TLS_ALERT_RECORD) {
        // Plain HTTP to an HTTPS port: azq answered with a TLS alert. Ask again over TLS,
        // trusting whatever certificate it serves: this asks whether it serves, not who it is.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("cannot configure TLS: {error}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        answer = ask_health(address, Some(Arc::new(config)), deadline)?;
    }
    let answer = String::from_utf8_lossy(&answer);
    let status_line = answer.lines().next().unwrap_or("");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    if status_line.starts_with("HTTP/1.1 200 ") {
        Ok(body.to_string())
    } else if status_line.is_empty() {
        Err(format!("no answer from {address}"))
    } else {
        Err(format!("{address} answered {status_line}: {body}"))
    }
}

/// The first byte of a TLS alert record.
const TLS_ALERT_RECORD: u8 = 0x15;

/// Sends `GET /_azq/health` to `address`, over TLS with `tls`, and returns what came back
/// (at most 64 KiB) until the server closed or `deadline` passed.
fn ask_health(
    address: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    deadline: Instant,
) -> Result<Vec<u8>, String> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let stream = TcpStream::connect_timeout(&address, left())
        .map_err(|error| format!("cannot connect to {address}: {error}"))?;
    let _ = stream.set_read_timeout(Some(left()));
    let _ = stream.set_write_timeout(Some(left()));
    let request =
        format!("GET /_azq/health HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    let mut stream: Box<dyn ReadWrite> = match tls {
        None => Box::new(stream),
        Some(config) => {
            let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
            let session = rustls::ClientConnection::new(config, name)
                .map_err(|error| format!("cannot start TLS: {error}"))?;
            Box::new(rustls::StreamOwned::new(session, stream))
        }
    };
    stream
        .write_all(request.as_bytes())
        .map_err(|error| format!("cannot ask {address}: {error}"))?;
    let mut answer = Vec::new();
    // An error after some bytes (a close without close_notify, the timeout) ends the answer.
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    Ok(answer)
}

/// A connection `ask_health` can speak over, plain or TLS.
trait ReadWrite: Read + Write {}

impl<T: Read + Write> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use super::{parse_arguments, parse_size};
    use azq::config::{Durability, Persistence, RuntimeChoice};

    fn parse(arguments: &[&str]) -> Result<Option<azq::config::Config>, String> {
        parse_arguments(arguments.iter().map(|argument| argument.to_string()))
    }

    #[test]
    fn azurite_command_lines() {
        // What azurite-queue is started with in Docker, testcontainers and CI scripts.
        let config = parse(&[
            "--queueHost",
            "0.0.0.0",
            "--queuePort=10001",
            "--inMemoryPersistence",
            "--extentMemoryLimit",
            "256",
            "--loose",
            "--skipApiVersionCheck",
            "--disableProductStyleUrl",
            "--disableTelemetry",
            "-s",
        ])
        .unwrap()
        .expect("a configuration");
        assert_eq!(config.host.to_string(), "0.0.0.0");
        assert_eq!(config.port, 10001);
        assert_eq!(config.message_bytes_max, 256 << 20);
        assert!(config.silent && config.product_style_url_disabled);
        assert_eq!(config.persistence, Persistence::Memory);
        // Azurite's image: `-l /data`; persistence is on by default, fully durable.
        let disk = |location: &str, durability, truncate_corrupt| Persistence::Disk {
            location: location.into(),
            durability,
            truncate_corrupt,
        };
        let cases: [(&[&str], Persistence); 5] = [
            (&["-l", "/data"], disk("/data", Durability::Fsync, false)),
            (&[], disk(".", Durability::Fsync, false)),
            (
                &[
                    "--location=/x",
                    "--durability",
                    "write",
                    "--truncateCorruptLog",
                ],
                disk("/x", Durability::Write, true),
            ),
            (&["--durability=fsync"], disk(".", Durability::Fsync, false)),
            // As with Azurite, in-memory mode wins over a location.
            (
                &["-l", "/data", "--inMemoryPersistence"],
                Persistence::Memory,
            ),
        ];
        for (arguments, expected) in cases {
            let config = parse(arguments).unwrap().unwrap();
            assert_eq!(config.persistence, expected, "{arguments:?}");
        }
        let default_bytes = parse(&[]).unwrap().unwrap().message_bytes_max;
        let config = parse(&["--extentMemoryLimit=-1"]).unwrap().unwrap();
        assert_eq!(config.message_bytes_max, default_bytes);
        assert_eq!(
            parse(&["--runtime", "portable"]).unwrap().unwrap().runtime,
            RuntimeChoice::Portable
        );
        assert_eq!(parse(&[]).unwrap().unwrap().runtime, RuntimeChoice::Auto);
        // HTTPS and OAuth as azurite-queue takes them.
        let https = parse(&["--cert", "c.pem", "--key", "k.pem", "--oauth", "basic"])
            .unwrap()
            .unwrap();
        assert_eq!(
            https.certificate,
            Some(azq::tls::CertificateSource::Pem {
                certificate: "c.pem".into(),
                key: "k.pem".into()
            })
        );
        assert_eq!(https.oauth, Some(azq::config::OAuthLevel::Basic));
        // As Azurite, --oauth without --cert starts (bearer tokens are then refused).
        assert_eq!(
            parse(&["--oauth", "basic"]).unwrap().unwrap().oauth,
            Some(azq::config::OAuthLevel::Basic)
        );
        let pfx = parse(&["--cert=c.pfx", "--pwd=secret"]).unwrap().unwrap();
        assert!(matches!(
            pfx.certificate,
            Some(azq::tls::CertificateSource::Pfx { .. })
        ));
        assert_eq!(
            parse(&["--cert", "auto"]).unwrap().unwrap().certificate,
            Some(azq::tls::CertificateSource::Auto)
        );
        let governed = parse(&[
            "--profile",
            "azure",
            "--queue-rate-limit=10",
            "--faults-api",
        ])
        .unwrap()
        .unwrap()
        .governor;
        assert_eq!(governed.queue_rate(), Some(10));
        assert_eq!(governed.account_rate(), Some(20_000));
        assert!(governed.faults_api);
        for command in ["help", "version", "-v", "-h"] {
            assert!(parse(&[command]).unwrap().is_none(), "{command}");
        }
        for refused in [
            &["--extentMemoryLimit", "0"][..],
            &["--extentMemoryLimit", "-2"],
            &["--extentMemoryLimit", "lots"],
            &["--location"],
            &["--durability", "sometimes"],
            &["--cert", "cert.pem"],
            &["--cert", "auto", "--oauth", "full"],
            &["--key", "key.pem"],
            &["--blobHost", "0.0.0.0"],
            &["--runtime", "epoll"],
            &["--profile", "aws"],
            &["--latency", "soon"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn size_table() {
        let cases = [
            ("1048576", Some(1 << 20)),
            ("512K", Some(512 << 10)),
            ("64m", Some(64 << 20)),
            ("4G", Some(4 << 30)),
            ("1T", Some(1 << 40)),
            ("", None),
            ("G", None),
            ("-1G", None),
            ("1.5G", None),
            ("99999999999T", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_size(text), expected, "{text:?}");
        }
    }
}

//! The `azq` binary: parses the Azurite-compatible command line, starts the shards, prints the
//! ready line, and waits for SIGINT/SIGTERM; any panic, or a shard that stops on its own, ends
//! the process with a non-zero status. `azq healthcheck` asks a running server whether it
//! serves, for container images without curl; `azq inspect-segment FILE` describes a log
//! segment record by record (the copies recovery keeps of what it cuts).

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azq::api::control_access::ControlHosts;
use azq::auth::Accounts;
use azq::azurite::{self, Invocation};
use azq::discovery;
use azq::lifecycle::Lifecycle;
use azq::limits::{CONTROL_HOST_NAMES_MAX, HEALTHCHECK_TIMEOUT_MS};
use azq::queue::ShardState;
use azq::runtime;
use azq::settings::{parse_arguments, Config, Persistence};
use azq::storage::files::{data_directory, lock_data_directory, StdFiles};
use azq::storage::recovery::{recover, RecoveryOptions, ShardStart};
use azq::tls::{AnyCertificate, CertificateSource, ServerCertificate};

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
    let mut arguments = std::env::args();
    let program = arguments.next().unwrap_or_default();
    let mut arguments = arguments.peekable();
    if arguments.peek().map(String::as_str) == Some("env") {
        arguments.next();
        match environment(&program, arguments) {
            Ok(text) => {
                print!("{text}");
                std::process::exit(0);
            }
            Err(why) => {
                eprintln!("azq env: {why}");
                std::process::exit(2);
            }
        }
    }
    if arguments.peek().map(String::as_str) == Some("inspect-segment") {
        arguments.next();
        std::process::exit(match inspect_segment(arguments) {
            Ok(text) => {
                print!("{text}");
                0
            }
            Err(why) => {
                eprintln!("azq inspect-segment: {why}");
                2
            }
        });
    }
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
    let started = azurite::interpret(&program, arguments.collect(), |variable| {
        std::env::var(variable).ok()
    })
    .and_then(run);
    if let Err(error) = started {
        eprintln!("azq: {error}");
        std::process::exit(2);
    }
}

/// `azq inspect-segment FILE…`: each log segment (or a copy recovery kept aside) described
/// record by record (`storage::inspect`).
fn inspect_segment(files: impl Iterator<Item = String>) -> Result<String, String> {
    let mut text = String::new();
    for file in files {
        // Read, not mapped (as recovery's `StdFiles::read` would): a server starting on the
        // same data may cut the file meanwhile, and a mapping past the cut is SIGBUS.
        let data =
            bytes::Bytes::from(std::fs::read(&file).map_err(|why| format!("{file}: {why}"))?);
        text.push_str(&azq::storage::inspect::describe_segment(&file, &data)?);
    }
    if text.is_empty() {
        return Err("usage: azq inspect-segment FILE…".to_string());
    }
    Ok(text)
}

/// Who the console and inspection (`/_azq/`) are open to, said once at start.
fn control_plane_line(accounts: &Accounts) -> String {
    let (open, private): (Vec<String>, Vec<String>) =
        accounts.names().into_iter().partition(|name| {
            accounts
                .get(name)
                .is_some_and(|account| account.has_public_key())
        });
    if private.is_empty() {
        return "console (/_azq/ui) and inspection open without sign-in: every account's key \
                is the public development key"
            .to_string();
    }
    let open = if open.is_empty() {
        String::new()
    } else {
        format!("; open to all: {}", open.join(", "))
    };
    format!(
        "console (/_azq/ui) and inspection show {} only to a caller with its key (sign in, \
         SharedKey or an account SAS){open}",
        private.join(", ")
    )
}

fn run(invocation: Invocation) -> Result<(), String> {
    let Some(mut config) = parse_arguments(invocation.arguments.into_iter())? else {
        return Ok(());
    };
    // Names a container image gives `/_azq/` (deploy/docker/Dockerfile), added to the flag's.
    if let Ok(names) = std::env::var("AZQ_CONTROL_HOSTS") {
        let names =
            ControlHosts::parse(&names).map_err(|why| format!("AZQ_CONTROL_HOSTS: {why}"))?;
        config.control_hosts = config.control_hosts.merged(names);
        if config.control_hosts.name_count() > CONTROL_HOST_NAMES_MAX {
            return Err(format!(
                "--control-hosts and AZQ_CONTROL_HOSTS: at most {CONTROL_HOST_NAMES_MAX} names"
            ));
        }
    }
    // Certificate files given on the command line are read first, as whoever started azq: in
    // the image that is root, which alone may read what Testcontainers copies in. Then root is
    // given up (AZQ_RUN_AS) before anything is opened or written, and before any thread starts.
    let given_certificate = match &config.certificate {
        Some(CertificateSource::Auto) | None => None,
        Some(source) => Some(ServerCertificate::load(source, None)?),
    };
    azq::privileges::leave_root(azq::privileges::parse(
        std::env::var("AZQ_RUN_AS").ok().as_deref(),
    )?)?;
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
    let mut storage = open_storage(&config)?;
    if let Some(stores) = storage
        .stores
        .as_ref()
        .filter(|s| s.len() < config.cpus.len())
    {
        // Recovery kept the files' shard count (`RecoveryOptions::shards_default`, its note
        // says why): a shard on each of the first CPUs.
        config.cpus.truncate(stores.len());
        config.shards_origin = "the data directory's (see above)".to_string();
    }
    let memory_states = match &config.init_path {
        Some(path) => Some(apply_init(path, &config, &accounts, &mut storage)?),
        None => None,
    }
    .flatten();
    let certificate = match (given_certificate, &config.certificate) {
        (Some(given), _) => Some(given),
        (None, Some(source)) => {
            let kept_in = match &config.persistence {
                Persistence::Disk { location, .. } => Some(data_directory(location)),
                Persistence::Memory => None,
            };
            Some(ServerCertificate::load(source, kept_in.as_deref())?)
        }
        (None, None) => None,
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
    let https_on = https.is_some();
    let queue_asked = SocketAddr::new(config.host, config.port);
    for line in azurite::starting_lines(invocation.mode, queue_asked, &invocation.probes, https_on)
    {
        println!("{line}");
    }
    let control_plane = control_plane_line(&accounts);
    let server = runtime::start(
        &config,
        accounts,
        lifecycle,
        storage.stores,
        memory_states,
        https,
        &invocation.probes,
    )?;
    if let Some(reason) = &server.fallback_reason {
        eprintln!("azq: io_uring unavailable, using the portable backend: {reason}");
    }
    if !config.silent {
        println!(
            "azq {} (shards pinned to CPUs {:?})",
            env!("CARGO_PKG_VERSION"),
            config.cpus
        );
        println!("azq: {control_plane}");
    }
    for line in azurite::listening_lines(
        invocation.mode,
        server.address,
        &server.probe_addresses,
        https_on,
    ) {
        println!("{line}");
    }
    // The parenthesis as it always was (tools read it), then where the defaults came from.
    println!(
        "azq listening on {}://{} ({} shards, {}, {}); max memory {}: {}; {} shard{}: {}",
        if certificate.is_some() {
            "https"
        } else {
            "http"
        },
        server.address,
        server.shards,
        server.backend.name(),
        storage.shown,
        azq::cgroup::format_bytes(config.message_bytes_max),
        config.message_bytes_max_origin,
        server.shards,
        if server.shards == 1 { "" } else { "s" },
        config.shards_origin,
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
    let _ = std::io::stdout().flush();
    let (closing, closed) = azurite::closing_lines(invocation.mode, &server.probe_addresses);
    let joined = server.join();
    // Azurite's lines when it stops (after the drain here: they mean the same to a reader).
    for line in closing
        .iter()
        .chain(if joined.is_ok() { &closed[..] } else { &[] })
    {
        println!("{line}");
    }
    joined
}

/// Reads the `--init` file at `path` and applies it to every shard's state before any shard
/// starts: the recovered states on disk, or new ones in memory (returned, for the runtime).
fn apply_init(
    path: &str,
    config: &Config,
    accounts: &Accounts,
    storage: &mut Storage,
) -> Result<Option<Vec<ShardState>>, String> {
    let names = accounts.names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let plan = azq::init::read(path, &names).map_err(|why| format!("--init {why}"))?;
    let shards = config.cpus.len();
    let now_ms = azq::time::unix_ms();
    let per_shard_bytes_max = config.message_bytes_max / shards as u64;
    let (applied, memory_states) = match &mut storage.stores {
        Some(stores) => {
            let mut states: Vec<&mut ShardState> =
                stores.iter_mut().map(|start| &mut start.state).collect();
            for state in states.iter_mut() {
                state.set_message_bytes_max(per_shard_bytes_max);
            }
            (azq::init::apply(&plan, &mut states, now_ms), None)
        }
        None => {
            // Each shard has a secret of its own, as a fresh in-memory shard has: in memory, no
            // message ever changes shard.
            let mut states: Vec<ShardState> = (0..shards)
                .map(|index| {
                    let secret = azq::storage::secret::random()?;
                    let seed = runtime::shard::shard_seed(index);
                    let mut state = ShardState::with_secret(index, seed, secret);
                    state.set_message_bytes_max(per_shard_bytes_max);
                    Ok(state)
                })
                .collect::<Result<_, String>>()?;
            let applied = azq::init::apply(&plan, &mut states, now_ms);
            (applied, Some(states))
        }
    };
    let applied = applied.map_err(|why| format!("--init {path}: {why}"))?;
    if !config.silent {
        println!("azq: --init {path}: {applied}");
    }
    Ok(memory_states)
}

/// `azq env`: the environment for a client of a server started as `program` with `arguments`
/// (the environment's defaults applied as the server applies them).
fn environment(program: &str, arguments: impl Iterator<Item = String>) -> Result<String, String> {
    let mut shell = azq::client_env::Shell::Posix;
    let mut account: Option<String> = None;
    let mut server_arguments = Vec::new();
    let mut arguments = arguments.peekable();
    while let Some(argument) = arguments.next() {
        let (flag, inline) = match argument.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (argument.clone(), None),
        };
        match flag.as_str() {
            "--format" | "--shell" => {
                let value = inline.or_else(|| arguments.next()).unwrap_or_default();
                shell = azq::client_env::Shell::parse(&value)
                    .ok_or_else(|| format!("--format {value}: sh, powershell or dotenv"))?;
            }
            "--account" => account = inline.or_else(|| arguments.next()),
            _ => server_arguments.push(argument),
        }
    }
    let invocation = azurite::interpret(program, server_arguments, |variable| {
        std::env::var(variable).ok()
    })?;
    let Some(config) = parse_arguments(invocation.arguments.into_iter())? else {
        return Err("env takes server options, not help or version".to_string());
    };
    let accounts = match std::env::var("AZURITE_ACCOUNTS") {
        Ok(value) if !value.trim().is_empty() => azq::auth::accounts::parse_env_value(&value)?,
        _ => config.accounts.clone(),
    };
    let (name, keys) = match &account {
        Some(wanted) => accounts
            .iter()
            .find(|(name, _)| name == wanted)
            .ok_or_else(|| format!("no account {wanted}"))?,
        None => accounts.first().ok_or("no account")?,
    };
    let endpoint = azq::client_env::Endpoint {
        https: config.certificate.is_some(),
        host: azq::client_env::client_host(&config.host.to_string()),
        port: config.port,
        account: name.clone(),
        key: keys.first().cloned().unwrap_or_default(),
    };
    Ok(endpoint.render(shell))
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
    let secret = azq::storage::secret::load_or_create(&root)?;
    let recovered = recover(
        &StdFiles,
        &root,
        config.cpus.len(),
        azq::time::unix_ms(),
        &mut runtime::shard::shard_seed,
        secret,
        RecoveryOptions {
            truncate_corrupt: *truncate_corrupt,
            locate_texts: config.text_bytes_max.is_some(),
            reshard_text_bytes_max: Some(config.message_bytes_max),
            reshard_memory_bytes_max: azq::settings::memory_bytes(),
            free_disk_min: Some(config.free_disk_min),
            disk_bytes_max: config.disk_bytes_max,
            shards_default: config.shards_default,
        },
    )
    .map_err(|why| format!("cannot recover the data in {}: {why}", root.display()))?;
    for note in &recovered.notes {
        eprintln!("azq: {note}");
    }
    let mut shards = recovered.shards;
    if config.text_bytes_max.is_some() {
        // Before anything applies to the states (`--init`'s puts): a put that took the slot
        // and generation of a message that expired while the server was down would otherwise
        // meet that message's home. On this thread, as recovery restores the states: what they
        // keep stays in one arena.
        for start in &mut shards {
            start.state.track_texts(std::mem::take(&mut start.texts));
        }
    }
    // What recovery's threads read and freed (the shards' images) stays in their arenas, free
    // but resident, until given back: 11 MiB after a restart of 2,000,000 messages on two
    // shards (RSS 216 MiB against 227 when one thread read them).
    runtime::os::give_back_free_memory();
    if !config.silent {
        println!("azq: {}", recovered.summary);
    }
    let shown = std::fs::canonicalize(&root).unwrap_or(root);
    Ok(Storage {
        stores: Some(shards),
        _lock: Some(lock),
        shown: format!("data {}", shown.display()),
    })
}

/// Asks the server named by `arguments` (`--queueHost`, `--queuePort`) for `/_azq/health`, in
/// plain HTTP or, when the port answers with a TLS alert, over TLS: its status line when it
/// answers 200, else why not.
fn healthcheck(mut arguments: impl Iterator<Item = String>) -> Result<String, String> {
    let (mut host, mut port, discovered_proxy_protocol) = server_address();
    // The server beside this check says whether it wants a PROXY header, unless another
    // server is named (then only the flag does).
    let (mut proxy_protocol, mut address_given) = (false, false);
    while let Some(argument) = arguments.next() {
        if argument == "--proxyProtocol" {
            proxy_protocol = true;
            continue;
        }
        address_given = true;
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
    proxy_protocol |= discovered_proxy_protocol && !address_given;
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
    let mut answer = ask_health(address, None, deadline, proxy_protocol)?;
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
        answer = ask_health(address, Some(Arc::new(config)), deadline, proxy_protocol)?;
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

/// The queue address of the azq server running beside this health check (its container's
/// entrypoint), from its command line and environment as `azq` would read them, and whether
/// it wants a PROXY protocol header (`--proxyProtocol`); azq's default (127.0.0.1:10001, no
/// header) when there is none or it cannot be read.
fn server_address() -> (IpAddr, u16, bool) {
    let defaults = Config::default();
    let fallback = (defaults.host, defaults.port, defaults.proxy_protocol);
    let Some(server) = discovery::server_process(Path::new("/"), std::process::id()) else {
        return fallback;
    };
    // Its own environment where readable, else ours: a container's health check runs with the
    // container's.
    let environment = |variable: &str| match &server.environment {
        Some(_) => server.variable(variable),
        None => std::env::var(variable).ok(),
    };
    let Ok(invocation) = azurite::interpret(&server.program, server.arguments.clone(), environment)
    else {
        return fallback;
    };
    match parse_arguments(invocation.arguments.into_iter()) {
        Ok(Some(config)) => (config.host, config.port, config.proxy_protocol),
        _ => fallback,
    }
}

/// The first byte of a TLS alert record.
const TLS_ALERT_RECORD: u8 = 0x15;

/// A PROXY protocol v2 header for a LOCAL connection (no client behind it: the server keeps
/// the connection's own peer address), as HAProxy's health checks send.
const PROXY_V2_LOCAL_HEADER: &[u8; 16] = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";

/// Sends `GET /_azq/health` to `address`, over TLS with `tls`, after a PROXY protocol header
/// with `proxy_header`, and returns what came back (at most 64 KiB) until the server closed
/// or `deadline` passed.
fn ask_health(
    address: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    deadline: Instant,
    proxy_header: bool,
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
    if proxy_header {
        (&stream)
            .write_all(PROXY_V2_LOCAL_HEADER)
            .map_err(|error| format!("cannot ask {address}: {error}"))?;
    }
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

//! The settings of one server run: `Config`, and the Azurite-compatible command line that
//! builds it (`parse_arguments`, `USAGE`). What the limits are is `limits`; this is what a run is
//! told: where to listen, on which CPUs and backend, where the data lives, HTTPS, the
//! governor's flags.

use std::net::IpAddr;

use crate::api::control_access::ControlHosts;
use crate::auth::{OAuthLevel, DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use crate::cgroup;
use crate::governor::latency::duration_us;
use crate::governor::GovernorConfig;
use crate::limits::{
    CONNECTIONS_PER_SHARD_MAX_DEFAULT, CONSOLE_SESSION_LIFETIME_MS_DEFAULT,
    CONSOLE_SESSION_LIFETIME_MS_MAX, CONSOLE_SESSION_LIFETIME_MS_MIN, CONTROL_HOST_NAMES_MAX,
    DISK_BYTES_PER_SHARD_MIN, MESSAGE_BYTES_MAX_FALLBACK, MIN_FREE_DISK_PERCENT_DEFAULT,
    SHARDS_MAX, TEXT_MEMORY_SHARE_DEFAULT, WRITE_TIMEOUT_MS_DEFAULT, WRITE_TIMEOUT_MS_MIN,
};
use crate::machine::{allowed_cpus, RuntimeChoice};
use crate::storage::log::Durability;
use crate::storage::space::FreeDiskMin;
use crate::tls::CertificateSource;

/// The command line's help text (`azq --help`).
pub const USAGE: &str = "\
azq: a thread-per-core Azure Queue Storage emulator (drop-in for azurite-queue)

Usage: azq [options]
       azq azurite [options]        (or run as `azurite`: Azurite's command, all services)
       azq azurite-queue [options]  (or run as `azurite-queue`: queues only)

  --queueHost HOST           address to listen on (default 127.0.0.1)
  --queuePort PORT           port to listen on (default 10001; 0 picks a free port)
  --blobHost, --tableHost HOST, --blobPort, --tablePort PORT
                             as azurite: the blob and table ports, which answer readiness
                             probes only (default 127.0.0.1, 10000 and 10002)
  --queue-only               as azurite: no blob or table port
  --shards N                 shards, one pinned core each (default: available CPUs, at most
                             the cgroup's CPU quota rounded up, and --max-disk's 256M a
                             shard; the data directory's count, if smaller, where its
                             texts are more than --max-memory or a change would need more
                             than the memory azq may have, the free disk beyond
                             --min-free-disk or --max-disk)
  --cpus LIST                CPUs to pin shards to, e.g. 0,1 (default: the first N allowed)
  --max-connections N        open connections per shard before new ones get 503
  --write-timeout TIME       close a connection whose client takes no byte of its answers for
                             this long (default 60s; 100ms to 60s)
  --max-memory SIZE          bytes of stored messages and queues (e.g. 512M, 4G; default: half
                             the RAM or of the cgroup's memory limit, the smaller) before Put,
                             Create Queue and Set Queue Metadata answer 503 ServerBusy; a
                             message whose text is on disk only (--text-memory) counts its
                             slot alone, a text that may leave memory also its place (80 B)
  --extentMemoryLimit MB     Azurite's name for the same limit, in megabytes (-1: default)
  --runtime auto|io_uring|portable
                             the event loop: auto (the default) is the portable one
                             (tokio/epoll), measured faster; io_uring (glommio) where the
                             kernel allows it
  -s, --silent               no start-up banner beyond the ready line
  -d, --debug FILE           write a request log to FILE (created 0600; signatures and
                             tokens written as REDACTED)
  --disableProductStyleUrl   only path-style URLs (account in the path)
  -l, --location DIR         keep the queues in DIR/__azq__ (default: the current directory)
  --inMemoryPersistence      keep nothing on disk: a restart starts empty
  --max-disk SIZE            bytes of azq's own files under DIR/__azq__ (log segments and
                             snapshots, split evenly per shard; at least 256M a shard, which
                             caps the default shard count; default: none) before Put, Update
                             with a text, Create Queue, Set Queue Metadata or ACL and Set
                             Service Properties answer 503 ServerBusy, keeping room for a
                             snapshot (which gives space back) to complete; a change of
                             shard count whose old and new files together would pass it,
                             or a new shard's files its share, is refused at start (a
                             default count keeps the files' count)
  --text-memory SIZE|all     bytes of message text kept in memory once written to the log
                             (split evenly per shard; default: half of --max-memory; all:
                             every text, recovered ones too, as before the tiers; texts also
                             leave once a shard's charge passes 3/4 of its --max-memory
                             share); newer texts beyond it are read back from disk when a
                             Get or Peek returns them (a Get of a queue drained fast also up
                             to 1 MiB of
                             those after them, and once a queue is got at least every 15 s
                             the next Get's texts are read before it comes; held up to 32 MiB
                             a shard or a quarter of its --max-memory share, for 2 s or
                             twice the time between the queue's Gets;
                             io_uring's reads keep the 16 KiB of log around each text for the
                             texts near it, up to 32 MiB a shard or an eighth of its
                             --max-memory share), and no longer count in --max-memory (not
                             with --inMemoryPersistence)
  --min-free-disk SIZE|N%    free space to keep on the file system holding DIR, as a size or
                             a share of it (default 5%); the same operations answer 503 before
                             it would be used, and a change of --shards that would use it is
                             refused (not with --inMemoryPersistence)
  --durability fsync|write   acknowledge a change once synced to the device (fsync, the
                             default) or once written to the OS, synced every 200 ms (write:
                             survives a crash of azq, not a power cut)
  --truncateCorruptLog       start even when a log is damaged mid-way, dropping what follows
                             the damage, or a segment a snapshot keeps for texts is damaged
                             or gone, dropping the messages whose texts are not found there
                             (default: refuse to start, naming the file)
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
  --admin                    enable the admin endpoints: fault rules (/_azq/faults), reset
                             (POST /_azq/reset) and the console's actions (send, receive,
                             delete, clear, generate); without it they answer 403. On an
                             account with a private key they need its key, as inspection does
  --control-hosts LIST       host names /_azq/ (console, inspection, admin) answers to besides
                             IP addresses and localhost, comma-separated, e.g. azurite,azq
                             (also from AZQ_CONTROL_HOSTS); '*': any name (DNS rebinding
                             then undefended). Other names get 403
  --session-lifetime TIME    how long a console sign-in lasts (default 1h; 1s to 24h)
  --faults-api               the same as --admin (its former name)
  --faults FILE              fault rules in force from the start (a JSON array)
  --seed N                   make every random choice (faults, latency) repeatable
  --metrics off|on|queues    GET /_azq/metrics (no credentials, any Host): off: 404; on (the
                             default) counts without naming queues; queues adds the depth
                             of the 10 deepest queues by account and name
  --proxyProtocol            every connection to the queue port must begin with a PROXY
                             protocol header (v1 or v2: HAProxy's send-proxy-v2), else it is
                             closed; its client address is what a SAS sip and the request log
                             see. Only behind such a proxy: a client could claim any address
  --skipRequestDateCheck     accept SharedKey requests whatever their x-ms-date/Date (default:
                             403 AuthenticationFailed beyond 15 minutes of the server's
                             clock, or without a date, as Azure; for clients with wrong
                             clocks: a captured request can then be replayed at any time)
  --init FILE                queues (metadata, ACLs, messages) and CORS to start with, JSON or
                             YAML; applied before /_azq/health answers 200. On a restart a
                             queue that exists is left as it is (messages go only into queues
                             this start creates); a bad file exits 2 with its line
  -L, --loose, --skipApiVersionCheck, --disableTelemetry, --blobKeepAliveTimeout N,
  --queueKeepAliveTimeout N, --tableKeepAliveTimeout N
                             accepted for compatibility (azq is always lenient about versions)
  -h, --help, help           this text
  -v, -V, --version, version the version

Usage: azq env [--format sh|powershell|dotenv] [--account NAME] [server options]

  Prints the environment a client needs for a server started with the same options
  (AZURE_STORAGE_CONNECTION_STRING, _ACCOUNT, _KEY, _QUEUE_ENDPOINT): eval \"$(azq env)\".

Usage: azq healthcheck [--queueHost HOST] [--queuePort PORT] [--proxyProtocol]

  Exits 0 when the server on HOST:PORT answers GET /_azq/health with 200 (every shard
  serves), 1 otherwise. HTTP or HTTPS (any certificate), as it serves. The default is the
  queue address of the azq running beside it (its command line in /proc: a container's
  server), else 127.0.0.1:10001; it sends a PROXY protocol header (LOCAL) first when that
  server runs with --proxyProtocol, or when given the flag.

Console: http://HOST:PORT/_azq/ui (read-only without --admin); inspection: /_azq/inspect.

Environment: AZURITE_ACCOUNTS=\"acct1:key1[:key2];acct2:key\" replaces the development account;
AZQ_QUEUE_HOST, AZQ_BLOB_HOST, AZQ_TABLE_HOST and AZQ_LOCATION give --queueHost, --blobHost,
--tableHost and --location when the command line does not (the container image sets them), and
AZQ_QUEUE_PORT, AZQ_BLOB_PORT and AZQ_TABLE_PORT the ports (as .NET Aspire passes an executable
its endpoints' ports); AZQ_RUN_AS=UID:GID: started as root, azq reads its --cert, --key files
and then runs as that user (the image sets 65532:65532).
";

/// Where the server keeps its queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing is written; a restart starts empty (`--inMemoryPersistence`).
    Memory,
    /// A log and snapshots under `location` (`--location`, default the working directory).
    Disk {
        /// The workspace directory; the data lives in its `__azq__` directory.
        location: std::path::PathBuf,
        /// When a change counts as written (`--durability`).
        durability: Durability,
        /// Start past a damaged log, losing what follows the damage (`--truncateCorruptLog`).
        truncate_corrupt: bool,
    },
}

/// Settings of one server run, from the command line and the environment.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address every shard's listener binds (`--queueHost`).
    pub host: IpAddr,
    /// Port every shard's listener binds (`--queuePort`); 0 picks a free port.
    pub port: u16,
    /// CPU each shard's executor is pinned to; its length is the shard count.
    pub cpus: Vec<usize>,
    /// Open connections one shard accepts before it answers 503 (`--max-connections`).
    pub connections_per_shard_max: usize,
    /// How long a write to a client may make no progress before the connection is closed
    /// (`--write-timeout`), ms.
    pub write_timeout_ms: u64,
    /// Bytes of stored messages (text plus `MESSAGE_OVERHEAD_BYTES` each; the overhead alone
    /// while a text is on disk only) across all shards, split evenly between them
    /// (`--max-memory`); beyond it Put answers 503 `ServerBusy`.
    pub message_bytes_max: u64,
    /// Where `message_bytes_max` came from, in words for the ready line (`--max-memory`, half
    /// the RAM, half the cgroup's memory limit).
    pub message_bytes_max_origin: String,
    /// Bytes of azq's own files (log segments, snapshots) across all shards, split evenly
    /// between them (`--max-disk`); `None`: no limit.
    pub disk_bytes_max: Option<u64>,
    /// Free space kept on the file system holding the data (`--min-free-disk`).
    pub free_disk_min: FreeDiskMin,
    /// Bytes of message text kept in memory once written to the log, across all shards, split
    /// evenly between them (`--text-memory`); `None`: every text.
    pub text_bytes_max: Option<u64>,
    /// Where the shard count came from, in words for the ready line (`--shards`, `--cpus`,
    /// every CPU this process may use, the cgroup's CPU quota, `--max-disk`'s share).
    pub shards_origin: String,
    /// The shard count is a default (neither `--shards` nor `--cpus`): a data directory whose
    /// change of shard count would be refused keeps its own (`RecoveryOptions::shards_default`).
    pub shards_default: bool,
    /// Do not log requests (`--silent`).
    pub silent: bool,
    /// File that receives the debug log (`--debug FILE`).
    pub debug_log_path: Option<std::path::PathBuf>,
    /// Accounts and their keys: `(name, [base64 key, …])`.
    pub accounts: Vec<(String, Vec<String>)>,
    /// Only path-style URLs, never host-style (`--disableProductStyleUrl`).
    pub product_style_url_disabled: bool,
    /// The event loop under the shards (`--runtime`).
    pub runtime: RuntimeChoice,
    /// Where the queues are kept.
    pub persistence: Persistence,
    /// The certificate to serve HTTPS with (`--cert`, `--key`, `--pwd`); `None`: plain HTTP.
    pub certificate: Option<CertificateSource>,
    /// Bearer tokens accepted (`--oauth`); over HTTPS only (`certificate`), refused otherwise.
    pub oauth: Option<OAuthLevel>,
    /// SharedKey requests accepted whatever their date (`--skipRequestDateCheck`).
    pub request_date_check_skipped: bool,
    /// Every connection to the queue port begins with a PROXY protocol header (v1 or v2), whose
    /// client address a SAS `sip` and the request log see (`--proxyProtocol`).
    pub proxy_protocol: bool,
    /// Rate limits, added latency, fault injection (`governor`).
    pub governor: GovernorConfig,
    /// `--init FILE`: queues, settings and messages applied before the shards serve.
    pub init_path: Option<String>,
    /// The names `/_azq/` answers to besides IP literals and loopback (`--control-hosts`).
    pub control_hosts: ControlHosts,
    /// How long a console session lasts, ms (`--session-lifetime`).
    pub session_lifetime_ms: u64,
}

/// Half of the memory this process may have, the smaller of the machine's and its cgroup's
/// limit (a container's `--memory`): room for a great many messages while leaving the rest to
/// the system, so a runaway producer gets 503s instead of the out-of-memory killer. With where
/// it came from, for the ready line.
fn default_message_bytes_max() -> (u64, String) {
    cgroup::default_message_bytes_max(ram_bytes(), &cgroup::read(), MESSAGE_BYTES_MAX_FALLBACK)
}

/// The machine's RAM, bytes, when it can be read.
fn ram_bytes() -> Option<u64> {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page_bytes) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page_bytes > 0).then(|| (pages as u64).saturating_mul(page_bytes as u64))
}

/// The memory this process may have: the smaller of the RAM and its cgroup's memory limit,
/// when either can be read (what a change of shard count must fit in: `RecoveryOptions::
/// reshard_memory_bytes_max`).
pub fn memory_bytes() -> Option<u64> {
    let limit = cgroup::read().memory.map(|limit| limit.bytes);
    [ram_bytes(), limit].into_iter().flatten().min()
}

impl Default for Config {
    fn default() -> Self {
        let (message_bytes_max, message_bytes_max_origin) = default_message_bytes_max();
        Config {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 10001,
            cpus: vec![0],
            connections_per_shard_max: CONNECTIONS_PER_SHARD_MAX_DEFAULT,
            write_timeout_ms: WRITE_TIMEOUT_MS_DEFAULT,
            message_bytes_max,
            message_bytes_max_origin,
            disk_bytes_max: None,
            free_disk_min: FreeDiskMin::Percent(MIN_FREE_DISK_PERCENT_DEFAULT),
            text_bytes_max: None,
            shards_origin: "one CPU".to_string(),
            shards_default: true,
            silent: false,
            debug_log_path: None,
            accounts: vec![(
                DEVELOPMENT_ACCOUNT_NAME.to_string(),
                vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
            )],
            product_style_url_disabled: false,
            runtime: RuntimeChoice::Auto,
            persistence: Persistence::Disk {
                location: std::path::PathBuf::from("."),
                durability: Durability::Fsync,
                truncate_corrupt: false,
            },
            certificate: None,
            oauth: None,
            request_date_check_skipped: false,
            proxy_protocol: false,
            governor: Default::default(),
            init_path: None,
            control_hosts: ControlHosts::Names(Vec::new()),
            session_lifetime_ms: CONSOLE_SESSION_LIFETIME_MS_DEFAULT,
        }
    }
}

/// A whole number of seconds, minutes or hours (`90s`, `30m`, `1h`) in ms.
fn lifetime_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    let unit_ms = match text.bytes().last()? {
        b's' => 1_000,
        b'm' => 60_000,
        b'h' => 3_600_000,
        _ => return None,
    };
    let number = &text[..text.len() - 1];
    if number.is_empty() || !number.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    number.parse::<u64>().ok()?.checked_mul(unit_ms)
}

/// Parses the command line (without the program name); `None` when it asked for help or the
/// version, which this prints.
pub fn parse_arguments(arguments: impl Iterator<Item = String>) -> Result<Option<Config>, String> {
    let mut config = Config::default();
    let mut shards: Option<usize> = None;
    let mut cpus: Option<Vec<usize>> = None;
    let (mut location, mut in_memory) = (None, false);
    // `--max-disk` or `--min-free-disk` given: they need files, so not in memory.
    let mut disk_flag: Option<String> = None;
    // `--text-memory` given: else a durable server takes `TEXT_MEMORY_SHARE_DEFAULT`.
    let mut text_memory_given = false;
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
            "--write-timeout" => {
                config.write_timeout_ms = duration_us(&value(&flag)?)
                    .ok()
                    .map(|us| us / 1000)
                    .filter(|ms| (WRITE_TIMEOUT_MS_MIN..=WRITE_TIMEOUT_MS_DEFAULT).contains(ms))
                    .ok_or_else(|| {
                        "--write-timeout must be a time from 100ms to 60s, e.g. 30s".to_string()
                    })?
            }
            "--control-hosts" => {
                let hosts = ControlHosts::parse(&value(&flag)?)
                    .map_err(|why| format!("--control-hosts: {why}"))?;
                config.control_hosts = config.control_hosts.clone().merged(hosts);
                if config.control_hosts.name_count() > CONTROL_HOST_NAMES_MAX {
                    return Err(format!(
                        "--control-hosts: at most {CONTROL_HOST_NAMES_MAX} names"
                    ));
                }
            }
            "--session-lifetime" => {
                config.session_lifetime_ms = lifetime_ms(&value(&flag)?)
                    .filter(|ms| {
                        (CONSOLE_SESSION_LIFETIME_MS_MIN..=CONSOLE_SESSION_LIFETIME_MS_MAX)
                            .contains(ms)
                    })
                    .ok_or_else(|| {
                        "--session-lifetime must be a time from 1s to 24h, e.g. 30m".to_string()
                    })?
            }
            "--max-memory" => {
                config.message_bytes_max = parse_size(&value(&flag)?)
                    .filter(|&bytes| bytes > 0)
                    .ok_or_else(|| "--max-memory must be a size such as 512M or 4G".to_string())?;
                config.message_bytes_max_origin = flag.clone();
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
                    config.message_bytes_max_origin = flag.clone();
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
            "--max-disk" => {
                let bytes = parse_size(&value(&flag)?)
                    .filter(|&bytes| bytes > 0)
                    .ok_or_else(|| "--max-disk must be a size such as 512M or 4G".to_string())?;
                config.disk_bytes_max = Some(bytes);
                disk_flag = Some(flag.clone());
            }
            "--text-memory" => {
                let text = value(&flag)?;
                config.text_bytes_max = match text.as_str() {
                    "all" => None,
                    size => Some(parse_size(size).ok_or_else(|| {
                        "--text-memory must be a size such as 64M or 1G, or all".to_string()
                    })?),
                };
                text_memory_given = true;
                disk_flag = Some(flag.clone());
            }
            "--min-free-disk" => {
                config.free_disk_min = parse_free_disk_min(&value(&flag)?).ok_or_else(|| {
                    "--min-free-disk must be a size such as 2G or a share such as 5%".to_string()
                })?;
                disk_flag = Some(flag.clone());
            }
            "--durability" => {
                durability = Durability::parse(&value(&flag)?)
                    .ok_or_else(|| "--durability must be fsync or write".to_string())?
            }
            "--truncateCorruptLog" => truncate_corrupt = true,
            "--init" => config.init_path = Some(value(&flag)?),
            flag if crate::governor::FLAGS.contains(&flag) => {
                config.governor.parse_flag(flag, || value(flag))?
            }
            "-L" | "--loose" | "--skipApiVersionCheck" | "--disableTelemetry" => {}
            "--skipRequestDateCheck" => config.request_date_check_skipped = true,
            "--proxyProtocol" => config.proxy_protocol = true,
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
        // Unlike --location (ignored, as Azurite does), a disk limit without files, or texts
        // read back from a log that is not written, would silently do nothing: refused.
        if let Some(flag) = disk_flag {
            return Err(format!(
                "{flag} needs azq's files, and --inMemoryPersistence keeps none"
            ));
        }
        // As with Azurite, --inMemoryPersistence wins over --location.
        Persistence::Memory
    } else {
        if !text_memory_given {
            let (part, whole) = TEXT_MEMORY_SHARE_DEFAULT;
            config.text_bytes_max = Some(config.message_bytes_max / whole * part);
        }
        Persistence::Disk {
            location: location.unwrap_or_else(|| std::path::PathBuf::from(".")),
            durability,
            truncate_corrupt,
        }
    };
    config.shards_default = cpus.is_none() && shards.is_none();
    config.shards_origin = match (&cpus, shards) {
        (Some(_), _) => "--cpus".to_string(),
        (None, Some(_)) => "--shards".to_string(),
        (None, None) => String::new(),
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
            let allowed = allowed_cpus();
            // By default every CPU this process may use, but no more than a container's CPU
            // quota allows (rounded up), as Go's runtime and the JVM size themselves.
            let count = count.unwrap_or_else(|| {
                let (count, origin) = cgroup::default_shard_count(allowed.len(), &cgroup::read());
                config.shards_origin = origin;
                // No more shards than --max-disk gives each its least share (below one, the
                // check after this refuses): a limit between one and two shares on two CPUs
                // was refused before recovery could keep a one-shard data directory
                // (helper-57's review), and a fresh start had to say --shards 1 as well.
                match config
                    .disk_bytes_max
                    .map(|bytes| bytes / DISK_BYTES_PER_SHARD_MIN)
                {
                    Some(fit) if fit >= 1 && (fit as usize) < count => {
                        config.shards_origin = format!(
                            "--max-disk's ({} a shard at least)",
                            cgroup::format_bytes(DISK_BYTES_PER_SHARD_MIN)
                        );
                        fit as usize
                    }
                    _ => count,
                }
            });
            if count > allowed.len() {
                return Err(format!(
                    "--shards {count} needs {count} CPUs but this process may use {}",
                    allowed.len()
                ));
            }
            allowed[..count].to_vec()
        }
    };
    // Below it, a shard would refuse every Put from the start (`storage::space`).
    if let Some(bytes) = config.disk_bytes_max {
        let shards = config.cpus.len() as u64;
        if bytes / shards < DISK_BYTES_PER_SHARD_MIN {
            return Err(format!(
                "--max-disk must leave each shard at least {} MiB ({shards} shard{})",
                DISK_BYTES_PER_SHARD_MIN >> 20,
                if shards == 1 { "" } else { "s" }
            ));
        }
    }
    Ok(Some(config))
}

/// Parses `--min-free-disk`: a size (`parse_size`) or a whole percentage up to 100 (`5%`).
fn parse_free_disk_min(text: &str) -> Option<FreeDiskMin> {
    match text.trim().strip_suffix('%') {
        Some(percent) => percent
            .parse()
            .ok()
            .filter(|&percent| percent <= 100)
            .map(FreeDiskMin::Percent),
        None => parse_size(text).map(FreeDiskMin::Bytes),
    }
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

#[cfg(test)]
mod tests {
    use super::{
        parse_arguments, parse_free_disk_min, parse_size, Config, ControlHosts, FreeDiskMin,
        Persistence,
    };
    use crate::machine::RuntimeChoice;
    use crate::storage::log::Durability;

    fn parse(arguments: &[&str]) -> Result<Option<Config>, String> {
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
            Some(crate::tls::CertificateSource::Pem {
                certificate: "c.pem".into(),
                key: "k.pem".into()
            })
        );
        assert_eq!(https.oauth, Some(crate::auth::OAuthLevel::Basic));
        // As Azurite, --oauth without --cert starts (bearer tokens are then refused).
        assert_eq!(
            parse(&["--oauth", "basic"]).unwrap().unwrap().oauth,
            Some(crate::auth::OAuthLevel::Basic)
        );
        let pfx = parse(&["--cert=c.pfx", "--pwd=secret"]).unwrap().unwrap();
        assert!(matches!(
            pfx.certificate,
            Some(crate::tls::CertificateSource::Pfx { .. })
        ));
        assert_eq!(
            parse(&["--cert", "auto"]).unwrap().unwrap().certificate,
            Some(crate::tls::CertificateSource::Auto)
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
        assert!(governed.admin);
        use crate::governor::metrics::Exposure;
        assert_eq!(Config::default().governor.metrics, Exposure::Counts);
        for (value, exposure) in [
            ("off", Exposure::Off),
            ("on", Exposure::Counts),
            ("queues", Exposure::Queues),
        ] {
            let config = parse(&["--metrics", value]).unwrap().unwrap();
            assert_eq!(config.governor.metrics, exposure, "{value}");
        }
        assert!(parse(&["--proxyProtocol"]).unwrap().unwrap().proxy_protocol);
        assert!(!Config::default().proxy_protocol);
        let lenient = parse(&["--skipRequestDateCheck"]).unwrap().unwrap();
        assert!(lenient.request_date_check_skipped);
        assert!(!Config::default().request_date_check_skipped);
        assert_eq!(Config::default().write_timeout_ms, 60_000);
        let signed = parse(&[
            "--session-lifetime",
            "30m",
            "--control-hosts",
            "azurite,Azq",
        ]);
        let signed = signed.unwrap().unwrap();
        assert_eq!(signed.session_lifetime_ms, 1_800_000);
        assert_eq!(
            signed.control_hosts,
            ControlHosts::Names(vec!["azurite".into(), "azq".into()])
        );
        assert_eq!(Config::default().session_lifetime_ms, 3_600_000);
        let any = parse(&["--control-hosts=*"]).unwrap().unwrap();
        assert_eq!(any.control_hosts, ControlHosts::Any);
        let hasty = parse(&["--write-timeout", "2s"]).unwrap().unwrap();
        assert_eq!(hasty.write_timeout_ms, 2_000);
        for command in ["help", "version", "-v", "-h"] {
            assert!(parse(&[command]).unwrap().is_none(), "{command}");
        }
        for refused in [
            &["--extentMemoryLimit", "0"][..],
            &["--session-lifetime", "0s"],
            &["--session-lifetime", "25h"],
            &["--session-lifetime", "1d"],
            &["--session-lifetime", "-1h"],
            &["--session-lifetime", "h"],
            &["--control-hosts", "evil example"],
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
            &["--write-timeout", "50ms"],
            &["--write-timeout", "61s"],
            &["--write-timeout", "30"],
            &["--metrics", "all"],
            &["--max-disk", "0"],
            &["--max-disk", "lots"],
            &["--max-disk"],
            // Less than four segments a shard.
            &["--max-disk", "255M", "--shards", "1"],
            &["--min-free-disk", "101%"],
            &["--min-free-disk", "-1%"],
            &["--min-free-disk", "five"],
            // No files to limit.
            &["--inMemoryPersistence", "--max-disk", "1G"],
            &["--min-free-disk", "1G", "--inMemoryPersistence"],
            &["--text-memory", "64M", "--inMemoryPersistence"],
            &["--text-memory", "some"],
            &["--text-memory"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn disk_limits() {
        let default = parse(&[]).unwrap().unwrap();
        assert_eq!(default.disk_bytes_max, None);
        assert_eq!(default.free_disk_min, FreeDiskMin::Percent(5));
        let limited = parse(&["--max-disk", "384M", "--shards", "1", "--min-free-disk=2G"]);
        let limited = limited.unwrap().unwrap();
        assert_eq!(limited.disk_bytes_max, Some(384 << 20));
        assert_eq!(limited.free_disk_min, FreeDiskMin::Bytes(2 << 30));
        // A default shard count leaves each shard at least its least share of --max-disk;
        // given, a count that does not is refused.
        let cpus = default.cpus.len();
        for (bytes, fit) in [
            ("256M", 1),
            ("511M", 1),
            ("512M", 2),
            ("1G", 4),
            ("64G", 256),
        ] {
            let config = parse(&["--max-disk", bytes]).unwrap().unwrap();
            assert_eq!(config.cpus.len(), cpus.min(fit), "{bytes}");
            assert!(config.shards_default);
            assert_eq!(
                config.shards_origin.starts_with("--max-disk's"),
                fit < cpus,
                "{bytes}: {}",
                config.shards_origin
            );
        }
        if cpus > 1 {
            assert!(parse(&["--max-disk", "511M", "--shards", "2"]).is_err());
        }
        // A durable server keeps half its --max-memory of texts, wherever the flags are;
        // one in memory keeps every text.
        assert_eq!(
            default.text_bytes_max,
            Some(default.message_bytes_max / 2),
            "{default:?}"
        );
        for (flags, expected) in [
            (&["--max-memory", "3G"][..], 3 << 29),
            (&["--max-memory", "3G", "-l", "data"][..], 3 << 29),
            (&["--text-memory=64M", "--max-memory", "3G"][..], 64 << 20),
            (&["--max-memory", "3G", "--text-memory", "0"][..], 0),
        ] {
            let config = parse(flags).unwrap().unwrap();
            assert_eq!(config.text_bytes_max, Some(expected), "{flags:?}");
        }
        let in_memory = parse(&["--inMemoryPersistence", "--max-memory", "3G"]);
        assert_eq!(in_memory.unwrap().unwrap().text_bytes_max, None);
        let every = parse(&["--max-memory", "3G", "--text-memory", "all"]);
        assert_eq!(every.unwrap().unwrap().text_bytes_max, None);
        assert!(parse(&["--inMemoryPersistence", "--text-memory", "all"]).is_err());
        assert!(parse(&["--text-memory", "All"]).is_err());
        let texts = parse(&["--text-memory", "0"]).unwrap().unwrap();
        assert_eq!(texts.text_bytes_max, Some(0));
        let texts = parse(&["--text-memory=64M"]).unwrap().unwrap();
        assert_eq!(texts.text_bytes_max, Some(64 << 20));
        let cases = [
            ("0%", Some(FreeDiskMin::Percent(0))),
            ("100%", Some(FreeDiskMin::Percent(100))),
            (" 7% ", Some(FreeDiskMin::Percent(7))),
            ("0", Some(FreeDiskMin::Bytes(0))),
            ("512K", Some(FreeDiskMin::Bytes(512 << 10))),
            ("101%", None),
            ("1.5%", None),
            ("%", None),
            ("5 %", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_free_disk_min(text), expected, "{text:?}");
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
